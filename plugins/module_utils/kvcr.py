# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR (KV Cache Runner) variant: inventory checks, worker config, Guard-recovery metrics.

Stdlib only: the metric and process helpers run on managed hosts.

Facts this follows (docs/kvcr.md has the sources):
- A cache owner id must match ``^[0-9a-f]{32}:[0-9a-f]{32}/[0-9a-f]{16}/[0-9a-f]{32}$`` and be
  unique per global DP rank (ai-dynamo 1.6.1 ``dynamo/vllm/state_agent.py``); the seed builds
  ``<domain>/<16 hex>/<slot as 32 hex>`` from a stable replica index.
- ``dynamo_state_agent.raw_advertise_host`` must be connectable: not loopback, not ``0.0.0.0``.
- The state agent needs prefix caching and vLLM KV events on the worker.
- ``python -m kvcr.kvcr_service`` (PyPI ``kvcr`` 0.1.1) takes ``--socket-path --pool-dir
  --guard-count --pool-sizes-gb --compatibility-digest`` and optionally
  ``--heartbeat-timeout-ms`` and ``--log-level``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import os
import re
import signal

from ansible_collections.kvshare.dynamo.plugins.module_utils import prometheus_text
from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
from ansible_collections.kvshare.dynamo.plugins.module_utils.rdma_ucx import GPU_LOCAL_PATHS, UNLIMITED_MEMLOCK

VARIANTS = ("process_local", "memory_service")
CACHE_OWNER_RE = re.compile(r"^[0-9a-f]{32}:[0-9a-f]{32}/[0-9a-f]{16}/[0-9a-f]{32}$")
OWNER_PREFIX_RE = re.compile(r"^[0-9a-f]{32}:[0-9a-f]{32}/[0-9a-f]{16}$")
DIGEST_RE = re.compile(r"^[A-Za-z0-9._:/-]+$")
KVCR_TIER = "1:kvcr"

TRANSFER_BLOCKS = "vllm:kvcr_transfer_blocks_total"
TIER_READ_BYTES = "vllm:kv_offload_tiering_read_bytes_total"
TIER_WRITE_BYTES = "vllm:kv_offload_tiering_write_bytes_total"
PROMPT_TOKENS = prometheus_text.VLLM_PROMPT_TOKENS_BY_SOURCE
ENGINE_TITLE = "VLLM::EngineCore"
# sysfs port counters port_xmit_data / port_rcv_data count 4-byte words.
RDMA_COUNTER_UNIT = 4


# ---------------------------------------------------------------------------
# identity
# ---------------------------------------------------------------------------

def as_slot(value):
    """A slot index as int, or None when it is not a non-negative decimal integer (bools refused)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdecimal():
        return int(value)
    return None


def cache_owner_id(slot, slot_count, prefix):
    """The canonical cache owner id of a slot; ValueError when slot or prefix is invalid."""
    count = as_slot(slot_count)
    idx = as_slot(slot)
    if count is None or count <= 0:
        raise ValueError("KVCR cache slot count must be a positive integer (got %r)" % (slot_count,))
    if idx is None:
        raise ValueError("KVCR cache slot must be a decimal integer (got %r)" % (slot,))
    if idx >= count:
        raise ValueError("KVCR cache slot %d is outside [0, %d)" % (idx, count))
    if not isinstance(prefix, str) or not OWNER_PREFIX_RE.match(prefix):
        raise ValueError("KVCR cache owner prefix must match %s (got %r)" % (OWNER_PREFIX_RE.pattern, prefix))
    owner = "%s/%032x" % (prefix, idx)
    if not CACHE_OWNER_RE.match(owner):  # pragma: no cover - guarded by the checks above
        raise ValueError("KVCR cache owner id %r is not canonical" % owner)
    return owner


def advertise_host_error(host):
    """Why a host cannot be the state agent's raw_advertise_host / control_advertise_host, or None."""
    if not isinstance(host, str) or not host:
        return "must be a non-empty host name or address"
    if host in ("*", "localhost", "0.0.0.0", "::", "[::]") or "/" in host or any(c.isspace() for c in host):
        return "must be a connectable host without scheme, port or wildcard (got %r)" % host
    if host.startswith("["):
        literal = host[1:-1] if host.endswith("]") else None
    elif ":" in host:
        return "must not carry a port; bracket IPv6 literals (got %r)" % host
    else:
        literal = host
    try:
        addr = ipaddress.ip_address(literal)
    except (TypeError, ValueError):
        if host.startswith("["):
            return "bracketed host must be an IPv6 literal (got %r)" % host
        return None
    if addr.is_loopback or addr.is_unspecified:
        return "must not be loopback or unspecified (got %s): the state agent and peers connect to it" % host
    return None


