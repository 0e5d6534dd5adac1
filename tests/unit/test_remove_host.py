# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""playbooks/remove_host.yml refuses, before any change, a host the stack cannot lose, and asks
before draining one it can; offline (every host is a closed loopback port: a run that got past its
first play would report it UNREACHABLE). The etcd role's leave check runs here on this machine
(connection local) against a fake etcdctl that prints what a cluster would. The day-2 suite removes a
worker host that is also an etcd member from a running stack (tests/day2/test_3_scale_out.py) and
is refused the removal of one whose others would lose quorum (tests/day2/test_6_etcd_member_replace.py)."""
import json
import os

import pytest

from test_lifecycle_playbooks import closed_port, run, unreachable

import render_lib

pytestmark = pytest.mark.skipif(not render_lib.os.path.exists(render_lib.ANSIBLE_PLAYBOOK),
                                reason="ansible-playbook not in the venv")


def inventory(port):
    """fe: frontend and etcd; pool: etcd and a Maru pool that a worker on w1 uses; w1: etcd and that
    worker; w2: a worker host without pool clients elsewhere."""
    host = unreachable(port)
    worker = {"name": "w", "engine": "vllm", "model": "m", "gpus": ["0"], "kv_pool": {"type": "maru", "host": "pool"}}
    return {"all": {"children": {
        "dynamo": {"children": {"dynamo_frontend": {"hosts": {"fe": host}},
                                "dynamo_workers": {"hosts": {"w1": dict(host, dynamo_workers=[worker]),
                                                             "w2": dict(host, dynamo_workers=[dict(worker, kv_pool=None)])}}}},
        "maru_pool": {"hosts": {"pool": host}},
        "etcd": {"hosts": {"fe": {}, "pool": {}, "w1": {}}}}}}


@pytest.mark.parametrize("extra,message", [
    ((), "remove_host: name the host with -e remove_host=<inventory name>"),
    (("-e", "remove_host=nope"), 'remove_host: "nope" is not a host of this inventory'),
    (("-e", "remove_host=fe"), "remove_host: fe runs the frontend (group dynamo_frontend), the stack's only one"),
    (("-e", "remove_host=pool"), "remove_host: pool runs the Maru pool of workers on other hosts"
                                 " (dynamo_workers[w].kv_pool on w1)"),
    # No terminal: the question gets no answer and the run stops there.
    (("-e", "remove_host=w2"), "remove_host stopped before any change: the answer was not 'yes'"),
], ids=["unnamed", "unknown", "frontend", "pool_of_others", "no_answer"])
def test_refused_before_any_change(tmp_path, extra, message):
    rc, out = run(tmp_path, "playbooks/remove_host.yml", inventory(closed_port()), *extra)
    assert rc != 0, out[-4000:]
    assert message in " ".join(out.split()), out[-4000:]
    # The first play ended the run: no play on the host started.
    assert out.count("PLAY [") == 1 and "UNREACHABLE" not in out, out[-4000:]


def test_the_only_etcd_member_is_refused(tmp_path):
    inv = inventory(closed_port())
    inv["all"]["children"]["etcd"]["hosts"] = {"w2": {}}
    rc, out = run(tmp_path, "playbooks/remove_host.yml", inv, "-e", "remove_host=w2")
    assert rc != 0 and "remove_host: w2 is the only etcd member" in " ".join(out.split()), out[-4000:]
    assert "UNREACHABLE" not in out, out[-4000:]


def test_confirmed_it_goes_to_the_host(tmp_path):
    """With the confirmation skipped the host's own play starts (and fails: it cannot be reached), and
    the host, failed, is in none of the plays after it: no step of the drain runs."""
    rc, out = run(tmp_path, "playbooks/remove_host.yml", inventory(closed_port()), "-e", "remove_host=w1",
                  "-e", "remove_host_skip_confirmation=true")
    assert rc != 0 and "PLAY [Check that the host's etcd member can leave]" in out and "UNREACHABLE" in out, out[-4000:]
    assert "TASK [Stop and remove this host's workers]" not in out and "TASK [Remove this etcd member" not in out, \
        out[-4000:]


LEAVE_CHECK_PLAY = """
- name: The etcd leave check of remove_host.yml
  hosts: all
  gather_facts: false
  tasks:
    - name: Check that this etcd member can leave
      ansible.builtin.include_role:
        name: kvshare.dynamo.etcd
        tasks_from: leave_check.yml

    - name: What leave.yml would remove
      ansible.builtin.debug:
        msg: "{{ __etcd_leave_self | map(attribute='ID') | list }}"
