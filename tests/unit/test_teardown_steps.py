# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""teardown.yml and remove_host.yml share one list of the roles' teardown steps
(playbooks/steps/teardown_roles.yml), in the safe order: workers, frontend, Maru pool, KVCR units,
etcd client proxy, then each caller's etcd step. Offline: ansible-playbook --list-hosts only parses."""
import os
import re
import subprocess

import pytest
import yaml

import render_lib

pytestmark = pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")

SHARED = "playbooks/steps/teardown_roles.yml"
SHARED_PLAYS = [
    ("Stop and remove the workers", "dynamo_workers"),
    ("Stop and remove the frontend", "dynamo_frontend"),
    ("Stop and remove the Maru pool services (maru-server, then the resource manager)", "maru_pool"),
    ("Stop and remove the KVCR units (health probe, state agent, memory service)", "kvcr"),
    ("Stop and remove the local etcd client proxy", "dynamo"),
]
# The roles whose teardown is shared, in order (each role's wipe.yml right after its teardown.yml).
SHARED_ROLES = [("dynamo_worker", "teardown.yml"), ("dynamo_frontend", "teardown.yml"), ("maru_pool", "teardown.yml"),
                ("maru_pool", "wipe.yml"), ("kvcr", "teardown.yml"), ("kvcr", "wipe.yml"),
                ("etcd_client", "teardown.yml")]

# "all" is a worker, a pool, a KVCR host, an etcd member: in every group that a step plays on.
INVENTORY = {"all": {"children": {
    "dynamo": {"children": {"dynamo_frontend": {"hosts": {"fe": {}}}, "dynamo_workers": {"hosts": {"all4": {}}}}},
    "maru_pool": {"hosts": {"all4": {}}}, "kvcr": {"hosts": {"all4": {}}}, "etcd": {"hosts": {"fe": {}, "all4": {}}}}}}


def plays(tmp_path, playbook, *extra):
    """[(play name, [its hosts, sorted])] in the order ansible-playbook runs them."""
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(INVENTORY))
    proc = subprocess.run([render_lib.ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inventory.yml"), playbook, "--list-hosts"]
                          + list(extra), cwd=render_lib.REPO, env=render_lib.ansible_env(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = []
    for block in re.split(r"\n(?=  play #)", proc.stdout)[1:]:
        head = re.match(r"  play #\d+ \(.*?\): (.*?)\tTAGS", block)
        found.append((head.group(1), sorted(re.findall(r"^      (\S+)$", block, re.M))))
    return found


def test_teardown_runs_the_shared_steps_then_etcd(tmp_path):
    got = plays(tmp_path, "playbooks/teardown.yml")
    assert got == (
        [("Confirm the teardown", ["all4", "fe"])]
        + [(name, ["fe"] if group == "dynamo_frontend" else ["all4", "fe"] if group == "dynamo" else ["all4"])
           for name, group in SHARED_PLAYS]
        + [("Stop etcd (teardown_etcd=true)", ["all4", "fe"]), ("Reload systemd", ["all4", "fe"])])


def test_remove_host_runs_the_shared_steps_on_its_host_only(tmp_path):
    got = plays(tmp_path, "playbooks/remove_host.yml", "-e", "remove_host=all4")
    assert got == (
        [("Check the host to remove", ["localhost"]), ("Check that the host's etcd member can leave", ["all4"])]
        + [(name, [] if group == "dynamo_frontend" else ["all4"]) for name, group in SHARED_PLAYS]
        + [("Take the etcd member out of the cluster", ["all4"]), ("Finish the removal", ["all4"])])


def _includes(path):
    """[(role, tasks_from)] of the include_role tasks of a playbook file, in order."""
    with open(os.path.join(render_lib.REPO, path), encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    return [(task["ansible.builtin.include_role"]["name"].split(".")[-1],
             task["ansible.builtin.include_role"].get("tasks_from"))
            for play in doc for task in play.get("tasks") or [] if "ansible.builtin.include_role" in task]


def test_each_role_teardown_is_listed_once():
    """The shared steps are only in the shared file; each caller adds its etcd step alone."""
    assert _includes(SHARED) == SHARED_ROLES
    assert _includes("playbooks/teardown.yml") == [("etcd", "teardown.yml"), ("etcd", "wipe.yml")]
    assert _includes("playbooks/remove_host.yml") == [("etcd", "leave_check.yml"), ("etcd", "leave.yml")]


def test_the_shared_steps_alone_touch_no_host(tmp_path):
    """Run by itself (not imported), no play of the shared file matches a host."""
    assert all(hosts == [] for dummy, hosts in plays(tmp_path, SHARED))
