# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The collection's own files are an input of the fast re-run (plugins/action/converged.py).

Catches: the collection's digest removed from the inputs the action computes (or narrowed so that
a role's template, another role's task file, a plugin or a playbook no longer counts). Then, after
an upgrade of the collection, site.yml would skip a role whose tasks or templates changed, with the
same variables, and nothing would notice.

A copy of the collection (roles, plugins, playbooks, meta, galaxy.yml, docs) is installed in a
temporary collections path and ``kvshare.dynamo.converged`` runs for real from it (ansible-playbook,
connection local, the stamps in a temporary directory), as a role's gate does: a check, then a
record with the check's inputs. With the variables and the inventory unchanged, each edit of the
copy must make the next check report the role as not converged, with the difference in one input
(not on the host); a run with nothing changed since the last record is converged.

The digest covers the whole collection's roles, plugins and playbooks, not one role's files: a
plugin or another role's file may change what any role does. By design, what does not decide what
a role does is not an input: the version in galaxy.yml or MANIFEST.json alone (an upgrade that
changes a role changes its files), the docs, Python bytecode caches.
"""
import json
import os
import shutil

import pytest

import render_lib

pytestmark = pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")

PLAY = """
- name: A role's gate, as the roles run it (check, then record what this whole run had)
  hosts: all
  gather_facts: false
  tasks:
    - name: Compare with the last whole run
      kvshare.dynamo.converged:
        name: dynamo_worker
        stamp_dir: "{{ stamp_dir }}"
      register: __gate

    - name: Record this run
      kvshare.dynamo.converged:
        name: dynamo_worker
        state: record
        inputs: "{{ __gate.inputs }}"
        stamp_dir: "{{ stamp_dir }}"
"""

COPIED = ("roles", "plugins", "playbooks", "meta", "docs", "galaxy.yml", "README.md")


def install_copy(tmp_path):
    """A copy of the collection under tmp_path/collections/ansible_collections/kvshare/dynamo."""
    root = tmp_path / "collections" / "ansible_collections" / "kvshare" / "dynamo"
    root.mkdir(parents=True)
    for name in COPIED:
        source = os.path.join(render_lib.REPO, name)
        if os.path.isdir(source):
            shutil.copytree(source, str(root / name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, str(root / name))
    return root


class Gate:
    """ansible-playbook of PLAY against the copy; the same inventory, play and variables every run."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.root = install_copy(tmp_path)
        self.runs = []

    def run(self):
        hosts = {"local": {"stamp_dir": str(self.tmp_path / "stamps")}}
        proc, tasks = render_lib.run_local_play(self.tmp_path / "run", PLAY, hosts=hosts,
                                                ANSIBLE_COLLECTIONS_PATH=str(self.tmp_path / "collections"))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        result = tasks[0]["hosts"]["local"]
        self.runs.append(result)
        return result

    def changed_inputs(self):
        """The input names whose digest differs between the last two runs."""
        before, now = self.runs[-2]["inputs"], self.runs[-1]["inputs"]
        return sorted(name for name in set(before) | set(now) if before.get(name) != now.get(name))

    def append(self, rel, text):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(str(path), "a") as handle:
            handle.write(text)


def test_a_changed_collection_runs_the_role_whole(tmp_path):
    (tmp_path / "run").mkdir()
    gate = Gate(tmp_path)
    first = gate.run()
    assert first["converged"] is False, first  # no record yet
    steady = gate.run()
    assert steady["converged"] is True, "nothing changed, yet: %s" % steady["drift"]

    # The upgrade changes what a role does: its template, another role's tasks, a plugin, a
    # playbook, a new file in a role. Variables and inventory stay the same.
    edits = [
        ("roles/dynamo_worker/templates/worker-exec.conf.j2", "{# 0.2.0: one more line #}\n"),
        ("roles/etcd/tasks/main.yml", "# 0.2.0\n"),
        ("plugins/module_utils/workers.py", "# 0.2.0\n"),
        ("playbooks/site.yml", "# 0.2.0\n"),
        ("roles/dynamo_worker/templates/new-in-0.2.0.conf.j2", "[Service]\n"),
    ]
    for rel, text in edits:
        gate.append(rel, text)
        after = gate.run()
        assert after["converged"] is False, (
            "%s changed in the installed collection, yet the role's gate reports it converged: the collection's "
            "files are not an input of the fast re-run (plugins/action/converged.py)" % rel)
        changed = gate.changed_inputs()
        assert len(changed) == 1, "editing %s changed inputs %s (expected the collection's digest alone)" % (rel, changed)
        assert all(line.startswith("input ") for line in after["drift"]) and any(changed[0] in line for line in after["drift"]), (
            "drift after editing %s names %s, not the changed input %s" % (rel, after["drift"], changed[0]))
    again = gate.run()
    assert again["converged"] is True, "after the record of the last change: %s" % again["drift"]

    # Not inputs, by design: the version alone, the docs, bytecode caches.
    unrelated = [
        ("MANIFEST.json", json.dumps({"collection_info": {"namespace": "kvshare", "name": "dynamo", "version": "0.2.0"}})),
        ("docs/performance.md", "\nOne more paragraph.\n"),
        ("plugins/module_utils/__pycache__/workers.cpython-311.pyc", "bytecode"),
    ]
    galaxy = gate.root / "galaxy.yml"
    assert "\nversion: " in galaxy.read_text()
    galaxy.write_text(galaxy.read_text().replace("\nversion: ", "\nversion: 9.9.9\n# was: "))
    for rel, text in unrelated:
        gate.append(rel, text)
    after = gate.run()
    assert after["converged"] is True, "none of %s is an input, yet: %s" % (["galaxy.yml"] + [rel for rel, _text in unrelated], after["drift"])
    assert gate.changed_inputs() == []
