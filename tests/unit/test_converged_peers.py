# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The fast re-run's __peers__ input (plugins/action/converged.py), run for real on two local hosts.

Another host's etcd_member export is an input of every host's roles: when it changes, each host's
digest must change; the same state must give the same digest, on every host alike. The action reads
each host's variables once per task (hostvars.raw_get), which this proves it still reads right.
"""
import json
import os
import subprocess
import sys

import pytest

import render_lib

PLAY = """
- name: Export a member, then compare each host with a stamp it never recorded
  hosts: all
  gather_facts: false
  tasks:
    - name: Export this host's member (as etcd's preflight does)
      ansible.builtin.set_fact:
        etcd_member: {host: "{{ inventory_hostname }}", address: "{{ member_address }}"}

    - name: Compare
      kvshare.dynamo.converged:
        name: peers-test
        stamp_dir: "{{ stamp_dir }}"
"""

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def peers_digests(tmp_path, second_address):
    hostvars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                "stamp_dir": str(tmp_path / "stamps")}
    inventory = {"all": {"hosts": {"h1": dict(hostvars, member_address="127.0.0.1"),
                                   "h2": dict(hostvars, member_address=second_address)}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml")],
                          cwd=render_lib.REPO, env=render_lib.ansible_env(tmp_path, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    compare = json.loads(proc.stdout)["plays"][0]["tasks"][1]["hosts"]
    return {host: res["inputs"]["__peers__"] for host, res in compare.items()}


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")
def test_a_peer_export_is_an_input_of_every_host(tmp_path):
    first = peers_digests(tmp_path, "127.0.0.2")
    again = peers_digests(tmp_path, "127.0.0.2")
    moved = peers_digests(tmp_path, "127.0.0.3")
    # Every host sees the same peers; the same state gives the same digest.
    assert first["h1"] == first["h2"]
    assert again == first
    # h2's export moved: h1's roles must not take the fast path either.
    assert moved["h1"] != first["h1"] and moved["h2"] != first["h2"]