# ---------------------------------------------------------------------------
# inventory checks
# ---------------------------------------------------------------------------

def deployment_errors(members, settings):
    """Cross-host checks of the KVCR variant. Returns a list of messages (empty when valid).

    ``members``: one dict per KVCR host: host (inventory name), address (the machine's address:
    ansible_host or kvshare_bind_address), slot (the host's kvcr_cache_slot), kvcr_workers
    (names of this host's workers bound to KVCR).
    ``settings``: variant, slot_count, compatibility_digest, require_two_nodes, router_modes
    (the dynamo_frontend_router_mode of each frontend host), discovery_backend.
    """
    errors = []
    variant = settings.get("variant")
    if variant not in VARIANTS:
        errors.append("kvcr_variant must be one of %s (got %r)" % (", ".join(VARIANTS), variant))
    count = as_slot(settings.get("slot_count"))
    if count is None or count <= 0:
        errors.append("kvcr_cache_slot_count must be a positive integer (got %r)" % (settings.get("slot_count"),))
        count = None
    digest = settings.get("compatibility_digest")
    if variant == "memory_service":
        if not digest:
            errors.append("kvcr_compatibility_digest is required with kvcr_variant=memory_service "
                          "(the service refuses claims from engines with another digest)")
        elif not isinstance(digest, str) or not DIGEST_RE.match(digest):
            errors.append("kvcr_compatibility_digest %r may only contain [A-Za-z0-9._:/-]" % (digest,))
    modes = settings.get("router_modes") or {}
    if not modes:
        errors.append("no frontend in the inventory: KVCR needs a frontend with --router-mode kv")
    for host, mode in sorted(modes.items()):
        if mode != "kv":
            errors.append("dynamo_frontend_router_mode on %s is %r: KVCR needs the KV-aware router (kv); "
                          "direct and round-robin routing produce no router hints" % (host, mode))
    if settings.get("discovery_backend", "etcd") != "etcd":
        errors.append("KVCR uses etcd discovery (the state agent registers there); got %r"
                      % settings.get("discovery_backend"))

    seen_slots = {}
    by_address = {}
    total_workers = 0
    for member in members:
        host = member.get("host")
        names = list(member.get("kvcr_workers") or [])
        total_workers += len(names)
        if len(names) != 1:
            errors.append("%s: exactly one worker must be bound to KVCR on each KVCR host (found %d: %s)"
                          % (host, len(names), ", ".join(names) or "none"))
        slot = as_slot(member.get("slot"))
        if slot is None:
            errors.append("kvcr_cache_slot on %s must be a non-negative integer from the inventory (got %r)"
                          % (host, member.get("slot")))
        elif count is not None and slot >= count:
            errors.append("kvcr_cache_slot %d on %s is outside [0, %d) (kvcr_cache_slot_count)" % (slot, host, count))
        elif slot in seen_slots:
            errors.append("kvcr_cache_slot %d on %s is already used by %s: cache owner ids must be unique"
                          % (slot, host, seen_slots[slot]))
        else:
            seen_slots[slot] = host
        by_address.setdefault(str(member.get("address")), []).append(host)
    if settings.get("require_two_nodes", True):
        for address, hosts in sorted(by_address.items()):
            if len(hosts) > 1:
                errors.append("KVCR hosts %s are one machine (%s): the variant needs its workers on "
                              "separate nodes (kvcr_require_two_nodes)" % (", ".join(sorted(hosts)), address))
        if len(members) < 2 or len(by_address) < 2:
            errors.append("KVCR needs workers on at least two nodes (kvcr_require_two_nodes); the group has %d "
                          "host(s) on %d machine(s)" % (len(members), len(by_address)))
    if count is not None and total_workers > count:
        errors.append("%d KVCR workers but kvcr_cache_slot_count is %d" % (total_workers, count))
    return errors


