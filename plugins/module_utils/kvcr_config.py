# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR (KV Cache Runner) variant: cache identity and the configuration rendered from it.

What a worker that names the host's pool (``kv_pool: kvcr``, module_utils.kv_pools) gets, and the
memory service's argv. Stdlib only.

Facts this follows (docs/kvcr.md has the sources):
- A cache owner id must match ``^[0-9a-f]{32}:[0-9a-f]{32}/[0-9a-f]{16}/[0-9a-f]{32}$`` and be
  unique per global DP rank (ai-dynamo 1.6.1 ``dynamo/vllm/state_agent.py``); the seed builds
  ``<domain>/<16 hex>/<slot as 32 hex>`` from a stable replica index.
- The state agent needs prefix caching and vLLM KV events on the worker.
- ``python -m kvcr.kvcr_service`` (PyPI ``kvcr`` 0.1.1) takes ``--socket-path --pool-dir
  --guard-count --pool-sizes-gb --compatibility-digest`` and optionally
  ``--heartbeat-timeout-ms`` and ``--log-level``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack

VARIANTS = ("process_local", "memory_service")
CACHE_OWNER_RE = re.compile(r"^[0-9a-f]{32}:[0-9a-f]{32}/[0-9a-f]{16}/[0-9a-f]{32}$")
OWNER_PREFIX_RE = re.compile(r"^[0-9a-f]{32}:[0-9a-f]{32}/[0-9a-f]{16}$")


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


# ---------------------------------------------------------------------------
# rendered configuration
# ---------------------------------------------------------------------------

def kv_transfer_config(variant, slot, slot_count, advertise_host, options):
    """The worker's --kv-transfer-config for the variant (OffloadingConnector + KVCR tier).

    options (every one required; the kvcr role's variables, or host_worker_settings's): owner_prefix,
    cpu_bytes, control_port, socket_path (memory_service), compatibility_digest (memory_service),
    secondary_g2_slots (process_local), enable_telemetry.
    """
    if variant not in VARIANTS:
        raise ValueError("unknown KVCR variant %r" % (variant,))
    tier = {"type": "kvcr"}
    if variant == "memory_service":
        tier["kvcr_service_socket_path"] = str(options["socket_path"])
        tier["compatibility_digest"] = str(options.get("compatibility_digest") or "")
    else:
        tier["secondary_g2_slots"] = int(options["secondary_g2_slots"])
    tier.update({
        "router_capabilities": ["router_hint"],
        "control_host": str(advertise_host),
        "control_ports": [int(options["control_port"])],
        "control_advertise_host": str(advertise_host),
        "enable_telemetry": bool(options["enable_telemetry"]),
    })
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "cpu_bytes_to_use": int(options["cpu_bytes"]),
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


# The host's kvcr_* variables the worker settings (kv_pool: kvcr, module_utils.kv_pools) are derived
# from; what the host leaves unset comes from the stack contract (kvshare_service_defaults, passed in:
# the kvcr role's defaults read it too), so plays that do not load the kvcr role (status.yml,
# verify.yml, any play that only reads dynamo_workers) derive the same settings.
HOST_KEYS = ("kvcr_variant", "kvcr_cache_slot_count", "kvcr_cache_owner_prefix", "kvcr_compatibility_digest",
             "kvcr_hash_seed", "kvcr_ucx_proto_info", "kvcr_cpu_bytes", "kvcr_control_port", "kvcr_kv_events_port",
             "kvcr_secondary_g2_slots", "kvcr_enable_telemetry", "kvcr_service_socket_path")


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


def host_worker_settings(host_vars, contract):
    """The KVCR worker settings of one host from its variables alone (no preflight facts needed).

    host_vars: the host's variables (hostvars[host]); contract: the stack contract
    (kvshare_service_defaults), whose HOST_KEYS fill what the host leaves unset.
    Returns {"kv_transfer_config", "env", "extra_args"}: what a worker that names the host's pool
    (kv_pool: kvcr) gets.
    """
    def get(key):
        value = host_vars.get(key)
        return contract[key] if value is None else value
    advertise = host_advertise_host(host_vars)
    options = {
        "owner_prefix": get("kvcr_cache_owner_prefix"),
        "cpu_bytes": int(get("kvcr_cpu_bytes")),
        "control_port": int(get("kvcr_control_port")),
        "socket_path": get("kvcr_service_socket_path"),
        "compatibility_digest": get("kvcr_compatibility_digest"),
        "secondary_g2_slots": int(get("kvcr_secondary_g2_slots")),
        "enable_telemetry": boolean(get("kvcr_enable_telemetry"), strict=False),
    }
    slot, count = host_vars.get("kvcr_cache_slot"), get("kvcr_cache_slot_count")
    return {
        "kv_transfer_config": kv_transfer_config(get("kvcr_variant"), slot, count, advertise, options),
        "env": worker_env(slot, count, get("kvcr_hash_seed"), boolean(get("kvcr_ucx_proto_info"), strict=False)),
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
