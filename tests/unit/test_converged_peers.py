# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The fast re-run's __peers__ input (plugins/action/converged.py), run for real on two local hosts.

Another host's etcd_member export is an input of every host's roles: when it changes, each host's
digest must change; the same state must give the same digest, on every host alike. The action reads
each host's variables once per task (hostvars.raw_get), which this proves it still reads right.
"""
import os

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


def peers_digests(tmp_path, second_address):
    hosts = {"h1": {"member_address": "127.0.0.1"}, "h2": {"member_address": second_address}}
    for values in hosts.values():
        values["stamp_dir"] = str(tmp_path / "stamps")
    proc, tasks = render_lib.run_local_play(tmp_path, PLAY, hosts=hosts)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    compare = tasks[1]["hosts"]
    return {host: res["inputs"]["__peers__"] for host, res in compare.items()}


@pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")
def test_a_peer_export_is_an_input_of_every_host(tmp_path):
    first = peers_digests(tmp_path, "127.0.0.2")
    again = peers_digests(tmp_path, "127.0.0.2")
    moved = peers_digests(tmp_path, "127.0.0.3")
    # Every host sees the same peers; the same state gives the same digest.
    assert first["h1"] == first["h2"]
    assert again == first
    # h2's export moved: h1's roles must not take the fast path either.
    assert moved["h1"] != first["h1"] and moved["h2"] != first["h2"]