# What every KVCR host must share, and why: each host's worker, memory service and state agent read
# their host's own copy, so a value set per host could differ. The last entry is the KVCR worker's
# vLLM block size (module_utils.workers.block_size), which is not a kvcr_* variable.
AGREED_SETTINGS = (
    ("kvcr_variant", "the engines' KVCR tier and its memory service work one way on every node"),
    ("kvcr_cache_slot_count", "every worker's KVCR_CACHE_SLOT_COUNT and the state agent's slots"),
    ("kvcr_cache_owner_prefix", "the cache owner ids of one deployment differ in their slot only"),
    ("kvcr_compatibility_digest", "a memory service refuses claims from engines with another digest"),
    ("kvcr_hash_seed", "PYTHONHASHSEED of every worker: block hashes must agree across nodes"),
    ("--block-size", "the KV blocks the nodes hash, announce and fetch from each other"),
)


def _same(value):
    """A setting as compared across hosts (2 and "2" are one value)."""
    return str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else repr(value)


def agreement_errors(host_settings, group="kvcr"):
    """Settings that differ between the KVCR hosts (AGREED_SETTINGS). ``host_settings``: one
    (host, {setting: value}) per KVCR host, in inventory order, the role defaults (HOST_DEFAULTS)
    standing in for what a host leaves unset. Each message names the setting, every host with its
    value and why one value is needed."""
    errors = []
    for key, why in AGREED_SETTINGS:
        values = [(host, settings.get(key)) for host, settings in host_settings if key in settings]
        if len(set(_same(v) for dummy, v in values)) > 1:
            where = ", ".join("%s on %s" % (v if v not in (None, "") else "%r" % (v,), host) for host, v in values)
            if key == "--block-size":
                errors.append("the KVCR workers' vLLM --block-size differs between the KVCR hosts: %s (extra_args; "
                              "vLLM's default is 16). Every KVCR worker needs one block size: %s" % (where, why))
            else:
                errors.append("%s differs between the KVCR hosts: %s. Every host of group %s needs one value: %s; "
                              "set it once, in the group's variables" % (key, where, group, why))
    return errors


def worker_errors(worker, expected_config, variant, require_hardware=True):
    """Checks of the one KVCR worker on a host (as its pool configures it: module_utils.kv_pools)
    against the config this variant renders."""
    errors = []
    name = worker.get("name")
    if (worker.get("kv_pool") or {}).get("type") != "kvcr":
        errors.append("worker %s: must name its pool, kv_pool: kvcr (its kv_transfer_config, env and "
                      "--kv-events-config come from this host's KVCR slot)" % name)
        return errors
    if worker.get("engine") != "vllm":
        if require_hardware:
            errors.append("worker %s: engine must be vllm for KVCR (got %r)" % (name, worker.get("engine")))
        return errors
    if worker.get("prefix_caching") is False:
        errors.append("worker %s: the KV state agent needs prefix caching (drop prefix_caching: false)" % name)
    if not worker.get("gpus"):
        errors.append("worker %s: gpus is required (the UCX environment is chosen per GPU)" % name)
    if worker.get("kv_transfer_config") != expected_config:
        errors.append("worker %s: kv_transfer_config must be the %s config rendered from the slot (what kv_pool: kvcr "
                      "gives), not a hand-written one" % (name, variant))
    args = [str(a) for a in worker.get("extra_args") or []]
    if "--kv-events-config" not in args:
        errors.append("worker %s: extra_args must carry --kv-events-config with enable_kv_cache_events "
                      "(what kv_pool: kvcr gives): the state agent needs vLLM KV events" % name)
    if "--no-enable-prefix-caching" in args:
        errors.append("worker %s: --no-enable-prefix-caching disables what the state agent needs" % name)
    return errors


# ---------------------------------------------------------------------------
# rendered configuration
# ---------------------------------------------------------------------------

