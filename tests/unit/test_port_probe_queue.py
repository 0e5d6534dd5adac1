# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""validate.yml's one port probe per host (plugins/action/port_clash_check.py), run for real.

A local play queues two roles' port checks the way validate.yml does, then probes the queue in
one module run while this test holds one of the ports: the clash is named with the variable the
queued check gave it, and the queued checks started no module on the host.
"""
import os
import socket

import pytest

import render_lib

PLAY = """
- name: Queue two port checks, then probe them in one module run
  hosts: local
  gather_facts: false
  vars:
    __kvshare_port_probe_queue: true
  tasks:
    - name: First role's check (queued)
      kvshare.dynamo.port_clash_check:
        host: "{{ inventory_hostname }}"
        ports: [{port: %(free)d, address: 127.0.0.1, variable: first_free_port}]
      register: first

    - name: Second role's check (queued)
      kvshare.dynamo.port_clash_check:
        host: "{{ inventory_hostname }}"
        ports: [{port: %(taken)d, address: 127.0.0.1, variable: second_taken_port}]
      register: second

    - name: Show what was queued
      ansible.builtin.debug:
        msg: "{{ ansible_facts['__kvshare_port_requests'] }}"

    - name: Probe the queue in one module run
      kvshare.dynamo.port_clash_check:
        host: "{{ inventory_hostname }}"
        ports: []
        from_queue: true
"""

# A run that queues and stops before its probe (validation failed in between), then a run that
# queues nothing and probes: with a fact cache that persists, the first run's queue is still a fact.
STOPPED_RUN = """
- name: Queue a port check, then stop before the probe
  hosts: local
  gather_facts: false
  vars:
    __kvshare_port_probe_queue: true
  tasks:
    - name: A role's check (queued)
      kvshare.dynamo.port_clash_check:
        host: "{{ inventory_hostname }}"
        ports: [{port: %(taken)d, address: 127.0.0.1, variable: stale_port}]

    - name: Validation stops here
      ansible.builtin.fail:
        msg: stopped before the probe
"""

NEXT_RUN = """
- name: Probe this run's queue (nothing queued)
  hosts: local
  gather_facts: false
  tasks:
    - name: Show the fact the cache kept
      ansible.builtin.debug:
        msg: "{{ ansible_facts['__kvshare_port_requests'] | default('none') }}"

    - name: Probe the queue in one module run
      kvshare.dynamo.port_clash_check:
        host: "{{ inventory_hostname }}"
        ports: []
        from_queue: true
"""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def held_port():
    """A listening socket on a free loopback port (the test's own process holds it): (socket, port)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    return listener, listener.getsockname()[1]


@pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")
def test_queued_checks_probe_once_and_name_the_clash(tmp_path):
    listener, taken = held_port()
    free = free_port()
    try:
        proc, tasks = render_lib.run_local_play(tmp_path, PLAY % {"free": free, "taken": taken})
    finally:
        listener.close()
    assert proc.returncode != 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    first, second, shown, probe = [task["hosts"]["local"] for task in tasks]
    # The queued checks started no module on the host: they list no listener and queue their ports.
    for queued in (first, second):
        assert queued["msg"] == "queued 1 port(s) for validation's one port probe of this host", queued
        assert "listeners" not in queued and not queued.get("failed")
    queue = shown["msg"]["ports"]
    assert [(int(p["port"]), p["variable"]) for p in queue] == [(free, "first_free_port"), (taken, "second_taken_port")]
    # One module run probes both and names the taken port with the variable its check gave it.
    assert probe["failed"] is True
    assert [(c["port"], c["variable"]) for c in probe["clashes"]] == [(taken, "second_taken_port")]
    assert probe["msg"].startswith("port clash on local: second_taken_port %d is held by python" % taken), probe["msg"]
    # The queue is emptied once probed (a second validation in the same run starts afresh).
    assert probe["ansible_facts"]["__kvshare_port_requests"]["ports"] == []
    assert probe["ansible_facts"]["__kvshare_port_requests"]["run"] == shown["msg"]["run"]


@pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")
def test_a_queue_left_by_an_earlier_run_is_not_probed(tmp_path):
    listener, taken = held_port()
    # The fact cache of the collection's ansible.cfg, in a directory of this test.
    cache = dict(ANSIBLE_CACHE_PLUGIN="kvshare.dynamo.jsonfile_memo", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"))
    try:
        stopped, dummy = render_lib.run_local_play(tmp_path, STOPPED_RUN % {"taken": taken}, **cache)
        assert stopped.returncode != 0
        proc, (kept, probe) = render_lib.run_local_play(tmp_path, NEXT_RUN, **cache)
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stdout[-3000:]
    # The cache kept the stopped run's queue (the port this test holds) ...
    assert [p["variable"] for p in kept["hosts"]["local"]["msg"]["ports"]] == ["stale_port"]
    # ... and the next run's probe ignores it: nothing was queued in this run.
    assert probe["hosts"]["local"]["msg"] == "no port queued in this run"
    assert not probe["hosts"]["local"].get("failed")