"""

FAKE_ETCDCTL = """#!/bin/sh
# etcdctl as a member of the test's cluster answers: the two outputs, and the health probe's status
here=$(dirname "$0")
echo "$*" >> "$here/calls"
case "$*" in
  *"member list"*) cat "$here/members.json" ;;
  *"endpoint health"*) cat "$here/health.json"; exit "$(cat "$here/health.rc")" ;;
  *) exit 2 ;;
esac
"""


def leave_check(tmp_path, count, leaving, down=()):
    """Run roles/etcd/tasks/leave_check.yml as sb<leaving> of sb1..sb<count> (127.0.0.<n>), the
    `down` members unhealthy: (CompletedProcess, tasks, etcdctl calls)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    members = [{"ID": 0x1000 + i, "name": "sb%d" % i, "peerURLs": ["https://127.0.0.%d:2380" % i],
                "clientURLs": ["https://127.0.0.%d:2379" % i]} for i in range(1, count + 1)]
    (bindir / "members.json").write_text(json.dumps({"header": {}, "members": members}))
    (bindir / "health.json").write_text(json.dumps([{"endpoint": "https://127.0.0.%d:2379" % i, "health": i not in down}
                                                    for i in range(1, count + 1)]))
    (bindir / "health.rc").write_text("1" if down else "0")
    (bindir / "etcdctl").write_text(FAKE_ETCDCTL)
    os.chmod(bindir / "etcdctl", 0o755)
    host = {"etcd_address": "127.0.0.%d" % leaving, "etcd_client_port": 2379, "etcd_peer_port": 2380,
            "etcd_install_method": "tarball", "__etcd_tarball_bin_dir": str(bindir)}
    proc, tasks = render_lib.run_local_play(tmp_path, LEAVE_CHECK_PLAY, hosts={"sb%d" % leaving: host})
    calls = (bindir / "calls").read_text().splitlines() if (bindir / "calls").exists() else []
    return proc, tasks, calls


def _result(tasks, name):
    found = [t["hosts"] for t in tasks if t["task"]["name"].endswith(name)]
    assert found, [t["task"]["name"] for t in tasks]
    return list(found[-1].values())[0]


def test_leave_check_refuses_a_removal_that_loses_quorum(tmp_path):
    """The text tests/day2/test_6_etcd_member_replace.py asserts on, before leave.yml is reached."""
    proc, tasks, calls = leave_check(tmp_path, 3, 3, down=(2,))
    assert proc.returncode != 0, proc.stdout[-3000:]
    refusal = _result(tasks, "Refuse a removal that loses quorum or goes through an unhealthy member")
    assert refusal.get("failed") and refusal["msg"] == (
        "remove_host: removing the etcd member sb3 would leave 2 member(s) of which 1 healthy; they need 2"
        " for quorum. Bring the unhealthy members back first (unhealthy: sb2)."), refusal
    assert calls and all("--endpoints=https://127.0.0.3:2379" in c for c in calls), calls
    assert not [t for t in tasks if t["task"]["name"] == "What leave.yml would remove"]


def test_leave_check_lets_a_member_go_when_the_others_keep_quorum(tmp_path):
    proc, tasks, dummy = leave_check(tmp_path, 5, 5, down=(1,))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert _result(tasks, "Refuse a removal that loses quorum or goes through an unhealthy member").get("skipped")
    assert _result(tasks, "What leave.yml would remove")["msg"] == [0x1005]