def kv_transfer_config(variant, slot, slot_count, advertise_host, options):
    """The worker's --kv-transfer-config for the variant (OffloadingConnector + KVCR tier).

    options: owner_prefix, cpu_bytes, control_port, socket_path (memory_service),
    compatibility_digest (memory_service), secondary_g2_slots (process_local), enable_telemetry.
    """
    if variant not in VARIANTS:
        raise ValueError("unknown KVCR variant %r" % (variant,))
    tier = {"type": "kvcr"}
    if variant == "memory_service":
        tier["kvcr_service_socket_path"] = str(options["socket_path"])
        tier["compatibility_digest"] = str(options.get("compatibility_digest") or "")
    else:
        tier["secondary_g2_slots"] = int(options.get("secondary_g2_slots", 1024))
    tier.update({
        "router_capabilities": ["router_hint"],
        "control_host": str(advertise_host),
        "control_ports": [int(options.get("control_port", 23280))],
        "control_advertise_host": str(advertise_host),
        "enable_telemetry": bool(options.get("enable_telemetry", True)),
    })
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "cpu_bytes_to_use": int(options.get("cpu_bytes", 2147483648)),
            "spec_name": "TieringOffloadingSpec",
            "self_describing_kv_events": True,
            "dynamo_state_agent": {
                "raw_advertise_host": str(advertise_host),
                "cache_owner_ids": {"0": cache_owner_id(slot, slot_count, options["owner_prefix"])},
            },
            "secondary_tiers": [tier],
        },
    }


def worker_env(slot, slot_count, hash_seed, proto_info=False):
    """Environment the KVCR worker adds to its unit (identity and hashing pinned)."""
    env = {
        "KVCR_CACHE_SLOT": str(as_slot(slot)),
        "KVCR_CACHE_SLOT_COUNT": str(as_slot(slot_count)),
        # Block hashes must agree across nodes: Python's str hash is salted per process otherwise.
        "PYTHONHASHSEED": str(hash_seed),
    }
    if proto_info:
        env["UCX_PROTO_INFO"] = "y"
    return env


# Role defaults (roles/kvcr/defaults/main.yml) the worker settings (kv_pool: kvcr,
# module_utils.kv_pools) are derived from when the kvcr role is not loaded (status.yml, verify.yml,
# any play that only reads dynamo_workers);
# tests/unit/plugins/module_utils/test_kvcr.py keeps them in lock-step with the role.
HOST_DEFAULTS = {
    "kvcr_variant": "memory_service",
    "kvcr_cache_slot_count": 2,
    "kvcr_cache_owner_prefix": "01010101010101010101010101010101:02020202020202020202020202020202/0303030303030303",
    "kvcr_compatibility_digest": "",
    "kvcr_hash_seed": 0,
    "kvcr_ucx_proto_info": False,
    "kvcr_cpu_bytes": 2147483648,
    "kvcr_control_port": 23280,
    "kvcr_kv_events_port": 23080,
    "kvcr_secondary_g2_slots": 1024,
    "kvcr_enable_telemetry": True,
    "kvcr_service_socket_path": "/run/kvcr/memory.sock",
}


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y")
    return bool(value)


def host_advertise_host(host_vars):
    """kvcr_advertise_host as the role resolves it: explicit, else kvshare_bind_address, else the default IPv4."""
    if host_vars.get("kvcr_advertise_host"):
        return str(host_vars["kvcr_advertise_host"])
    addr = _stack.bind_address_of(host_vars)
    if not addr:
        raise ValueError("no kvcr_advertise_host, kvshare_bind_address or gathered default IPv4 address")
    return str(addr)


def kv_events_args(port):
    """extra_args that turn on vLLM's KV events (the state agent reads them)."""
    cfg = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:%d" % int(port), "enable_kv_cache_events": True}
    return ["--kv-events-config", json.dumps(cfg, sort_keys=True, separators=(",", ":"))]


