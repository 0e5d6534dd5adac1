# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR (KV Cache Runner) variant: what the RDMA-only transport needs on a host.

The worker's UCX environment (transport and HCA port per GPU), the HCA port rdma_ucx chose, the
units' memlock limit and the memory service's pool size. Stdlib only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kvshare.dynamo.plugins.module_utils.rdma_ucx import GPU_LOCAL_PATHS, UNLIMITED_MEMLOCK

# The seed's transport: RC over the GPU-local mlx5 HCA plus CUDA memory; anything else lets UCX
# fall back to TCP or host staging without an error.
REQUIRED_UCX_TLS = "rc_x,cuda"
# Every Guard maps a 100 MiB recovery journal ahead of its pools (kvcr 0.1.1 journal_bytes).
JOURNAL_BYTES = 100 * 1024 * 1024
GIB = 1024 ** 3


def planned_ucx_env(gpu, tls="", extra_env=None):
    """The UCX variables roles/rdma_ucx/templates/gpu.env.j2 writes for one GPU of its plan."""
    env = {}
    dev = gpu.get("ucx_net_devices")
    if dev:
        env["UCX_NET_DEVICES"] = str(dev)
        env["UCX_TLS"] = str(tls) if tls else ("rc_x,cuda" if gpu.get("hca_is_mlx5") else "rc_v,cuda")
    for key, value in (extra_env or {}).items():
        env[str(key)] = str(value)
    return env


def override_ucx_env(device, tls="", extra_env=None):
    """The UCX variables for a GPU pinned by rdma_ucx_hca_overrides ('mlx5_3' or 'mlx5_3:1')."""
    dev = str(device) if ":" in str(device) else "%s:1" % device
    return planned_ucx_env({"ucx_net_devices": dev, "hca_is_mlx5": dev.startswith("mlx5")}, tls, extra_env)


def parse_env_file(text):
    """KEY=VALUE lines of a systemd EnvironmentFile (comments and blanks skipped, quotes stripped)."""
    env = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, dummy, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def ucx_envs(gpus, plan=None, overrides=None, tls="", extra_env=None, files=None):
    """{gpu: UCX environment or None} for the worker's GPUs, from the best source known.

    plan: rdma_ucx's per-GPU plan of this run (its preflight ran here), else None;
    overrides: rdma_ucx_hca_overrides; files: {gpu: text of the GPU's UCX file on the host, or None}
    (what is installed, read when neither plan nor override covers the GPU).
    """
    by_index = dict((str(g.get("index")), g) for g in (plan or []))
    overrides = dict((str(k), v) for k, v in (overrides or {}).items())
    files = dict((str(k), v) for k, v in (files or {}).items())
    out = {}
    for gpu in (str(g) for g in gpus or []):
        if plan is not None:
            out[gpu] = planned_ucx_env(by_index[gpu], tls, extra_env) if gpu in by_index else None
        elif overrides.get(gpu):
            out[gpu] = override_ucx_env(overrides[gpu], tls, extra_env)
        elif files.get(gpu) is not None:
            out[gpu] = parse_env_file(files[gpu])
        else:
            out[gpu] = None
    return out


def _tls_list(value):
    return [t.strip() for t in str(value or "").split(",") if t.strip()]


def rdma_transport_errors(host, gpus, envs, required_tls=REQUIRED_UCX_TLS):
    """Why the KVCR worker's GPUs would not move KV over RDMA (empty list: they would).

    gpus: the worker's GPU indexes; envs: {gpu index (str): UCX environment dict, or None when no
    UCX environment is known for that GPU}. Each message names the GPU and the host.
    """
    errors = []
    want = _tls_list(required_tls)
    hint = ("KVCR moves KV over RDMA only (seed 002); set kvcr_allow_non_rdma_transport=true to allow "
            "another transport on purpose")
    if not gpus:
        return ["%s: the KVCR worker names no GPU, so no GPU-local HCA can be chosen; %s" % (host, hint)]
    for gpu in gpus:
        where = "GPU %s on %s" % (gpu, host)
        env = envs.get(str(gpu))
        if env is None:
            errors.append("%s: no UCX environment (put the host in group rdma_ucx so that its GPU-local HCA is "
                          "written to the GPU's UCX file, or pin it with rdma_ucx_hca_overrides); %s" % (where, hint))
            continue
        devices = [d for d in str(env.get("UCX_NET_DEVICES") or "").split(",") if d.strip()]
        if not devices:
            errors.append("%s: UCX_NET_DEVICES is unset (no ACTIVE RDMA port found for this GPU; pin one with "
                          "rdma_ucx_hca_overrides); %s" % (where, hint))
            continue
        if any(d.strip() == "all" or ":" not in d for d in devices):
            errors.append("%s: UCX_NET_DEVICES=%s must name HCA ports (mlx5_N:port), not %s; %s"
                          % (where, env.get("UCX_NET_DEVICES"), "'all'" if "all" in devices else "network interfaces",
                             hint))
        tls = _tls_list(env.get("UCX_TLS"))
        if tls != want:
            errors.append("%s: UCX_TLS=%s, KVCR requires UCX_TLS=%s (no silent TCP fallback); %s"
                          % (where, env.get("UCX_TLS") or "(unset)", ",".join(want), hint))
    return errors


