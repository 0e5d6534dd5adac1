# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/modules/devdax_info.py (run in-process with patched module args)."""
import os

from ansible_collections.kvshare.dynamo.plugins.modules import devdax_info
from lib.unit import load_script, run_module

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "devdax")
# The sysfs trees are built in a temporary directory (make_trees.py), not read from the checkout.
make_trees = load_script(os.path.join(FIX, "make_trees.py"))


def run(args, capsys):
    return run_module(devdax_info, args, capsys)


def tree(name):
    return os.path.join(make_trees.trees_dir(), name)


def read(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


def test_devdax_dedicated(capsys):
    rc, out = run({"sysfs_root": tree("devdax_region"), "daxctl_json": read("daxctl_list_devdax.json"),
                   "dedicated": ["dax0.0"]}, capsys)
    assert rc == 0
    assert out["changed"] is False
    assert out["maru_devices"] == ["dax0.0"]
    assert out["errors"] == []
    assert out["daxctl_available"] is True


def test_undedicated_allowed_warns(capsys):
    rc, out = run({"sysfs_root": tree("mixed"), "daxctl_json": read("daxctl_list_mixed.json"),
                   "dedicated": ["dax0.0"], "allow_undedicated": True}, capsys)
    assert rc == 0
    assert out["errors"] == []
    assert out["warnings_list"] and "dax1.0" in out["warnings_list"][0]


def test_no_daxctl_binary_uses_sysfs_only(capsys, monkeypatch):
    monkeypatch.setattr(devdax_info.AnsibleModule, "get_bin_path", lambda self, *a, **k: None)
    rc, out = run({"sysfs_root": tree("none")}, capsys)
    assert rc == 0
    assert out["devices"] == [] and out["daxctl_available"] is False


def test_bad_json_fails(capsys):
    rc, out = run({"sysfs_root": tree("none"), "daxctl_json": "{oops"}, capsys)
    assert rc == 1
    assert out["failed"] is True and "daxctl list" in out["msg"]


def test_daxctl_failure_reported(capsys, monkeypatch):
    monkeypatch.setattr(devdax_info.AnsibleModule, "get_bin_path", lambda self, *a, **k: "/usr/bin/daxctl")
    monkeypatch.setattr(devdax_info.AnsibleModule, "run_command", lambda self, *a, **k: (1, "", "libdaxctl: boom"))
    rc, out = run({"sysfs_root": tree("none")}, capsys)
    assert rc == 1 and "boom" in out["msg"]