def host_worker_settings(host_vars):
    """The KVCR worker settings of one host from its variables alone (no preflight facts needed).

    host_vars: the host's variables (hostvars[host]); role defaults fill what is unset.
    Returns {"kv_transfer_config", "env", "extra_args"}: what a worker that names the host's pool
    (kv_pool: kvcr) gets.
    """
    def get(key):
        value = host_vars.get(key)
        return HOST_DEFAULTS[key] if value is None else value
    advertise = host_advertise_host(host_vars)
    options = {
        "owner_prefix": get("kvcr_cache_owner_prefix"),
        "cpu_bytes": int(get("kvcr_cpu_bytes")),
        "control_port": int(get("kvcr_control_port")),
        "socket_path": get("kvcr_service_socket_path"),
        "compatibility_digest": get("kvcr_compatibility_digest"),
        "secondary_g2_slots": int(get("kvcr_secondary_g2_slots")),
        "enable_telemetry": _truthy(get("kvcr_enable_telemetry")),
    }
    slot, count = host_vars.get("kvcr_cache_slot"), get("kvcr_cache_slot_count")
    return {
        "kv_transfer_config": kv_transfer_config(get("kvcr_variant"), slot, count, advertise, options),
        "env": worker_env(slot, count, get("kvcr_hash_seed"), _truthy(get("kvcr_ucx_proto_info"))),
        "extra_args": kv_events_args(get("kvcr_kv_events_port")),
    }


def service_argv(python, options):
    """argv of the KVCR memory service (``python -m kvcr.kvcr_service``)."""
    sizes = options.get("pool_sizes_gb")
    if isinstance(sizes, (list, tuple)):
        sizes = ",".join(str(s) for s in sizes)
    argv = [python, "-m", "kvcr.kvcr_service",
            "--socket-path", str(options["socket_path"]),
            "--pool-dir", str(options["pool_dir"]),
            "--guard-count", str(int(options.get("guard_count", 1))),
            "--pool-sizes-gb", str(sizes),
            "--compatibility-digest", str(options["compatibility_digest"])]
    if options.get("heartbeat_timeout_ms"):
        argv += ["--heartbeat-timeout-ms", str(options["heartbeat_timeout_ms"])]
    if options.get("log_level"):
        argv += ["--log-level", str(options["log_level"]).upper()]
    return argv


# ---------------------------------------------------------------------------
# RDMA-only transport, pool size
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# Guard-recovery metrics
# ---------------------------------------------------------------------------

def counters(exposition):
    """The KVCR counters of one worker's /metrics (summed over engines; None when absent)."""
    if isinstance(exposition, (str, bytes)):
        exposition = prometheus_text.parse(exposition)
    return {
        "local_fill": exposition.sum(TRANSFER_BLOCKS, {"operation": "local_fill"}),
        "remote_deliver": exposition.sum(TRANSFER_BLOCKS, {"operation": "remote_deliver"}),
        "tier_write_bytes": exposition.sum(TIER_WRITE_BYTES, {"tier": KVCR_TIER}),
        "tier_read_bytes": exposition.sum(TIER_READ_BYTES, {"tier": KVCR_TIER}),
        "external_tokens": exposition.sum(PROMPT_TOKENS, {"source": "external_kv_transfer"}),
    }


_DELTA_KEYS = (
    ("local_fill", TRANSFER_BLOCKS, {"operation": "local_fill"}),
    ("remote_deliver", TRANSFER_BLOCKS, {"operation": "remote_deliver"}),
    ("tier_write_bytes", TIER_WRITE_BYTES, {"tier": KVCR_TIER}),
    ("tier_read_bytes", TIER_READ_BYTES, {"tier": KVCR_TIER}),
    ("external_tokens", PROMPT_TOKENS, {"source": "external_kv_transfer"}),
)


def deltas(before, after):
    """Per-counter deltas between two /metrics snapshots of one worker.

    Returns {key: delta or None (metric absent after), ..., "reset": bool, "missing": [keys]}.
    A counter that went down (the worker restarted in between) is flagged as a reset.
    """
    if isinstance(before, (str, bytes)):
        before = prometheus_text.parse(before)
    if isinstance(after, (str, bytes)):
        after = prometheus_text.parse(after)
    out = {"reset": False, "missing": []}
    for key, name, flt in _DELTA_KEYS:
        delta = prometheus_text.counter_delta(before, after, name, flt)
        out[key] = delta.delta
        out["reset"] = out["reset"] or delta.reset
        if delta.missing:
            out["missing"].append(key)
    return out


def _positive(value):
    return value is not None and value > 0


