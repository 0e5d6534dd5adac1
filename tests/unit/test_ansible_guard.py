# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The loopback guard (tests/ansible_guard.py, installed by tests/conftest.py) refuses what it must.

Nothing here can reach a host even if the guard failed: the playbooks have no task and gather no
facts, and the socket checks use UDP, whose connect() sends nothing.
"""
import os
import socket
import subprocess
import sys

import pytest
import yaml

import ansible_guard as guard

BIN = os.path.dirname(sys.executable)
PLAYBOOK = os.path.join(BIN, "ansible-playbook")
needs_ansible = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-inventory")),
                                   reason="ansible-inventory not in the venv")


def inventory(tmp_path, hosts):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return str(path)


def noop_play(tmp_path):
    path = tmp_path / "noop.yml"
    path.write_text("- name: Nothing\n  hosts: all\n  gather_facts: false\n  tasks: []\n")
    return str(path)


@pytest.mark.parametrize("address,loopback", [
    ("127.0.0.1", True), ("127.0.10.3", True), ("::1", True), ("localhost", True), ("[::1]", True),
    ("192.0.2.1", False), ("10.0.1.11", False), ("0.0.0.0", False), ("gpu-node-1", False), ("", False),
])
def test_is_loopback(address, loopback):
    assert guard.is_loopback(address) is loopback


def test_runs_that_connect_nowhere_are_not_resolved():
    # a missing inventory would fail resolution: these never get that far
    missing = "/nonexistent/inventory.yml"
    assert guard.violations([PLAYBOOK, "-i", missing, "site.yml", "--syntax-check"]) == []
    assert guard.violations([PLAYBOOK, "-i", missing, "playbooks/validate.yml", "-e", "kvshare_validate_offline=true"]) == []
    assert guard.violations([PLAYBOOK, "-i", missing, "playbooks/validate.yml", "-e", '{"kvshare_validate_offline": true}']) == []
    assert guard.violations(["/usr/bin/git", "status"]) == []


@needs_ansible
def test_non_loopback_hosts_are_refused(tmp_path):
    inv = inventory(tmp_path, {"a": {"ansible_host": "127.0.10.1"}, "b": {"ansible_host": "192.0.2.1"},
                               "c": {"ansible_host": "10.0.1.11", "ansible_connection": "local"}, "gpu-node-1": None,
                               "kvh-maru": {"ansible_connection": "containers.podman.podman"}})
    found = guard.violations([PLAYBOOK, "-i", inv, "site.yml"])
    assert found == ["b: ansible_host 192.0.2.1 over ssh is not loopback",
                     "gpu-node-1: ansible_host gpu-node-1 over ssh is not loopback"]
    # --limit narrows what is checked, the offline flag outside validate.yml does not count
    assert guard.violations([PLAYBOOK, "-i", inv, "site.yml", "--limit", "a,c,kvh-maru"]) == []
    assert len(guard.violations([PLAYBOOK, "-i", inv, "site.yml", "-e", "kvshare_validate_offline=true"])) == 2
    # --connection local keeps every host on this machine
    assert guard.violations([PLAYBOOK, "-i", inv, "site.yml", "-c", "local"]) == []


@needs_ansible
def test_extra_vars_count(tmp_path):
    inv = inventory(tmp_path, {"a": {"ansible_host": "127.0.0.1"}})
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml", "-e", "ansible_host=192.0.2.1"]) == [
        "a: ansible_host 192.0.2.1 over ssh is not loopback"]
    extra = tmp_path / "extra.yml"
    extra.write_text("ansible_host: 198.51.100.7\n")
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml", "-e", "@%s" % extra]) == [
        "a: ansible_host 198.51.100.7 over ssh is not loopback"]
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml", "-e", "ansible_port=9"]) == []


@needs_ansible
def test_installed_guard_stops_the_run_and_fails_the_test(tmp_path):
    inv = inventory(tmp_path, {"b": {"ansible_host": "203.0.113.5"}})
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="203.0.113.5"):
        subprocess.run([PLAYBOOK, "-i", inv, noop_play(tmp_path)], capture_output=True, timeout=60, check=False)
    # recorded: conftest fails the test even where the refusal was caught; cleared here on purpose
    assert len(guard.RECORDED) == 1
    del guard.RECORDED[:]
    ok = inventory(tmp_path, {"a": {"ansible_host": "127.0.0.1", "ansible_connection": "local"}})
    proc = subprocess.run([PLAYBOOK, "-i", ok, noop_play(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_sockets_of_the_test_process_stay_on_loopback():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        with pytest.raises(guard.NonLoopbackAnsibleRun, match="192.0.2.1"):
            sock.connect(("192.0.2.1", 9))
        assert sock.connect_ex(("127.0.0.1", 9)) == 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        with pytest.raises(guard.NonLoopbackAnsibleRun):
            sock.connect_ex(("10.0.0.1", 9))
    assert len(guard.RECORDED) == 2
    del guard.RECORDED[:]


def test_a_self_reference_is_followed_and_anything_else_refused():
    """ansible-inventory does not template: `{{ kvshare_bind_address }}` (the sandbox's ansible_host)
    is read as the host's own variable; an expression it cannot follow stays and is refused."""
    host_vars = {"kvshare_bind_address": "127.0.10.2", "alias": "{{ kvshare_bind_address }}", "lan": "192.0.2.9"}
    assert guard.resolve_reference("{{ kvshare_bind_address }}", host_vars) == "127.0.10.2"
    assert guard.resolve_reference("{{alias}}", host_vars) == "127.0.10.2"
    assert guard.resolve_reference("{{ lan }}", host_vars) == "192.0.2.9"
    assert guard.resolve_reference("{{ missing }}", host_vars) == "{{ missing }}"
    assert not guard.is_loopback(guard.resolve_reference("{{ groups['x'][0] }}", host_vars))


@needs_ansible
def test_the_sandbox_inventory_resolves_to_loopback():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    hosts = guard.resolved_hosts([PLAYBOOK, "-i", os.path.join(repo, "inventories", "sandbox"), "site.yml"], cwd=repo)
    assert hosts and all(guard.is_loopback(address) for dummy, address in hosts.values()), hosts
    assert guard.violations([PLAYBOOK, "-i", os.path.join(repo, "inventories", "sandbox"), "site.yml"], cwd=repo) == []
