# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The rdma_ucx role's reports (stdlib only): the preflight report from its probe results and the
verification report (tag rdma_verify) from the registered ibv_devinfo, ucx_info and systemd results.

Each report is a list of ``{check, status, detail}``, status passed|failed|warning|skipped|info.
Hardware checks without live hardware are "skipped" with the reason, never "passed". The per-GPU
plan they read comes from plugins/module_utils/topology.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_TRUE_TEXT = ("1", "true", "yes", "on", "y", "t")


def _as_bool(value):
    """Ansible's `bool` filter on the values a role passes (bools, numbers, yes/no strings)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE_TEXT


def _no_hardware_why(facts):
    """Why a hardware check is skipped: the require_hardware setting and the role's reason."""
    return "rdma_ucx_require_hardware=%s: %s" % (str(_as_bool(facts.get("require_hardware"))).lower(),
                                                 str(facts.get("no_hw_reason") or "").strip())


def preflight_report(facts):
    """The rdma_ucx preflight report: [{check, status, detail}], status passed|failed|warning|skipped|info.
    Hardware checks without live hardware are "skipped" with the reason, never "passed".

    ``facts``: require_hardware, no_hw_reason, packages, install_packages, has_gpu, has_hca, hw,
    topology, gpus (the plan), nvidia_version, peermem_enabled, gpu_buffers, acs_probe (a registered
    command result, or None), acs_bridges, cmdline, iommu_groups, ucx_version.
    """
    report = []

    def add(check, status, detail):
        report.append({"check": check, "status": status, "detail": detail})

    topology = facts.get("topology") or {}
    hw = _as_bool(facts.get("hw"))
    why = _no_hardware_why(facts)
    add("packages", "info", " ".join(str(p) for p in facts.get("packages") or [])
        + (" (install enabled)" if facts.get("install_packages") else " (install disabled)"))
    if _as_bool(facts.get("has_gpu")):
        add("gpus", "passed", "%d GPU(s)" % len(topology.get("gpus") or []))
    else:
        add("gpus", "skipped", why)
    if _as_bool(facts.get("has_hca")):
        for gpu in facts.get("gpus") or []:
            _report_gpu(add, gpu, topology)
    else:
        add("rdma ports", "skipped", why)
    version = str(facts.get("nvidia_version") or "")
    if version:
        if _as_bool(facts.get("peermem_enabled")):
            add("gdr path", "passed", "nvidia_peermem (OFED/DOCA present, modprobe -n ok)")
        elif "Open Kernel Module" in version:
            add("gdr path", "passed", "DMA-BUF (open kernel modules)")
        else:
            add("gdr path", "failed" if facts.get("gpu_buffers") else "warning",
                "proprietary driver without nvidia_peermem: no GPUDirect RDMA path")
    else:
        add("gdr path", "skipped", "no /proc/driver/nvidia/version (%s)" % why)
    probe = facts.get("acs_probe")
    if probe and not probe.get("skipped") and probe.get("rc", 1) == 0:
        on = [line for line in probe.get("stdout_lines") or [] if re.search(r"(SrcValid|ReqRedir|CmpltRedir)\+", line)]
        add("acs", "warning" if on else "passed", "%d ACSCtl line(s) with redirect/validation enabled%s"
            % (len(on), ("; rdma_ucx_clear_acs would clear " + ",".join(facts.get("acs_bridges") or [])) if on else ""))
    else:
        add("acs", "skipped", "lspci -vvv not available" if hw else why)
    groups = facts.get("iommu_groups", 0)
    iommu_pt = re.search(r"(^|\s)iommu=pt(\s|$)", str(facts.get("cmdline") or "")) is not None
    fine = iommu_pt or int(groups) <= 0
    add("iommu", ("passed" if fine else "warning") if hw else "skipped",
        ("" if hw else why + "; observed: ") + ("iommu=pt on cmdline; " if iommu_pt else "") + str(groups)
        + " iommu group(s)" + ("" if fine else "; translated IOMMU slows/breaks P2P, consider rdma_ucx_iommu_passthrough"))
    add("ucx version", "info", facts.get("ucx_version") or "unknown (ucx_info absent)")
    for warning in topology.get("warnings") or []:
        add("topology", "warning", warning)
    return report