# Port link layers that carry RC verbs: InfiniBand, or Ethernet on an mlx5 HCA (RoCE; UCX's rc_x,
# which KVCR requires, is mlx5-only).
IB_LINK_LAYER = "InfiniBand"
ROCE_LINK_LAYER = "Ethernet"
_HCA_HINT = ("KVCR needs a GPU-local InfiniBand/RoCE port (seed 002); pin one with rdma_ucx_hca_overrides, or set "
             "kvcr_allow_non_rdma_transport=true to accept this one on purpose")


def hca_errors(host, gpus, plan):
    """Why the HCA port rdma_ucx chose for each KVCR GPU is not usable for KVCR (empty list: all are).

    plan: rdma_ucx's per-GPU plan of this run (module_utils.topology.gpu_plan: path_class, link_layer,
    hca_is_mlx5, source). A GPU the plan lacks, or one without an HCA, is left to
    rdma_transport_errors. Each message names the GPU, the host and the variable that chose the port.
    """
    by_index = dict((str(g.get("index")), g) for g in (plan or []))
    errors = []
    for gpu in (str(g) for g in gpus or []):
        entry = by_index.get(gpu)
        if not entry or not entry.get("hca"):
            continue
        where = "GPU %s on %s" % (gpu, host)
        chosen = "%s (%s)" % (entry.get("ucx_net_devices"),
                              "rdma_ucx_hca_overrides[%s]" % gpu if entry.get("source") == "override"
                              else "discovered by rdma_ucx")
        path = entry.get("path_class")
        if path not in GPU_LOCAL_PATHS:
            errors.append("%s: HCA port %s is not GPU-local: PCIe path %s, KVCR requires %s; %s"
                          % (where, chosen, path or "unknown (not in the discovered topology)",
                             " or ".join(GPU_LOCAL_PATHS), _HCA_HINT))
        layer = entry.get("link_layer")
        if layer == ROCE_LINK_LAYER and not entry.get("hca_is_mlx5"):
            errors.append("%s: HCA port %s is Ethernet on a non-mlx5 HCA: no RoCE port for UCX's rc_x; %s"
                          % (where, chosen, _HCA_HINT))
        elif layer not in (IB_LINK_LAYER, ROCE_LINK_LAYER):
            errors.append("%s: HCA port %s has link layer %s, neither InfiniBand nor Ethernet (RoCE); %s"
                          % (where, chosen, layer or "unknown", _HCA_HINT))
    return errors


_SIZE_RE = re.compile(r"^\s*([0-9]+)\s*([KMGTPE]?)i?B?\s*$", re.IGNORECASE)


def memlock_bytes(value):
    """A LimitMEMLOCK value in bytes (None: unlimited; ValueError when it is not one)."""
    text = str(value).strip()
    if text.lower() in UNLIMITED_MEMLOCK:
        return None
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError("%r is not a LimitMEMLOCK value (bytes, K/M/G/T suffix, or infinity)" % (value,))
    return int(match.group(1)) * 1024 ** "BKMGTPE".index((match.group(2) or "B").upper())


def _show_properties(text):
    props = {}
    for line in str(text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def memlock_errors(host, units):
    """Why the units' memlock limit is too small to pin their buffers for RDMA (empty: it is not).

    units: [{"unit", "show" (``systemctl show -p LoadState -p LimitMEMLOCK`` output) or "limit"
    (a LimitMEMLOCK value), "need" (bytes the unit pins, or {"guard_count", "pool_sizes_gb"}: the memory
    service's pools), "what"}]. A unit systemd has not loaded (not installed yet) is not judged.
    """
    errors = []
    for item in units or []:
        unit = item.get("unit")
        if "show" in item:
            props = _show_properties(item.get("show"))
            if props.get("LoadState") != "loaded":
                continue
            value = props.get("LimitMEMLOCK", "")
        else:
            value = item.get("limit")
        need = item.get("need") or 0
        if isinstance(need, dict):
            need = pool_bytes(need.get("guard_count", 1), need.get("pool_sizes_gb") or [])
        try:
            limit = memlock_bytes(value)
        except ValueError as exc:
            errors.append("%s on %s: LimitMEMLOCK %s" % (unit, host, exc))
            continue
        if limit is not None and limit < int(need):
            errors.append("%s on %s: LimitMEMLOCK=%d bytes is below the %d bytes %s pins for RDMA; it must be "
                          "infinity, as the roles render it (a drop-in or an override lowered it)"
                          % (unit, host, limit, int(need), item.get("what") or "the unit"))
    return errors


def pool_bytes(guard_count, pool_sizes_gb):
    """Bytes the memory service maps in its pool directory: per Guard the journal plus every pool."""
    sizes = pool_sizes_gb if isinstance(pool_sizes_gb, (list, tuple)) else str(pool_sizes_gb).split(",")
    return int(guard_count) * (JOURNAL_BYTES + sum(int(float(s) * GIB) for s in sizes))


def pool_limit_error(guard_count, pool_sizes_gb, limit_gb):
    """Why the configured pools exceed the pool directory's cap ('' when they fit)."""
    need = pool_bytes(guard_count, pool_sizes_gb)
    cap = int(float(limit_gb) * GIB)
    if need > cap:
        return ("the memory service would map %d bytes in its pool directory (%s Guard(s) x (100 MiB journal + "
                "pools %s GB)), more than kvcr_service_pool_limit_gb=%s (%d bytes)"
                % (need, guard_count, pool_sizes_gb, limit_gb, cap))
    return ""