def identify_source(seed_deltas):
    """Which worker the first request seeded: the only one with Δlocal_fill > 0 and Δtier write > 0.

    seed_deltas: {worker: deltas()}. Returns (source, target, errors); source/target are None when
    the picture is not exactly one seeded worker and one untouched worker.
    """
    seeded = sorted(w for w, d in seed_deltas.items()
                    if _positive(d.get("local_fill")) and _positive(d.get("tier_write_bytes")))
    errors = []
    if len(seed_deltas) != 2:
        errors.append("the Guard check needs exactly two KVCR workers (got %d)" % len(seed_deltas))
    if len(seeded) != 1:
        errors.append("expected exactly one worker with Δ%s{operation=\"local_fill\"} > 0 and "
                      "Δ%s{tier=\"%s\"} > 0 after the first request, found %d (%s)"
                      % (TRANSFER_BLOCKS, TIER_WRITE_BYTES, KVCR_TIER, len(seeded), ", ".join(seeded) or "none"))
    if errors:
        return None, None, errors
    source = seeded[0]
    others = [w for w in seed_deltas if w != source]
    target = others[0]
    touched = dict((k, seed_deltas[target].get(k)) for k in ("local_fill", "tier_write_bytes")
                   if _positive(seed_deltas[target].get(k)))
    if touched:
        return None, None, ["the target %s was seeded by the first request too (%s): nothing would tell a "
                            "remote delivery from a local hit" % (target, touched)]
    return source, target, []


def recovery_errors(baseline, recovered, target_deltas):
    """Why the recovery request does not prove the Guard served the prefix (empty list: it does)."""
    errors = []
    if recovered != baseline:
        errors.append("the answer after the engine kill differs from the baseline: %r != %r"
                      % (_excerpt(recovered), _excerpt(baseline)))
    if target_deltas.get("reset"):
        errors.append("the target's counters went down: it restarted during the check")
    for key, what in (("remote_deliver", "%s{operation=\"remote_deliver\"}" % TRANSFER_BLOCKS),
                      ("tier_read_bytes", "%s{tier=\"%s\"}" % (TIER_READ_BYTES, KVCR_TIER)),
                      ("external_tokens", "%s{source=\"external_kv_transfer\"}" % PROMPT_TOKENS)):
        value = target_deltas.get(key)
        if value is None:
            errors.append("Δ%s: metric absent on the target" % what)
        elif value <= 0:
            errors.append("Δ%s is %s on the target (must be > 0)" % (what, _num(value)))
    return errors


UCX_TRANSPORT_RE = re.compile(r"\brc_mlx5\b")


def transport_count(log_text, pattern=UCX_TRANSPORT_RE):
    """How often UCX names the rc_mlx5 transport in a journal excerpt (UCX_PROTO_INFO=y lines)."""
    return len(pattern.findall(log_text or ""))


def transport_rise_errors(counts):
    """The seed's RDMA proof: the rc_mlx5 count must rise across the resend on each side.

    counts: {side label: (count before, count after)}, e.g. {"source gpu-a kvcr-service": (4, 9)}.
    """
    errors = []
    for side, (before, after) in sorted(counts.items()):
        if before is None or after is None:
            errors.append("%s: rc_mlx5 count unreadable" % side)
        elif after <= before:
            errors.append("%s: rc_mlx5 count did not rise across the resend (%d -> %d): UCX chose no RC transport "
                          "for it (UCX_PROTO_INFO=y must be set)" % (side, before, after))
    return errors


def rdma_errors(xmit_bytes, rcv_bytes, payload_bytes):
    """Whether the HCA counters cover the KVCR payload (source transmit, target receive)."""
    errors = []
    if payload_bytes is None or payload_bytes <= 0:
        return ["no KVCR payload to compare the RDMA counters with (Δtier read bytes is %s)" % _num(payload_bytes)]
    if xmit_bytes is None:
        errors.append("source HCA transmit counter unreadable")
    elif xmit_bytes < payload_bytes:
        errors.append("source HCA transmit bytes %d do not cover the KVCR payload %d" % (xmit_bytes, payload_bytes))
    if rcv_bytes is None:
        errors.append("target HCA receive counter unreadable")
    elif rcv_bytes < payload_bytes:
        errors.append("target HCA receive bytes %d do not cover the KVCR payload %d" % (rcv_bytes, payload_bytes))
    return errors