def _report_gpu(add, gpu, topology):
    """The port state, MTU and path checks of one GPU's HCA."""
    name = "gpu%s" % gpu["index"]
    hca = [h for h in topology.get("hcas") or [] if h["name"] == gpu["hca"]]
    port = [p for p in hca[0]["ports"] if p["port"] == gpu["port"]] if hca else []
    if not gpu["hca"]:
        add(name + " hca", "failed", "no usable RDMA port")
    elif not port:
        add(name + " hca", "failed", "%s does not exist" % gpu["ucx_net_devices"])
    else:
        add(name + " port state", "passed" if port[0]["state"] == "ACTIVE" else "failed",
            "%s %s %s" % (gpu["ucx_net_devices"], port[0]["state"], port[0].get("link_layer", "")))
        mtu = port[0]["active_mtu"] or (",".join(str(n["mtu"]) for n in hca[0]["netdevs"]) + " (netdev)")
        add(name + " mtu", "info", "%s %s" % (gpu["hca"], mtu))
        topo = gpu.get("topo_class")
        add(name + " path", "passed" if gpu["path_class"] in GPU_LOCAL_PATHS else "warning",
            "%s %s%s" % (gpu["ucx_net_devices"], gpu["path_class"] or "unknown", (" (topo -m %s)" % topo) if topo else ""))


# PCIe path classes (nvidia-smi topo -m, module_utils.topology) of a GPU-local HCA: rdma_ucx warns
# on any other, KVCR refuses it (module_utils.kvcr_transport.hca_errors).
GPU_LOCAL_PATHS = ("PIX", "PXB")

# LimitMEMLOCK values that mean "unlimited": systemd's spellings (unit files, `systemctl show`) and
# ulimit's, which operators also write in the inventory (module_utils.kvcr_transport reads it too).
UNLIMITED_MEMLOCK = ("infinity", "unlimited", "18446744073709551615")


def verify_report(facts):
    """The rdma_ucx verification report (tag rdma_verify): [{check, status, detail}].

    ``facts``: require_hardware, no_hw_reason, hw, gpus (the plan; its HCAs, in order, once each),
    devinfo (the registered loop of ``ibv_devinfo -d <hca>``), ucx_info (the registered
    ``ucx_info -d``), unit_memlock (the registered loop of systemd_service over the memlock units).
    Without live hardware (``hw`` false) the ibv_devinfo and UCX checks are "skipped" with the reason.
    """
    report = []

    def add(check, status, detail):
        report.append({"check": check, "status": status, "detail": detail})

    if _as_bool(facts.get("hw")):
        for result in (facts.get("devinfo") or {}).get("results") or []:
            _verify_devinfo(add, result)
        _verify_ucx_info(add, facts.get("ucx_info") or {}, facts.get("gpus") or [])
    else:
        why = _no_hardware_why(facts)
        add("ibv_devinfo", "skipped", why)
        add("ucx cuda memory", "skipped", why)
    for result in (facts.get("unit_memlock") or {}).get("results") or []:
        limit = (result.get("status") or {}).get("LimitMEMLOCK", "unknown")
        add("LimitMEMLOCK %s" % result.get("item"), "passed" if limit in UNLIMITED_MEMLOCK else "warning", limit)
    return report


def _verify_devinfo(add, result):
    """One HCA's port: passed when ibv_devinfo reports PORT_ACTIVE; the state, link layer and MTU lines."""
    check = "ibv_devinfo %s" % result.get("item")
    if result.get("rc", 1) != 0:
        add(check, "failed", str(result.get("stderr") or "").strip()
            or "ibv_devinfo failed (rdma-core/ibverbs-utils installed?)")
        return
    stdout = result.get("stdout") or ""
    lines = result.get("stdout_lines")
    if lines is None:
        lines = stdout.splitlines()
    active = re.search(r"state:\s+PORT_ACTIVE", stdout) is not None
    add(check, "passed" if active else "failed",
        "; ".join(line.strip() for line in lines if re.search("(state|link_layer|active_mtu):", line)))


def _verify_ucx_info(add, result, gpus):
    """Per HCA of the plan: does ucx_info -d list a memory domain for it with CUDA memory types?"""
    if result.get("rc", 1) != 0:
        error = result["stderr"] if "stderr" in result else result.get("msg", "")
        add("ucx_info -d", "warning", "ucx_info not runnable (the NIXL wheel bundles UCX without ucx_info): "
            + str(error).strip())
        return
    info = result.get("stdout") or ""
    hcas = []
    for gpu in gpus:
        if gpu.get("hca") and gpu["hca"] not in hcas:
            hcas.append(gpu["hca"])
    for hca in hcas:
        check = "ucx cuda memory %s" % hca
        block = re.search(r"Memory domain:\s+" + re.escape(hca) + r"\b[\s\S]*?(?=Memory domain:|$)", info)
        if not block:
            add(check, "failed", "no UCX memory domain for %s" % hca)
        elif re.search(r"memory types:.*cuda", block.group()):
            add(check, "passed", re.search(r"memory types:[^\n]*", block.group()).group())
        else:
            add(check, "warning", "only host memory types on %s for this ucx_info: GPUDirect RDMA not proven "
                "(distro UCX has no CUDA; check the UCX the workers use)" % hca)
