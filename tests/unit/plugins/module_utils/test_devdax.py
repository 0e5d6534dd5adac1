# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/module_utils/devdax.py against tests/fixtures/devdax/."""
import importlib.util
import os

import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import devdax as d

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "devdax")
# The sysfs trees are built in a temporary directory (make_trees.py), not read from the checkout.
_spec = importlib.util.spec_from_file_location("make_trees", os.path.join(FIX, "make_trees.py"))
make_trees = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_trees)


def fixture(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


def tree(name):
    return os.path.join(make_trees.trees_dir(), name)


def test_parse_array():
    devs = d.parse_daxctl_list(fixture("daxctl_list_devdax.json"))
    assert devs == [{"name": "dax0.0", "mode": "devdax", "size": 68719476736, "align": 2097152,
                     "target_node": 2, "numa_node": None, "region_id": None}]


def test_parse_human_single_object():
    devs = d.parse_daxctl_list(fixture("daxctl_list_human_single.json"))
    assert [x["name"] for x in devs] == ["dax0.0"]
    assert devs[0]["size"] is None  # human-readable size string is not a number
    assert devs[0]["mode"] == "devdax"


def test_parse_regions_nested():
    devs = d.parse_daxctl_list(fixture("daxctl_list_regions.json"))
    assert [(x["name"], x["region_id"]) for x in devs] == [("dax0.0", 0), ("dax1.0", 1)]


@pytest.mark.parametrize("text", ["", "  \n", "[]"])
def test_parse_empty(text):
    assert d.parse_daxctl_list(text) == []


def test_parse_none_fixture():
    assert d.parse_daxctl_list(fixture("daxctl_list_none.txt")) == []


def test_parse_garbage():
    with pytest.raises(ValueError):
        d.parse_daxctl_list("not json")
    with pytest.raises(ValueError):
        d.parse_daxctl_list('"string"')


def test_scan_devdax_region():
    devs = d.scan_sysfs(tree("devdax_region"))
    assert len(devs) == 1
    dev = devs[0]
    assert dev["name"] == "dax0.0"
    assert dev["in_region"] and dev["region_id"] == 0
    assert dev["sysfs_mode"] == "devdax" and dev["driver"] == "device_dax"
    assert dev["size"] == 64 * 1024 ** 3 and dev["align"] == 2 * 1024 ** 2
    assert dev["chardev"] == "/dev/dax0.0" and dev["chardev_exists"] is True
    assert "region0" in dev["sysfs_target"]


def test_scan_system_ram():
    dev = d.scan_sysfs(tree("system_ram"))[0]
    assert dev["sysfs_mode"] == "system-ram"
    assert dev["chardev_exists"] is False


def test_scan_hmem_without_region():
    dev = d.scan_sysfs(tree("hmem_no_region"))[0]
    assert dev["name"] == "dax1.0"
    assert dev["in_region"] is False and dev["region_id"] is None
    assert "hmem.0" in dev["sysfs_target"]


def test_scan_none_and_missing_root(tmp_path):
    assert d.scan_sysfs(tree("none")) == []
    assert d.scan_sysfs(str(tmp_path)) == []


def test_verdict_devdax_dedicated_ok():
    devs = d.merge(d.parse_daxctl_list(fixture("daxctl_list_devdax.json")), d.scan_sysfs(tree("devdax_region")))
    ver = d.verdict(devs, ["/dev/dax0.0"])
    assert ver["maru_devices"] == ["dax0.0"]
    assert ver["errors"] == [] and ver["warnings"] == []


def test_verdict_undedicated_is_error_unless_allowed():
    devs = d.merge(d.parse_daxctl_list(fixture("daxctl_list_devdax.json")), d.scan_sysfs(tree("devdax_region")))
    ver = d.verdict(devs, [])
    assert ver["undedicated"] == ["dax0.0"]
    assert len(ver["errors"]) == 1 and "header on EVERY" in ver["errors"][0]
    ver = d.verdict(devs, [], allow_undedicated=True)
    assert ver["errors"] == [] and len(ver["warnings"]) == 1


def test_verdict_system_ram_dedicated_is_error():
    devs = d.merge(d.parse_daxctl_list(fixture("daxctl_list_system_ram.json")), d.scan_sysfs(tree("system_ram")))
    ver = d.verdict(devs, ["dax0.0"])
    assert ver["maru_devices"] == []
    assert ver["missing"] == ["dax0.0"]
    assert "system-ram" in ver["errors"][0]


def test_verdict_hmem_skipped_silently_by_maru():
    devs = d.merge([], d.scan_sysfs(tree("hmem_no_region")))
    ver = d.verdict(devs, ["dax1.0"])
    assert ver["maru_devices"] == []
    assert "region<N>" in ver["skipped"][0]["reason"]
    assert "region<N>" in ver["errors"][0]


def test_verdict_mixed_tree():
    devs = d.merge(d.parse_daxctl_list(fixture("daxctl_list_mixed.json")), d.scan_sysfs(tree("mixed")))
    assert [x["name"] for x in devs] == ["dax0.0", "dax1.0", "dax2.0"]
    ver = d.verdict(devs, ["dax0.0"])
    assert ver["maru_devices"] == ["dax0.0", "dax1.0"]
    assert ver["undedicated"] == ["dax1.0"]
    assert [s["name"] for s in ver["skipped"]] == ["dax2.0"]


def test_verdict_missing_dedicated_device():
    ver = d.verdict([], ["dax3.0"])
    assert ver["missing"] == ["dax3.0"]
    assert ver["errors"] == ["dedicated device dax3.0 not found"]


def test_merge_daxctl_only_device_without_sysfs():
    devs = d.merge(d.parse_daxctl_list(fixture("daxctl_list_regions.json")), [])
    assert [x["in_region"] for x in devs] == [True, True]
    assert devs[0]["mode"] == "devdax"


def test_daxctl_mode_wins_over_sysfs():
    sysfs = d.scan_sysfs(tree("devdax_region"))
    devs = d.merge(d.parse_daxctl_list(fixture("daxctl_list_system_ram.json")), sysfs)
    assert devs[0]["mode"] == "system-ram"


# FS_DAX: trees are made in tmp_path (a pmem entry is a symlink into /sys/devices, as on a host).
PMEM_TARGET = "../../devices/platform/e820_pmem/ndbus0/region1/namespace1.0/block/pmem1"


def fsdax_tree(tmp_path, names, mounts):
    block = tmp_path / "sys" / "class" / "block"
    block.mkdir(parents=True)
    for name, target in names.items():
        os.symlink(target, str(block / name))
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text(mounts)
    return str(tmp_path)


def test_parse_mounts_decodes_octal_escapes():
    mounts = d.parse_mounts("/dev/pmem0 /mnt/cxl\\040pool ext4 rw,dax=always 0 0\nshort line\n")
    assert mounts == [{"source": "/dev/pmem0", "mount": "/mnt/cxl pool", "fstype": "ext4", "options": "rw,dax=always"}]


def test_fsdax_pool_mounted_with_dax(tmp_path):
    (tmp_path / "mnt" / "pmem1").mkdir(parents=True)
    root = fsdax_tree(tmp_path, {"pmem1": PMEM_TARGET, "sda": "../../devices/pci/sda"},
                      "/dev/sda1 / ext4 rw 0 0\n/dev/pmem1 /mnt/pmem1 xfs rw,relatime,dax=always 0 0\n")
    pools = d.scan_fsdax(root)
    assert [(p["name"], p["region_id"], p["mount"], p["usable"]) for p in pools] == [("pmem1", 1, "/mnt/pmem1", True)]
    assert pools[0]["size"] > 0  # statfs of <root>/mnt/pmem1
    ver = d.verdict([], dedicated=["pmem1"], fsdax=pools)
    assert ver["fsdax_pools"] == ["pmem1"]
    assert ver["errors"] == [] and ver["warnings"] == [] and ver["missing"] == []


def test_fsdax_without_dax_option_is_skipped_and_dedicated_one_is_an_error(tmp_path):
    root = fsdax_tree(tmp_path, {"pmem0": "../../devices/ndbus0/namespace0.0/block/pmem0"},
                      "/dev/pmem0 /mnt/pmem0 ext4 rw,relatime 0 0\n")
    pools = d.scan_fsdax(root)
    assert pools[0]["usable"] is False and pools[0]["region_id"] == 0  # digits of the name: no region<N>
    ver = d.verdict([], dedicated=["pmem0"], fsdax=pools)
    assert ver["fsdax_pools"] == []
    assert any("pmem0 is not usable by Maru" in e and "dax option" in e for e in ver["errors"]), ver["errors"]


def test_fsdax_pool_not_dedicated_is_a_warning_only(tmp_path):
    (tmp_path / "mnt" / "p").mkdir(parents=True)
    root = fsdax_tree(tmp_path, {"pmem0": PMEM_TARGET}, "/dev/pmem0 /mnt/p overlay rw,lowerdir=/x/dax_lower 0 0\n")
    ver = d.verdict([], dedicated=[], fsdax=d.scan_fsdax(root))
    assert ver["errors"] == []
    assert ver["warnings"] and "FS_DAX pool pmem0 (/mnt/p)" in ver["warnings"][0]


def test_no_pmem_devices(tmp_path):
    assert d.scan_fsdax(str(tmp_path)) == []
