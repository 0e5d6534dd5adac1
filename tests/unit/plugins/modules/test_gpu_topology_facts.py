# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/modules/gpu_topology_facts.py (run in-process with patched module args)."""
import os

import pytest

from ansible_collections.kvshare.dynamo.plugins.modules import gpu_topology_facts
from lib.unit import load_script, run_module

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")
build_sysfs = load_script(os.path.join(FIXTURES, "build_sysfs.py"))


def run(args, capsys):
    return run_module(gpu_topology_facts, args, capsys)


def case_args(tmp_path, name, **extra):
    root, query, topo = build_sysfs.build_case(name, str(tmp_path / name))
    args = {"sysfs_root": root, "nvidia_smi_query_output": query, "use_nvidia_smi": False}
    if topo is not None:
        args["nvidia_smi_topo_output"] = topo
    args.update(extra)
    return args


@pytest.mark.parametrize("name,expected", [
    ("dgx_h100", ["mlx5_0:1", "mlx5_3:1", "mlx5_4:1", "mlx5_5:1", "mlx5_6:1", "mlx5_9:1", "mlx5_10:1", "mlx5_11:1"]),
    ("two_socket", ["bnxt_re0:1", "bnxt_re0:1", "mlx5_0:1", "mlx5_0:1"]),
    ("no_hca", [None, None]),
    ("h200_real", [None]),
])
def test_every_fixture(tmp_path, capsys, name, expected):
    rc, out = run(case_args(tmp_path, name), capsys)
    assert rc == 0
    assert out["changed"] is False
    assert [g["ucx_net_devices"] for g in out["gpus"]] == expected
    fact = out["ansible_facts"]["kvshare_gpu_topology"]
    assert [g["ucx_net_devices"] for g in fact["gpus"]] == expected
    assert fact["warnings"] == out["topology_warnings"]


def test_dgx_no_warnings_and_check_mode(tmp_path, capsys):
    rc, out = run(case_args(tmp_path, "dgx_h100", _ansible_check_mode=True), capsys)
    assert rc == 0 and out["changed"] is False
    assert out["topology_warnings"] == []
    assert out["gpus"][7]["path_class"] == "PXB"


def test_two_socket_warns(tmp_path, capsys):
    rc, out = run(case_args(tmp_path, "two_socket"), capsys)
    assert rc == 0
    assert len([w for w in out["topology_warnings"] if "worse than PXB" in w]) == 4
    assert {d["name"] for d in out["dax_devices"]} == {"dax0.0", "dax1.0"}


def test_no_hca_warns(tmp_path, capsys, monkeypatch):
    # module.warn() output is deduplicated process-wide by ansible-core, so record the calls.
    warned = []
    monkeypatch.setattr(gpu_topology_facts.AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    rc, out = run(case_args(tmp_path, "no_hca"), capsys)
    assert rc == 0
    assert any("no RDMA device" in w for w in out["topology_warnings"])
    assert warned == out["topology_warnings"]


def test_bond_exclusion_option(tmp_path, capsys):
    args = case_args(tmp_path, "dgx_h100", exclude_bond_devices=False, link_layer="Ethernet")
    rc, out = run(args, capsys)
    assert rc == 0
    assert out["gpus"][2]["hca"] == "mlx5_bond_0"
    rc, out = run(dict(args, exclude_bond_devices=True), capsys)
    assert all(g["hca"] != "mlx5_bond_0" for g in out["gpus"])


def test_override_missing_device_fails(tmp_path, capsys):
    rc, out = run(case_args(tmp_path, "dgx_h100", hca_overrides={"0": "mlx5_42:1"}), capsys)
    assert rc == 1 and out["failed"] is True
    assert "mlx5_42" in out["msg"] and "does not exist" in out["msg"]


def test_override_applied(tmp_path, capsys):
    rc, out = run(case_args(tmp_path, "dgx_h100", hca_overrides={"0": "mlx5_3"}), capsys)
    assert rc == 0
    assert out["gpus"][0]["ucx_net_devices"] == "mlx5_3:1" and out["gpus"][0]["source"] == "override"
    assert out["gpus"][0]["path_class"] == "NODE"


def test_bad_link_layer_rejected(tmp_path, capsys):
    rc, out = run(case_args(tmp_path, "no_hca", link_layer="infiniband"), capsys)
    assert rc == 1 and "link_layer" in out["msg"]


def test_runs_nvidia_smi_when_outputs_missing(tmp_path, capsys, monkeypatch):
    root, query, topo = build_sysfs.build_case("dgx_h100", str(tmp_path / "d"))
    calls = []

    def fake_run(self, cmd, **kwargs):
        calls.append(cmd)
        return (0, topo if "topo" in cmd else query, "")

    monkeypatch.setattr(gpu_topology_facts.AnsibleModule, "get_bin_path", lambda self, *a, **k: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_topology_facts.AnsibleModule, "run_command", fake_run)
    rc, out = run({"sysfs_root": root}, capsys)
    assert rc == 0 and out["nvidia_smi_present"] is True
    assert calls == [["/usr/bin/nvidia-smi", "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"],
                     ["/usr/bin/nvidia-smi", "topo", "-m"]]
    assert out["gpus"][0]["topo_class"] == "PIX"


def test_nvidia_smi_absent(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu_topology_facts.AnsibleModule, "get_bin_path", lambda self, *a, **k: None)
    rc, out = run({"sysfs_root": str(tmp_path)}, capsys)
    assert rc == 0 and out["gpus"] == [] and out["nvidia_smi_present"] is False
    assert any("nvidia-smi not found" in w for w in out["topology_warnings"])


def test_nvidia_smi_failure_is_a_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu_topology_facts.AnsibleModule, "get_bin_path", lambda self, *a, **k: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_topology_facts.AnsibleModule, "run_command",
                        lambda self, *a, **k: (9, "", "NVIDIA-SMI has failed because it couldn't communicate"))
    rc, out = run({"sysfs_root": str(tmp_path)}, capsys)
    assert rc == 0 and out["gpus"] == []
    assert any("rc=9" in w for w in out["topology_warnings"])


def test_documentation_parses():
    import yaml
    doc = yaml.safe_load(gpu_topology_facts.DOCUMENTATION)
    assert doc["module"] == "gpu_topology_facts"
    assert set(doc["options"]) == {"sysfs_root", "nvidia_smi_query_output", "nvidia_smi_topo_output",
                                   "use_nvidia_smi", "exclude_bond_devices", "link_layer", "hca_overrides"}
    yaml.safe_load(gpu_topology_facts.EXAMPLES)
    yaml.safe_load(gpu_topology_facts.RETURN)
