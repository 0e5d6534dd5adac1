# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""playbooks/remove_host.yml refuses, before any change, a host the stack cannot lose, and asks
before draining one it can; offline (every host is a closed loopback port: a run that got past its
first play would report it UNREACHABLE). The day-2 suite removes a worker host that is also an etcd
member from a running stack (tests/day2/test_3_scale_out.py)."""
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
    assert "PLAY [Drain and remove the host]" not in out and "UNREACHABLE" not in out, out[-4000:]


def test_the_only_etcd_member_is_refused(tmp_path):
    inv = inventory(closed_port())
    inv["all"]["children"]["etcd"]["hosts"] = {"w2": {}}
    rc, out = run(tmp_path, "playbooks/remove_host.yml", inv, "-e", "remove_host=w2")
    assert rc != 0 and "remove_host: w2 is the only etcd member" in " ".join(out.split()), out[-4000:]
    assert "UNREACHABLE" not in out, out[-4000:]


def test_confirmed_it_goes_to_the_host(tmp_path):
    """With the confirmation skipped the host's own play starts (and fails: it cannot be reached)."""
    rc, out = run(tmp_path, "playbooks/remove_host.yml", inventory(closed_port()), "-e", "remove_host=w1",
                  "-e", "remove_host_skip_confirmation=true")
    assert rc != 0 and "PLAY [Drain and remove the host]" in out and "UNREACHABLE" in out, out[-4000:]
