# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.kvcr_transport: the worker's UCX environment, the HCA port, memlock and the pool size."""
import importlib.util
import json
import os
import re

import pytest

from ansible_collections.kvshare.dynamo.plugins.filter.internal import kvcr as kvcr_filters
from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_transport
from ansible_collections.kvshare.dynamo.plugins.module_utils import topology


# ---------------------------------------------------------------- RDMA-only transport

def test_ucx_envs_prefers_plan_then_override_then_installed_file():
    plan = [{"index": 0, "ucx_net_devices": "mlx5_3:1", "hca_is_mlx5": True}, {"index": 1, "ucx_net_devices": None}]
    assert kvcr_transport.ucx_envs(["0", 1], plan) == {"0": {"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "rc_x,cuda"}, "1": {}}
    assert kvcr_transport.ucx_envs(["2"], plan) == {"2": None}
    assert kvcr_transport.ucx_envs(["0"], None, {0: "mlx5_1"}, tls="rc_x,cuda") == {
        "0": {"UCX_NET_DEVICES": "mlx5_1:1", "UCX_TLS": "rc_x,cuda"}}
    text = "# rdma_ucx\nCUDA_DEVICE_ORDER=PCI_BUS_ID\nUCX_NET_DEVICES=mlx5_2:1\nUCX_TLS=\"rc_x,cuda\"\n"
    assert kvcr_transport.ucx_envs(["0"], None, {}, files={"0": text})["0"]["UCX_TLS"] == "rc_x,cuda"
    assert kvcr_transport.ucx_envs(["0"], None, {}, files={"0": None}) == {"0": None}
    # extra env of rdma_ucx overrides the planned TLS (it is written after it)
    assert kvcr_transport.planned_ucx_env(plan[0], "", {"UCX_TLS": "tcp"})["UCX_TLS"] == "tcp"


def test_rdma_transport_accepts_the_seed_settings():
    envs = {"0": {"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "rc_x,cuda"}}
    assert kvcr_transport.rdma_transport_errors("gpu-a", ["0"], envs) == []
    assert kvcr_transport.rdma_transport_errors("gpu-a", ["0"], {"0": {"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": " rc_x, cuda"}}) == []


@pytest.mark.parametrize("env,msg", [
    (None, "GPU 0 on gpu-b: no UCX environment"),
    ({}, "GPU 0 on gpu-b: UCX_NET_DEVICES is unset"),
    ({"UCX_NET_DEVICES": "mlx5_3:1"}, "GPU 0 on gpu-b: UCX_TLS=(unset), KVCR requires UCX_TLS=rc_x,cuda"),
    ({"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "rc_v,cuda"}, "UCX_TLS=rc_v,cuda"),
    ({"UCX_NET_DEVICES": "mlx5_3:1", "UCX_TLS": "tcp,cuda"}, "UCX_TLS=tcp,cuda"),
    ({"UCX_NET_DEVICES": "all", "UCX_TLS": "rc_x,cuda"}, "must name HCA ports"),
    ({"UCX_NET_DEVICES": "eth0", "UCX_TLS": "rc_x,cuda"}, "network interfaces"),
])
def test_rdma_transport_refuses_and_names_gpu_and_host(env, msg):
    errors = kvcr_transport.rdma_transport_errors("gpu-b", ["0"], {"0": env})
    assert len(errors) == 1 and msg in errors[0] and "kvcr_allow_non_rdma_transport=true" in errors[0]


def test_rdma_transport_needs_a_gpu():
    assert "names no GPU" in kvcr_transport.rdma_transport_errors("gpu-b", [], {})[0]


def test_pool_limit_matches_the_service_allocation():
    # the sandbox's 0.125 GB pool: 128 MiB + 100 MiB journal = the file size the service creates
    assert kvcr_transport.pool_bytes(1, [0.125]) == 239075328
    assert kvcr_transport.pool_bytes(1, "2") == 2 * 1024 ** 3 + 100 * 1024 ** 2
    assert kvcr_transport.pool_limit_error(1, [2], 3) == ""
    assert "more than kvcr_service_pool_limit_gb=3" in kvcr_transport.pool_limit_error(1, [3], 3)
    assert "2 Guard(s)" in kvcr_transport.pool_limit_error(2, [1.5], 3)


# ---------------------------------------------------------------- HCA locality, link layer, memlock (issue 35)

TOPOLOGY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")
RDMA_UCX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "rdma_ucx")
_build_spec = importlib.util.spec_from_file_location("build_sysfs", os.path.join(TOPOLOGY, "build_sysfs.py"))
build_sysfs = importlib.util.module_from_spec(_build_spec)
_build_spec.loader.exec_module(build_sysfs)


def captured_plan(tmp_path, case, overrides=None):
    """rdma_ucx's per-GPU plan of a captured topology, as its preflight builds it (discover + gpu_plan)."""
    root, query, topo = build_sysfs.build_case(case, str(tmp_path / case))
    return topology.gpu_plan(topology.discover(root, query, topo, hca_overrides=overrides), overrides)


def test_hca_gpu_local_infiniband_ports_pass(tmp_path):
    plan = captured_plan(tmp_path, "dgx_h100")           # PIX for GPUs 0-6, PXB for GPU 7, all NDR InfiniBand
    assert kvcr_transport.hca_errors("gpu-a", [str(g["index"]) for g in plan], plan) == []
    # an override naming the discovered port keeps its path facts
    plan = captured_plan(tmp_path, "dgx_h100", {"7": "mlx5_11:1"})
    assert [g["source"] for g in plan if g["index"] == 7] == ["override"]
    assert kvcr_transport.hca_errors("gpu-a", ["7"], plan) == []


def test_hca_not_gpu_local_is_refused_naming_host_gpu_and_variable(tmp_path):
    plan = captured_plan(tmp_path, "two_socket")         # NODE, PHB, NODE, NODE: no GPU-local HCA at all
    errors = kvcr_transport.hca_errors("gpu-b", ["2"], plan)
    assert errors == ["GPU 2 on gpu-b: HCA port mlx5_0:1 (discovered by rdma_ucx) is not GPU-local: PCIe path NODE, "
                      "KVCR requires PIX or PXB; " + kvcr_transport._HCA_HINT]
    assert "rdma_ucx_hca_overrides" in errors[0] and "kvcr_allow_non_rdma_transport=true" in errors[0]
    errors = kvcr_transport.hca_errors("gpu-b", ["1"], plan)        # PHB, and bnxt_re0 is Ethernet on a non-mlx5 HCA
    assert len(errors) == 2
    assert errors[0].startswith("GPU 1 on gpu-b: HCA port bnxt_re0:1 (discovered by rdma_ucx) is not GPU-local: "
                                "PCIe path PHB")
    assert errors[1].startswith("GPU 1 on gpu-b: HCA port bnxt_re0:1 (discovered by rdma_ucx) is Ethernet on a "
                                "non-mlx5 HCA")
    # the topology only warns (rdma_ucx serves other workers too): KVCR is where it becomes an error
    assert any("worse than PXB" in w for w in topology.discover(*build_sysfs.build_case(
        "two_socket", str(tmp_path / "again")))["warnings"])


def test_hca_override_to_a_remote_port_is_refused(tmp_path):
    # mlx5_7 is an Ethernet (RoCE) port of an mlx5 HCA: the link layer fits, but it sits across the sockets from
    # GPU 0 (SYS); an operator's pin does not make a port GPU-local
    plan = captured_plan(tmp_path, "dgx_h100", {"0": "mlx5_7:1"})
    errors = kvcr_transport.hca_errors("gpu-a", ["0"], plan)
    assert errors == ["GPU 0 on gpu-a: HCA port mlx5_7:1 (rdma_ucx_hca_overrides[0]) is not GPU-local: PCIe path "
                      "SYS, KVCR requires PIX or PXB; " + kvcr_transport._HCA_HINT]
    # a pin the discovery did not resolve (no path known) is refused too
    root, query, topo = build_sysfs.build_case("dgx_h100", str(tmp_path / "unresolved"))
    plan = topology.gpu_plan(topology.discover(root, query, topo), {"0": "mlx5_7:1"})
    assert "PCIe path unknown (not in the discovered topology)" in kvcr_transport.hca_errors("gpu-a", ["0"], plan)[0]


def test_hca_link_layer_rules():
    base = {"index": 0, "hca": "mlx5_0", "ucx_net_devices": "mlx5_0:1", "path_class": "PIX", "source": "discovered"}
    assert kvcr_transport.hca_errors("h", ["0"], [dict(base, link_layer="InfiniBand", hca_is_mlx5=True)]) == []
    assert kvcr_transport.hca_errors("h", ["0"], [dict(base, link_layer="Ethernet", hca_is_mlx5=True)]) == []   # RoCE
    assert "non-mlx5" in kvcr_transport.hca_errors("h", ["0"], [dict(base, link_layer="Ethernet", hca_is_mlx5=False)])[0]
    assert "link layer unknown" in kvcr_transport.hca_errors("h", ["0"], [dict(base, link_layer=None, hca_is_mlx5=True)])[0]
    # GPUs without a plan entry or an HCA are rdma_transport_errors' to report
    assert kvcr_transport.hca_errors("h", ["1"], [dict(base, link_layer="InfiniBand")]) == []
    assert kvcr_transport.hca_errors("h", ["0"], [dict(base, hca=None, link_layer=None)]) == []
    # through the filter the role calls (plan | kvcr_hca_errors(host, gpus)), GPU indexes as ints
    assert kvcr_filters.kvcr_hca_errors([dict(base, path_class="SYS", link_layer="InfiniBand")], "h", [0])[0] \
        .startswith("GPU 0 on h: HCA port mlx5_0:1 (discovered by rdma_ucx) is not GPU-local: PCIe path SYS")


def _captured_memlock_values():
    with open(os.path.join(RDMA_UCX, "verify_report_cases.json")) as handle:
        text = handle.read()
    return sorted(set(re.findall(r'"LimitMEMLOCK": "([^"]*)"', text)))


def test_memlock_values_systemd_reports():
    # the values systemctl show reported in the captured rdma_ucx verify cases
    assert _captured_memlock_values() == ["18446744073709551615", "8388608", "infinity"]
    assert kvcr_transport.memlock_bytes("infinity") is None and kvcr_transport.memlock_bytes("18446744073709551615") is None
    assert kvcr_transport.memlock_bytes("8388608") == 8388608 and kvcr_transport.memlock_bytes("8M") == 8388608
    assert kvcr_transport.memlock_bytes("4G") == 4 * 1024 ** 3
    with pytest.raises(ValueError):
        kvcr_transport.memlock_bytes("lots")


def test_memlock_errors_from_systemctl_show():
    needs = {"kvcr-service.service": {"need": {"guard_count": "1", "pool_sizes_gb": [2]},
                                      "what": "the memory service's pools"},
             "dynamo-worker@kvcr.service": {"need": 2147483648, "what": "the KVCR worker's CPU buffer (kvcr_cpu_bytes) of GPU(s) 0"}}

    def shown(service, worker):
        return [{"item": "kvcr-service.service", "stdout": service}, {"item": "dynamo-worker@kvcr.service", "stdout": worker}]

    loaded_inf = "LimitMEMLOCK=infinity\nLoadState=loaded"
    assert kvcr_filters.kvcr_memlock_errors(shown(loaded_inf, "LoadState=loaded\nLimitMEMLOCK=18446744073709551615"),
                                            "gpu-a", needs) == []
    # first run: the units are not installed yet, nothing to judge
    assert kvcr_filters.kvcr_memlock_errors(shown("LimitMEMLOCK=8388608\nLoadState=not-found",
                                                  "LimitMEMLOCK=8388608\nLoadState=not-found"), "gpu-a", needs) == []
    errors = kvcr_filters.kvcr_memlock_errors(shown("LimitMEMLOCK=8388608\nLoadState=loaded", loaded_inf), "gpu-a", needs)
    assert errors == ["kvcr-service.service on gpu-a: LimitMEMLOCK=8388608 bytes is below the %d bytes the memory "
                      "service's pools pins for RDMA; it must be infinity, as the roles render it (a drop-in or an "
                      "override lowered it)" % (100 * 1024 ** 2 + 2 * 1024 ** 3)]
    errors = kvcr_filters.kvcr_memlock_errors(shown(loaded_inf, "LimitMEMLOCK=1073741824\nLoadState=loaded"), "gpu-a", needs)
    assert len(errors) == 1 and errors[0].startswith("dynamo-worker@kvcr.service on gpu-a: LimitMEMLOCK=1073741824")
    assert "kvcr_cpu_bytes) of GPU(s) 0" in errors[0]
    # a limit as large as the need is enough
    assert kvcr_filters.kvcr_memlock_errors([{"unit": "u", "limit": "3G"}], "h", {"u": {"need": 3 * 1024 ** 3}}) == []


def test_preflight_wires_the_hca_device_and_memlock_checks():
    import yaml
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "kvcr", "tasks",
                           "preflight.yml")) as handle:
        tasks = dict((t["name"], t) for t in yaml.safe_load(handle))
    hca = tasks["Check that the KVCR worker's GPUs have a GPU-local InfiniBand/RoCE HCA port (PIX/PXB)"]
    assert "kvshare.dynamo.internal.kvcr_hca_errors" in json.dumps(hca)
    assert {"not kvcr_allow_non_rdma_transport | bool", "kvcr_require_hardware | bool"} <= set(hca["when"])
    find = tasks["Find the RDMA verbs devices (/dev/infiniband/uverbs*)"]
    assert find["ansible.builtin.find"]["paths"] == "{{ __kvcr_uverbs_dir }}" and find["ansible.builtin.find"]["patterns"] == "uverbs*"
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "kvcr", "defaults",
                           "main.yml")) as handle:
        assert yaml.safe_load(handle)["__kvcr_uverbs_dir"] == "/dev/infiniband"
    assert "kvcr_require_hardware | bool" in find["when"]
    assert "not (kvshare_validate_offline | default(false) | bool)" in find["when"]
    show = tasks["Read the memlock limit systemd gives the installed KVCR units"]
    assert show["when"] == find["when"] and show["check_mode"] is False
