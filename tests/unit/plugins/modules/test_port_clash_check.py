# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/modules/port_clash_check.py (in-process, real /proc and a fake one)."""
import os
import socket

import pytest

from ansible_collections.kvshare.dynamo.plugins.modules import port_clash_check
from lib.unit import run_module


def run(args, capsys):
    return run_module(port_clash_check, args, capsys)


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def test_port_taken_by_another_process_fails_naming_everything(listener, capsys, monkeypatch):
    monkeypatch.setattr(port_clash_check.AnsibleModule, "get_bin_path", lambda self, *a, **k: None)
    rc, out = run({"host": "gpu-a", "ports": [{"port": listener, "address": "127.0.0.1", "variable": "etcd_client_port",
                                               "units": ["etcd.service"]}]}, capsys)
    assert rc == 1 and out["changed"] is False
    assert out["msg"].startswith("port clash on gpu-a: etcd_client_port %d is held by" % listener)
    assert "(pid %d" % os.getpid() in out["msg"]
    assert out["clashes"][0]["variable"] == "etcd_client_port"


def test_service_itself_is_ignored_by_main_pid(listener, capsys, monkeypatch):
    monkeypatch.setattr(port_clash_check.AnsibleModule, "get_bin_path", lambda self, *a, **k: "/bin/systemctl")
    monkeypatch.setattr(port_clash_check.AnsibleModule, "run_command",
                        lambda self, argv, **k: (0, "%d\n" % os.getpid(), ""))
    rc, out = run({"host": "gpu-a", "ports": [{"port": listener, "address": "127.0.0.1", "variable": "x_port",
                                               "units": ["etcd.service"]}]}, capsys)
    assert rc == 0 and out["clashes"] == [] and out["own_pids"] == {"etcd.service": os.getpid()}
    assert out["listeners"][0]["pid"] == os.getpid()


def test_other_address_and_report_only(listener, capsys, monkeypatch):
    monkeypatch.setattr(port_clash_check.AnsibleModule, "get_bin_path", lambda self, *a, **k: None)
    rc, out = run({"ports": [{"port": listener, "address": "127.0.0.2", "variable": "p"}]}, capsys)
    assert rc == 0 and out["clashes"] == []
    rc, out = run({"fail_on_clash": False, "ports": [{"port": listener, "variable": "p"}]}, capsys)
    assert rc == 0 and len(out["clashes"]) == 1 and out["messages"][0].startswith("p %d is held by" % listener)


def test_several_units_main_pids_parsed(capsys, monkeypatch, tmp_path):
    (tmp_path / "net").mkdir()
    monkeypatch.setattr(port_clash_check.AnsibleModule, "get_bin_path", lambda self, *a, **k: "/bin/systemctl")
    monkeypatch.setattr(port_clash_check.AnsibleModule, "run_command", lambda self, argv, **k: (0, "12\n\n0\n", ""))
    rc, out = run({"proc_root": str(tmp_path), "ports": [
        {"port": 9850, "variable": "a", "units": ["maru-resource-manager.service"]},
        {"port": 5555, "variable": "b", "units": ["maru-server.service", "dynamo-worker@*.service"]}]}, capsys)
    assert rc == 0 and out["own_pids"] == {"maru-resource-manager.service": 12}
