# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/module_utils/topology.py on fake sysfs trees (tests/fixtures/topology)."""
import importlib.util
import os
import shutil

import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils.topology import (
    TopologyError,
    classify_path,
    discover,
    normalize_bus_id,
    parse_query_gpu,
    parse_topo_matrix,
    strip_ansi,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")
_spec = importlib.util.spec_from_file_location("build_sysfs", os.path.join(FIXTURES, "build_sysfs.py"))
build_sysfs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_sysfs)


@pytest.fixture
def case(tmp_path):
    def _build(name):
        return build_sysfs.build_case(name, str(tmp_path / name))
    return _build


def by_index(result):
    return dict((g["index"], g) for g in result["gpus"])


# ------------------------------------------------------------------ parsers

def test_normalize_bus_id():
    assert normalize_bus_id("00000000:17:00.0") == "0000:17:00.0"
    assert normalize_bus_id("00000000:DF:00.0") == "0000:df:00.0"
    assert normalize_bus_id("0000:9a:00.1") == "0000:9a:00.1"
    with pytest.raises(TopologyError):
        normalize_bus_id("garbage")


def test_parse_query_gpu_real_h200():
    text = build_sysfs.read_case_file("h200_real", "query_gpu.txt")
    gpus = parse_query_gpu(text)
    assert len(gpus) == 1
    assert gpus[0]["index"] == 0
    assert gpus[0]["bus_id"] == "0000:00:06.0"
    assert gpus[0]["uuid"].startswith("GPU-")


def test_strip_ansi_real_header():
    raw = build_sysfs.read_case_file("h200_real", "topo_m.txt")
    assert "\x1b[4m" in raw and "\x1b[0m" in raw  # the capture really has the escapes
    first = strip_ansi(raw).splitlines()[0]
    assert "\x1b" not in first
    assert first.split("\t") == ["", "GPU0", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]


