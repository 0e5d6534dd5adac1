# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR (KV Cache Runner) variant: checks of the inventory (cross-host, agreed settings, the worker).

Stdlib only. Facts this follows (docs/kvcr.md has the sources):
- ``dynamo_state_agent.raw_advertise_host`` must be connectable: not loopback, not ``0.0.0.0``.
- A cache owner id must be unique per global DP rank: one slot per KVCR host, one KVCR worker per host.
- The state agent needs prefix caching and vLLM KV events on the worker.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.kvshare.dynamo.plugins.module_utils.kvcr_config import VARIANTS, as_slot

DIGEST_RE = re.compile(r"^[A-Za-z0-9._:/-]+$")


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
    (host, {setting: value}) per KVCR host, in inventory order, the stack contract's values
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