def _num(value):
    if value is None:
        return "n/a"
    return "%d" % value if float(value).is_integer() else "%s" % value


def _excerpt(text, limit=120):
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------------------
# host side: RDMA counters, engine processes
# ---------------------------------------------------------------------------

def parse_ucx_devices(value):
    """UCX_NET_DEVICES ("mlx5_3:1,mlx5_4:1") -> [(device, port)]; bare names mean port 1."""
    out = []
    for item in str(value or "").split(","):
        item = item.strip()
        if not item or item == "all":
            continue
        dev, dummy, port = item.partition(":")
        out.append((dev, port or "1"))
    return out


def rdma_counters(sysfs_root="/", devices=None):
    """Bytes sent and received by HCA ports, from sysfs (counters are in 4-byte words).

    devices: [(device, port)] to read, or None/[] for every port of every device.
    Returns {"ports": [{"device", "port", "xmit_bytes", "rcv_bytes"}], "xmit_bytes", "rcv_bytes",
    "errors": [...]}; the totals are None when no port could be read.
    """
    base = os.path.join(sysfs_root, "sys/class/infiniband")
    wanted = list(devices or [])
    if not wanted:
        try:
            for dev in sorted(os.listdir(base)):
                ports_dir = os.path.join(base, dev, "ports")
                for port in sorted(os.listdir(ports_dir)):
                    wanted.append((dev, port))
        except OSError:
            pass
    result = {"ports": [], "errors": [], "xmit_bytes": None, "rcv_bytes": None}
    for dev, port in wanted:
        counters_dir = os.path.join(base, dev, "ports", str(port), "counters")
        entry = {"device": dev, "port": str(port)}
        try:
            for key, fname in (("xmit_bytes", "port_xmit_data"), ("rcv_bytes", "port_rcv_data")):
                with open(os.path.join(counters_dir, fname)) as handle:
                    entry[key] = int(handle.read().strip()) * RDMA_COUNTER_UNIT
        except (OSError, ValueError) as exc:
            result["errors"].append("%s:%s: %s" % (dev, port, exc))
            continue
        result["ports"].append(entry)
    if result["ports"]:
        result["xmit_bytes"] = sum(p["xmit_bytes"] for p in result["ports"])
        result["rcv_bytes"] = sum(p["rcv_bytes"] for p in result["ports"])
    elif not wanted:
        result["errors"].append("no RDMA device under %s" % base)
    return result


def unit_cgroup_dirs(cgroup_root, control_group):
    """Where a unit's ControlGroup lives: unified (v2), hybrid (unified/ or systemd/ below the root)."""
    rel = str(control_group or "").lstrip("/")
    if not rel:
        return []
    return [os.path.join(cgroup_root, sub, rel) for sub in ("", "unified", "systemd")
            if os.path.isfile(os.path.join(cgroup_root, sub, rel, "cgroup.procs"))]


def cgroup_pids(cgroup_dir):
    """Every pid in a cgroup (v2) directory and its children."""
    pids = []
    for root, _dirs, files in os.walk(cgroup_dir):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(root, "cgroup.procs")) as handle:
                    pids.extend(int(line) for line in handle.read().split())
            except (OSError, ValueError):
                continue
    return sorted(set(pids))


def process_title(pid, proc_root="/proc"):
    """The process's title as ps shows it: cmdline (NULs as spaces), else comm."""
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        raw = b""
    title = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    if title:
        return title
    try:
        with open(os.path.join(proc_root, str(pid), "comm")) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def engine_pids(cgroup_dir, pattern=ENGINE_TITLE, proc_root="/proc"):
    """[(pid, title)] of the processes in the unit's cgroup whose title contains pattern."""
    found = []
    for pid in cgroup_pids(cgroup_dir):
        title = process_title(pid, proc_root)
        if pattern in title:
            found.append((pid, title))
    return found


def kill_pids(pids, sig=signal.SIGKILL, kill=os.kill):
    """Send sig to each pid; returns (killed, gone) lists (a pid that vanished is not an error)."""
    killed, gone = [], []
    for pid in pids:
        try:
            kill(pid, sig)
            killed.append(pid)
        except ProcessLookupError:
            gone.append(pid)
    return killed, gone
