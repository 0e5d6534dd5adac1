# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The YAML duplicate scan (tests/lib/yaml_dupes.py): the fast re-run lives in one shared step,
no block of tasks repeated across files holds it, and the repo's repeated blocks do not grow."""
import os

import pytest
import yaml

from tests.lib import yaml_dupes

REPO = yaml_dupes.REPO
STEP = ("roles/kvshare/tasks/fast_rerun.yml", "roles/kvshare/tasks/fast_rerun_read.yml", "roles/kvshare/tasks/fast_rerun_record.yml")
# Repeated 3-task blocks left (measured when the fast re-run became one step; see the scan's
# output): two PKI sequences of etcd and etcd_client, two preflight idioms, the liveness timers'
# retirement. A new copy fails here: share it (module_utils, a shared step) or raise this with a reason.
MAX_REPEATED = 5


def _load(rel):
    with open(os.path.join(REPO, rel)) as handle:
        return yaml.safe_load(handle)


def _calls(rel):
    """(role, tasks_from, vars) of each include_role in a task file."""
    return [(task["ansible.builtin.include_role"]["name"], task["ansible.builtin.include_role"].get("tasks_from"),
             task.get("vars") or {})
            for task in _load(rel) or [] if "ansible.builtin.include_role" in task]


def test_only_the_shared_step_calls_converged():
    callers = sorted(rel for rel in yaml_dupes.yaml_files() if "kvshare.dynamo.converged:" in open(os.path.join(REPO, rel)).read())
    assert callers == sorted(STEP), "the fast re-run is written outside its shared step: %s" % callers


@pytest.mark.parametrize("role", sorted(d for d in os.listdir(os.path.join(REPO, "roles"))
                                        if os.path.exists(os.path.join(REPO, "roles", d, "tasks", "converge.yml"))))
def test_every_role_with_a_body_uses_the_step(role):
    calls = _calls("roles/%s/tasks/main.yml" % role)
    steps = [(tasks_from, args.get("kvshare_fast_rerun_role")) for name, tasks_from, args in calls if name == "kvshare.dynamo.kvshare"]
    assert steps == [("fast_rerun.yml", role), ("fast_rerun_record.yml", role)], steps


def test_no_repeated_block_holds_the_fast_rerun():
    found = yaml_dupes.repeated()
    held = [places for window, places in found.items() if any(module == "kvshare.dynamo.converged" for module, dummy in window)]
    assert not held, held


def test_repeated_blocks_do_not_grow():
    found = yaml_dupes.repeated()
    assert len(found) <= MAX_REPEATED, "\n".join("%s: %s" % (" -> ".join(m for m, dummy in window), places)
                                                 for window, places in found.items())


def _write(root, rel, tasks):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        yaml.safe_dump(tasks, handle)


def test_scan_finds_a_block_copied_with_other_names_and_values(tmp_path):
    block = [{"name": "Compare", "kvshare.dynamo.converged": {"name": "a"}, "register": "__a_converged"},
             {"name": "Body", "ansible.builtin.include_tasks": {"file": "converge.yml"}, "when": "x"},
             {"name": "Record", "kvshare.dynamo.converged": {"name": "a", "state": "record"}, "when": "x"}]
    copy = [{"name": "Compare b", "kvshare.dynamo.converged": {"name": "b", "run_whole": []}, "register": "__b_converged"},
            {"name": "Body b", "ansible.builtin.include_tasks": {"file": "converge.yml"}, "when": "y"},
            {"name": "Record b", "kvshare.dynamo.converged": {"name": "b", "state": "record", "paths": []}, "when": "y"}]
    _write(str(tmp_path), "roles/a/tasks/main.yml", block)
    _write(str(tmp_path), "roles/b/tasks/main.yml", copy)
    found = yaml_dupes.repeated(str(tmp_path))
    assert len(found) == 1
    assert sorted(path for path, dummy, dummy2 in list(found.values())[0]) == ["roles/a/tasks/main.yml", "roles/b/tasks/main.yml"]


def test_scan_does_not_count_a_table_of_contents(tmp_path):
    toc = [{"name": "Preflight", "ansible.builtin.include_tasks": "preflight.yml"},
           {"name": "Install", "ansible.builtin.import_tasks": "install.yml"},
           {"name": "Step", "ansible.builtin.include_role": {"name": "x", "tasks_from": "y.yml"}}]
    for role in ("a", "b"):
        _write(str(tmp_path), "roles/%s/tasks/main.yml" % role, toc)
    _write(str(tmp_path), "playbooks/p.yml", [{"hosts": "all", "tasks": toc}])
    assert yaml_dupes.repeated(str(tmp_path)) == {}