def test_parse_topo_real_h200_has_no_nic():
    parsed = parse_topo_matrix(build_sysfs.read_case_file("h200_real", "topo_m.txt"))
    assert parsed["device_columns"] == ["GPU0"]
    assert parsed["legend"] == {}
    assert "NIC0" not in parsed["matrix"]
    assert parsed["affinity"]["GPU0"] == {"CPU Affinity": "0-15", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    # -mp has the same shape (no NV# legend line)
    parsed_mp = parse_topo_matrix(build_sysfs.read_case_file("h200_real", "topo_mp.txt"))
    assert parsed_mp["matrix"] == parsed["matrix"]


def test_parse_topo_dgx_legend_is_not_identity():
    parsed = parse_topo_matrix(build_sysfs.read_case_file("dgx_h100", "topo_m.txt"))
    assert parsed["legend"]["NIC0"] == "mlx5_0"
    assert parsed["legend"]["NIC3"] == "mlx5_bond_0"
    assert parsed["legend"]["NIC10"] == "mlx5_11"
    assert parsed["matrix"]["GPU0"]["NIC0"] == "PIX"
    assert parsed["matrix"]["GPU7"]["NIC10"] == "PXB"
    assert parsed["affinity"]["GPU4"]["NUMA Affinity"] == "1"
    assert "CPU Affinity" not in parsed["matrix"]["GPU0"]


def test_parse_topo_without_ansi_and_empty():
    assert parse_topo_matrix("") is None
    assert parse_topo_matrix("No devices were found\n") is None
    plain = strip_ansi(build_sysfs.read_case_file("no_hca", "topo_m.txt"))
    parsed = parse_topo_matrix(plain)
    assert parsed["matrix"]["GPU0"]["GPU1"] == "PIX"
    assert parsed["legend"] == {}


# ------------------------------------------------------------------ classification

@pytest.mark.parametrize("gpu,nic,gn,nn,expected", [
    ("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:1b:00.0",
     "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", 0, 0, "PIX"),
    ("/sys/devices/pci0000:d7/0000:d7:01.0/0000:d8:00.0/0000:d9:01.0/0000:dd:00.0/0000:de:00.0/0000:df:00.0",
     "/sys/devices/pci0000:d7/0000:d7:01.0/0000:d8:00.0/0000:d9:00.0/0000:dc:00.0", 1, 1, "PXB"),
    ("/sys/devices/pci0000:3a/0000:3a:01.0/0000:3b:00.0",
     "/sys/devices/pci0000:3a/0000:3a:02.0/0000:3c:00.0", 0, 0, "PHB"),
    ("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0",
     "/sys/devices/pci0000:3a/0000:3a:02.0/0000:3c:00.0", 0, 0, "NODE"),
    ("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0",
     "/sys/devices/pci0000:85/0000:85:01.0/0000:86:00.0", 0, 1, "SYS"),
    # unknown NUMA (VMs report -1): never claim NODE
    ("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0",
     "/sys/devices/pci0000:3a/0000:3a:02.0/0000:3c:00.0", -1, -1, "SYS"),
])
def test_classify_path(gpu, nic, gn, nn, expected):
    assert classify_path(gpu, nic, gn, nn)[0] == expected


def test_classify_path_bridges_are_the_p2p_path():
    cls, bridges = classify_path(
        "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:1b:00.0",
        "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0")
    assert cls == "PIX"
    assert bridges == ["0000:17:01.0", "0000:16:00.0", "0000:17:00.0"]


# ------------------------------------------------------------------ fixtures end to end

DGX_EXPECTED = {0: ("mlx5_0", "PIX"), 1: ("mlx5_3", "PIX"), 2: ("mlx5_4", "PIX"), 3: ("mlx5_5", "PIX"),
                4: ("mlx5_6", "PIX"), 5: ("mlx5_9", "PIX"), 6: ("mlx5_10", "PIX"), 7: ("mlx5_11", "PXB")}


def test_dgx_h100_every_gpu_gets_its_switch_local_hca(case):
    root, query, topo = case("dgx_h100")
    result = discover(root, query, topo)
    gpus = by_index(result)
    assert len(gpus) == 8
    for idx, (hca, cls) in DGX_EXPECTED.items():
        g = gpus[idx]
        assert (g["hca"], g["path_class"]) == (hca, cls), g
        assert g["ucx_net_devices"] == "%s:1" % hca
        assert g["topo_class"] == cls  # cross-check with topo -m agrees
        assert g["warnings"] == []
        assert g["link_layer"] == "InfiniBand"
        assert g["hca_is_mlx5"] is True
    assert gpus[0]["numa_node"] == 0 and gpus[4]["numa_node"] == 1
    assert gpus[0]["bus_id"] == "0000:1b:00.0"
    assert gpus[0]["acs_bridges"] == ["0000:17:01.0", "0000:16:00.0", "0000:17:00.0"]
    assert gpus[7]["acs_bridges"] == ["0000:de:00.0", "0000:dd:00.0", "0000:d9:01.0", "0000:d8:00.0", "0000:d9:00.0"]
    assert result["warnings"] == []
    names = [h["name"] for h in result["hcas"]]
    assert "mlx5_bond_0" in names and names.index("mlx5_3") < names.index("mlx5_10")  # natural order
    bond = [h for h in result["hcas"] if h["name"] == "mlx5_bond_0"][0]
    assert bond["is_bond"] and bond["netdevs"][0]["name"] == "enp80s0f0np0"
    assert bond["ports"][0]["link_layer"] == "Ethernet"


def _set_port_state(root, hca, state):
    path = os.path.join(root, "sys", "class", "infiniband", hca, "ports", "1", "state")
    with open(path, "w") as handle:
        handle.write(state + "\n")


def test_dgx_down_port_falls_back_and_bond_exclusion(case):
    root, query, topo = case("dgx_h100")
    _set_port_state(root, "mlx5_4", "1: DOWN")
    # bonds excluded (default): GPU2 has no switch-local HCA left -> NODE + warning
    excl = by_index(discover(root, query, topo))
    assert excl[2]["hca"] != "mlx5_bond_0"
    assert excl[2]["path_class"] == "NODE"
    assert any("worse than PXB" in w for w in excl[2]["warnings"])
    # bonds allowed: the bond in GPU2's switch wins
    incl = discover(root, query, topo, exclude_bond_devices=False)
    g2 = by_index(incl)[2]
    assert (g2["hca"], g2["path_class"], g2["link_layer"]) == ("mlx5_bond_0", "PIX", "Ethernet")
    assert g2["warnings"] == []


def test_dgx_link_layer_filter(case):
    root, query, topo = case("dgx_h100")
    eth = by_index(discover(root, query, topo, exclude_bond_devices=False, link_layer="Ethernet"))
    assert eth[2]["hca"] == "mlx5_bond_0"
    assert eth[5]["hca"] == "mlx5_7"  # mlx5_8 is DOWN
    assert eth[0]["path_class"] == "NODE"
    with pytest.raises(TopologyError):
        discover(root, query, topo, link_layer="Infiniband")


def test_dgx_overrides(case):
    root, query, topo = case("dgx_h100")
    res = by_index(discover(root, query, topo, hca_overrides={"3": "mlx5_6:1", 1: "mlx5_bond_0"}))
    assert res[3]["hca"] == "mlx5_6" and res[3]["source"] == "override"
    assert res[3]["path_class"] == "SYS"
    assert any("override mlx5_6:1 is SYS while mlx5_5:1 is PIX" in w for w in res[3]["warnings"])
    assert res[1]["ucx_net_devices"] == "mlx5_bond_0:1"  # explicit override may name a bond
    assert res[0]["source"] == "discovered"


@pytest.mark.parametrize("override,needle", [
    ({"0": "mlx5_99:1"}, "names RDMA device 'mlx5_99', which does not exist"),
    ({"0": "mlx5_0:2"}, "mlx5_0 port 2, which does not exist"),
    ({"0": "mlx5 0"}, "is not of the form"),
    ({"gpu0": "mlx5_0:1"}, "is not a GPU index"),
])
def test_override_validation(case, override, needle):
    root, query, topo = case("dgx_h100")
    with pytest.raises(TopologyError) as err:
        discover(root, query, topo, hca_overrides=override)
    assert needle in str(err.value)


def test_override_for_missing_gpu_is_a_warning(case):
    root, query, topo = case("dgx_h100")
    res = discover(root, query, topo, hca_overrides={"9": "mlx5_0:1"})
    assert any("GPU 9 ignored" in w for w in res["warnings"])


def test_sysfs_and_topo_disagreement_is_warned(case):
    root, query, topo = case("dgx_h100")
    bad = topo.replace("GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPIX",
                       "GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tSYS")
    assert bad != topo
    res = discover(root, query, bad)
    g0 = by_index(res)[0]
    assert g0["hca"] == "mlx5_0" and g0["path_class"] == "PIX" and g0["topo_class"] == "SYS"
    assert any("sysfs says PIX" in w and "topo -m says SYS" in w for w in g0["warnings"])
    assert any(w.startswith("GPU 0:") and "topo -m says SYS" in w for w in res["warnings"])


def test_two_socket_poor_paths_warn(case):
    root, query, topo = case("two_socket")
    res = discover(root, query, topo)
    gpus = by_index(res)
    assert (gpus[0]["hca"], gpus[0]["path_class"]) == ("bnxt_re0", "NODE")
    assert (gpus[1]["hca"], gpus[1]["path_class"]) == ("bnxt_re0", "PHB")
    assert (gpus[2]["hca"], gpus[2]["path_class"]) == ("mlx5_0", "NODE")
    assert (gpus[3]["hca"], gpus[3]["path_class"]) == ("mlx5_0", "NODE")
    assert gpus[1]["hca_is_mlx5"] is False and gpus[1]["hca_driver"] == "bnxt_en"
    assert gpus[1]["acs_bridges"] == []  # only PIX/PXB paths get bridges
    for g in gpus.values():
        assert any("worse than PXB" in w for w in g["warnings"])
        assert g["topo_class"] == g["path_class"]
        assert all("topo -m says" not in w for w in g["warnings"])
    assert len([w for w in res["warnings"] if "worse than PXB" in w]) == 4
    # InfiniBand only: everything lands on mlx5_0 (mlx5_1 is DOWN)
    ib = by_index(discover(root, query, topo, link_layer="InfiniBand"))
    assert [ib[i]["hca"] for i in range(4)] == ["mlx5_0"] * 4
    assert ib[0]["path_class"] == "SYS"


def test_two_socket_dax(case):
    root, query, topo = case("two_socket")
    dax = dict((d["name"], d) for d in discover(root, query, topo)["dax_devices"])
    assert dax["dax0.0"]["in_region"] is True and dax["dax0.0"]["region"] == "region0"
    assert dax["dax0.0"]["path"] == "/sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0"
    assert dax["dax0.0"]["target_node"] == 2 and dax["dax0.0"]["numa_node"] == 2
    assert dax["dax1.0"]["in_region"] is False and dax["dax1.0"]["region"] is None


def test_no_hca_warns_not_fails(case):
    root, query, topo = case("no_hca")
    res = discover(root, query, topo)
    assert [g["hca"] for g in res["gpus"]] == [None, None]
    assert [g["ucx_net_devices"] for g in res["gpus"]] == [None, None]
    assert res["hcas"] == [] and res["dax_devices"] == []
    assert any("no RDMA device" in w for w in res["warnings"])


def test_h200_real_capture(case):
    root, query, topo = case("h200_real")
    res = discover(root, query, topo)
    g = res["gpus"][0]
    assert g["pci_path"] == "/sys/devices/pci0000:00/0000:00:06.0"
    assert g["hca"] is None
    # sysfs says -1 (VM); nvidia-smi's NUMA Affinity column says 0 and is used as fallback
    assert g["numa_node"] == 0
    assert any("no RDMA device" in w for w in res["warnings"])


def test_missing_sysfs_root_is_not_fatal(tmp_path):
    res = discover(str(tmp_path), "0, GPU-x, 00000000:17:00.0\n", None)
    assert res["gpus"][0]["hca"] is None
    assert any("not found" in w for w in res["gpus"][0]["warnings"])


def test_fixture_trees_are_reproducible(tmp_path):
    """The committed JSON specs are what make_synthetic.py writes."""
    before = {}
    for case_name in ("dgx_h100", "two_socket", "no_hca"):
        for f in ("sysfs.json", "query_gpu.txt", "topo_m.txt"):
            before[(case_name, f)] = build_sysfs.read_case_file(case_name, f)
    work = tmp_path / "gen"
    shutil.copytree(FIXTURES, str(work), symlinks=True)
    spec = importlib.util.spec_from_file_location("make_synthetic", str(work / "make_synthetic.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.dgx()
    mod.two_socket()
    mod.no_hca()
    for (case_name, f), text in before.items():
        with open(str(work / case_name / f)) as handle:
            assert handle.read() == text, (case_name, f)


# ------------------------------------------------------------------ rdma_ucx's per-GPU plan (was gpu_plan.json.j2)

def test_gpu_plan_without_overrides_is_the_topology(case):
    from ansible_collections.kvshare.dynamo.plugins.module_utils.topology import gpu_plan
    topo = discover(*case("dgx_h100"))
    assert gpu_plan(topo, {}) == sorted(topo["gpus"], key=lambda g: g["index"])


def test_gpu_plan_overrides(case):
    from ansible_collections.kvshare.dynamo.plugins.filter.internal.rdma_ucx import rdma_ucx_gpu_plan
    topo = discover(*case("two_socket"))
    gpus = by_index(topo)
    plan = dict((g["index"], g) for g in rdma_ucx_gpu_plan(topo, {"0": "mlx5_0", "1": gpus[1]["ucx_net_devices"],
                                                                  "7": "mlx5_9:2"}))
    # another HCA: its port, link layer and netdevs; the discovered path no longer applies
    assert plan[0]["ucx_net_devices"] == "mlx5_0:1" and plan[0]["source"] == "override"
    assert plan[0]["path_class"] is None and plan[0]["acs_bridges"] == [] and plan[0]["hca_is_mlx5"] is True
    # the discovered HCA and port: path facts kept
    assert plan[1]["path_class"] == gpus[1]["path_class"] and plan[1]["link_layer"] == gpus[1]["link_layer"]
    # a GPU the topology does not have: from the override only
    assert plan[7]["bus_id"] is None and plan[7]["port"] == 2 and plan[7]["hca"] == "mlx5_9"
    assert plan[7]["warnings"] == ["GPU not discovered on this host; from rdma_ucx_hca_overrides only"]
    assert list(plan) == sorted(plan)


def test_preflight_report_without_hardware_skips_with_the_reason(case):
    from ansible_collections.kvshare.dynamo.plugins.filter.internal.rdma_ucx import rdma_ucx_preflight_report
    topo = discover(*case("dgx_h100"))
    facts = {"require_hardware": False, "no_hw_reason": "topology from rdma_ucx_topology_facts (no live hardware)\n",
             "packages": ["rdma-core"], "install_packages": False, "has_gpu": False, "has_hca": False, "hw": False,
             "topology": topo, "gpus": topo["gpus"], "nvidia_version": "", "peermem_enabled": False,
             "gpu_buffers": True, "acs_probe": {"skipped": True}, "acs_bridges": [], "cmdline": "ro iommu=pt",
             "iommu_groups": 0, "ucx_version": "1.21.0"}
    report = dict((r["check"], (r["status"], r["detail"])) for r in rdma_ucx_preflight_report(facts))
    why = "rdma_ucx_require_hardware=false: topology from rdma_ucx_topology_facts (no live hardware)"
    assert report["packages"] == ("info", "rdma-core (install disabled)")
    assert report["gpus"] == ("skipped", why) and report["rdma ports"] == ("skipped", why)
    assert report["gdr path"] == ("skipped", "no /proc/driver/nvidia/version (%s)" % why)
    assert report["acs"] == ("skipped", why)
    assert report["iommu"] == ("skipped", why + "; observed: iommu=pt on cmdline; 0 iommu group(s)")
    assert "passed" not in [status for status, dummy in report.values()]


def test_preflight_report_with_hardware(case):
    from ansible_collections.kvshare.dynamo.plugins.module_utils.rdma_ucx import preflight_report
    topo = discover(*case("dgx_h100"))
    facts = {"require_hardware": True, "no_hw_reason": "", "packages": [], "install_packages": True,
             "has_gpu": True, "has_hca": True, "hw": True, "topology": topo, "gpus": topo["gpus"],
             "nvidia_version": "NVRM version: NVIDIA UNIX Open Kernel Module 550", "peermem_enabled": False,
             "gpu_buffers": True, "acs_probe": {"rc": 0, "stdout_lines": ["ACSCtl: SrcValid+ ReqRedir+"]},
             "acs_bridges": ["0000:15:01.0"], "cmdline": "", "iommu_groups": 4, "ucx_version": ""}
    report = preflight_report(facts)
    checks = dict((r["check"], r) for r in report)
    assert checks["gpus"]["detail"] == "%d GPU(s)" % len(topo["gpus"])
    assert checks["gdr path"]["detail"] == "DMA-BUF (open kernel modules)"
    assert checks["acs"]["status"] == "warning" and checks["acs"]["detail"].endswith("would clear 0000:15:01.0")
    assert checks["iommu"]["status"] == "warning" and checks["ucx version"]["detail"] == "unknown (ucx_info absent)"
    assert "gpu7 path" in checks
