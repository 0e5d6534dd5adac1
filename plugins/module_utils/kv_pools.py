# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""How a KV pool feeds a worker: the one place (issue 17).

A worker of ``dynamo_workers`` names its pool with ``kv_pool``:

* ``kv_pool: maru`` or ``kv_pool: {type: maru, host: <pool host>, pool_size: 8G, chunk_size: 128K,
  kv_chunk_tokens: 256, instance_id: <id>, eager_map: false}``. The pool host is ``host`` when given
  (a host of group ``maru_pool``), else this host when it is in ``maru_pool``, else the only host of
  ``maru_pool``; anything else is an error. The connector settings come from the pool host's
  public variables (``maru_pool_bind_address``, ``maru_pool_server_port``, ``maru_pool_pool_size``,
  ``maru_pool_chunk_size``, ``maru_pool_kv_chunk_tokens``, ``maru_pool_connector``), a value the
  worker sets in ``kv_pool`` winning; ``instance_id`` defaults to ``<worker host>-<worker name>``.
* ``kv_pool: kvcr``: this host's KVCR settings (module_utils.kvcr_config.host_worker_settings: the
  ``kv_transfer_config``, ``env`` and ``extra_args`` of the host's KVCR slot); this host must be a
  KVCR host. A mocker (a stand-in for the KVCR worker) takes the environment only.

What the pool gives is merged with what the worker writes: ``kv_transfer_config`` mapping by mapping
(the worker's value wins, except where the pool sets the key: an error), ``env`` (the pool's keys may
not be set again), ``extra_args`` (the pool's first). The resolved worker keeps ``kv_pool`` as a
mapping with ``type`` and ``host``. Variables are read through ``hostvars``; what the inventory leaves
unset comes from the stack contract (``kvshare_service_defaults``, roles/kvshare: the pool roles'
defaults read it too), which every caller passes in as ``contract``, so every play can resolve a
worker, also those that load no pool role (verify.yml, status.yml).
``hostvars`` may be Ansible's HostVars (values templated on access) or plain dicts.

Stdlib only.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config as _kvcr_config
from ansible_collections.kvshare.dynamo.plugins.module_utils import maru as _maru
from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers

POOL_TYPES = ("maru", "kvcr")
MARU_GROUP = "maru_pool"
WORKERS_GROUP = "dynamo_workers"
# kv_pool keys a worker may set, per pool type (what is not here comes from the pool's side).
KEYS = {
    "maru": ("type", "host", "pool_size", "chunk_size", "kv_chunk_tokens", "instance_id", "eager_map"),
    "kvcr": ("type",),
}
# The pool host's variables the workers' settings are derived from (unset: the stack contract's).
MARU_HOST_KEYS = ("maru_pool_bind_address", "maru_pool_server_port", "maru_pool_pool_size", "maru_pool_chunk_size",
                  "maru_pool_kv_chunk_tokens", "maru_pool_connector", "maru_pool_lmcache_pool_size_gb")
# The collection's MaruKVConnector (upstream's with vLLM 0.31's KV layout; docs/maru.md).
MARU_CONNECTOR = "MaruKVConnector"
MARU_CONNECTOR_MODULE = "kvshare_maru_connector"
LMCACHE_CONNECTOR = "LMCacheConnectorV1"
# Where the maru_pool role writes each worker's LMCache config (connector lmcache).
LMCACHE_CONFIG_DIR = "/etc/maru/lmcache"
# kv_connector_extra_config keys of MaruKVConnector that the pool sets, and the kv_pool key that
# sets each per worker (None: the pool host alone).
MARU_EXTRA_FROM_POOL = {
    "maru_server_url": None,
    "maru_pool_size": "pool_size",
    "maru_chunk_size": "chunk_size",
    "maru_kv_chunk_tokens": "kv_chunk_tokens",
    "maru_instance_id": "instance_id",
    "maru_eager_map": "eager_map",
}
# kv_pool key -> the pool host's default for it.
_MARU_POOL_DEFAULT = {"pool_size": "maru_pool_pool_size", "chunk_size": "maru_pool_chunk_size",
                      "kv_chunk_tokens": "maru_pool_kv_chunk_tokens"}


class PoolError(ValueError):
    """A worker's kv_pool cannot be resolved; the message says why (the caller says where)."""


def _var(host_vars, key, default=None):
    """A host's variable (None/unset: ``default``)."""
    try:
        value = host_vars[key]
    except (KeyError, TypeError, AttributeError):
        return default
    return default if value is None else value


def _host_vars(hostvars, host):
    try:
        return hostvars[host]
    except (KeyError, TypeError):
        return {}


def _group(groups, name):
    return [str(h) for h in (groups or {}).get(name) or []]


def pool_ref(value):
    """``kv_pool`` as written -> a mapping with ``type`` (None when unset). Raises PoolError."""
    if value is None:
        return None
    if isinstance(value, str):
        ref = {"type": value}
    elif isinstance(value, Mapping):
        ref = dict(value)
    else:
        raise PoolError("must be a pool type (%s) or a mapping with `type` (got %r)" % (", ".join(POOL_TYPES), value))
    kind = ref.get("type")
    if kind not in POOL_TYPES:
        raise PoolError("pool type %r is unknown (choose one of %s)" % (kind, ", ".join(POOL_TYPES)))
    unknown = sorted(str(k) for k in ref if k not in KEYS[kind])
    if unknown:
        raise PoolError("unknown key(s) %s for a %s pool (known: %s)" % (", ".join(unknown), kind, ", ".join(KEYS[kind])))
    return ref


def maru_pool_host(host, ref, groups):
    """The maru_pool host a worker on ``host`` uses: ``ref['host']``, else ``host`` itself when it is
    a pool host, else the only pool host. Raises PoolError."""
    pool_hosts = _group(groups, MARU_GROUP)
    named = ref.get("host")
    if named:
        if str(named) not in pool_hosts:
            raise PoolError("host %s is not in group %s (its hosts: %s)" % (named, MARU_GROUP, ", ".join(pool_hosts) or "none"))
        return str(named)
    if str(host) in pool_hosts:
        return str(host)
    if len(pool_hosts) == 1:
        return pool_hosts[0]
    if not pool_hosts:
        raise PoolError("no host of group %s runs a Maru pool" % MARU_GROUP)
    raise PoolError("group %s has several hosts (%s) and %s is none of them: name one, kv_pool: {type: maru, host: <host>}"
                    % (MARU_GROUP, ", ".join(pool_hosts), host))


def maru_pool_settings(pool_vars, contract):
    """The pool host's maru_pool_* values the workers' settings come from (the contract's for unset ones)."""
    return dict((key, _var(pool_vars, key, contract[key])) for key in MARU_HOST_KEYS)


def maru_server_url(pool):
    """maru-server URL of a pool (maru_pool_settings)."""
    return "tcp://%s:%d" % (pool["maru_pool_bind_address"], int(pool["maru_pool_server_port"]))


def _is_loopback(address):
    text = str(address).strip().lower()
    if text == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _check_reachable(host, pool_host, pool, pool_host_address):
    """A worker on another host than its pool reaches maru-server on the pool's bind address: refuse
    a loopback one, which on that host is the host itself (the role default, 127.0.0.1), unless it
    is the pool host's own kvshare_bind_address (hosts that share one network namespace, like the
    sandbox's containers on 127.0.10.N). Raises PoolError."""
    bind = pool["maru_pool_bind_address"]
    if str(host) == pool_host or not _is_loopback(bind) or str(bind) == str(pool_host_address):
        return
    raise PoolError("its pool on %s listens on %s (maru_pool_bind_address on %s), a loopback address: from %s "
                    "that is %s itself, not the pool. Set maru_pool_bind_address on %s to an address %s reaches "
                    "(e.g. %s's kvshare_bind_address), or run the worker on %s"
                    % (pool_host, bind, pool_host, host, host, pool_host, host, pool_host, pool_host))


def lmcache_config_file(worker_name):
    return "%s/%s.yaml" % (LMCACHE_CONFIG_DIR, worker_name)


def _maru_values(host, worker, ref, pool):
    """The per-worker Maru values: the worker's kv_pool keys, else the pool host's defaults."""
    values = {}
    for key, var in _MARU_POOL_DEFAULT.items():
        values[key] = ref[key] if ref.get(key) is not None else pool[var]
    values["instance_id"] = str(ref.get("instance_id") or "%s-%s" % (host, worker.get("name")))
    eager = ref.get("eager_map")
    if isinstance(eager, str):  # as the argument spec's bool reads text
        eager = eager.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    values["eager_map"] = eager
    return values


def _maru_parts(host, worker, ref, pool_host, pool):
    if worker.get("engine") == "mocker":
        raise PoolError("engine mocker has no KV connector: drop kv_pool")
    values = _maru_values(host, worker, ref, pool)
    if pool["maru_pool_connector"] == "lmcache":
        if str(host) != pool_host:
            raise PoolError("the pool on %s uses LMCache (maru_pool_connector: lmcache), whose config file is written on "
                            "%s: only workers on %s can use it" % (pool_host, pool_host, pool_host))
        return {"kv_transfer_config": {"kv_connector": LMCACHE_CONNECTOR, "kv_role": "kv_both"},
                "env": {"LMCACHE_CONFIG_FILE": lmcache_config_file(worker.get("name"))}}
    try:
        for key in ("pool_size", "chunk_size"):  # a bad size is named by where it comes from
            _maru.parse_size(values[key], ("kv_pool." + key) if ref.get(key) is not None
                             else "%s on %s" % (_MARU_POOL_DEFAULT[key], pool_host))
        extra = _maru.worker_extra_config(maru_server_url(pool), values["instance_id"], values["pool_size"],
                                          values["chunk_size"], values["kv_chunk_tokens"], values["eager_map"])
    except (_maru.MaruConfigError, TypeError, ValueError) as exc:
        raise PoolError(str(exc))
    return {"kv_transfer_config": _maru.kv_transfer_config(extra, module_path=MARU_CONNECTOR_MODULE)}


def _kvcr_parts(host, worker, host_vars, groups, contract):
    group = str(_var(host_vars, "kvcr_group_name", contract["kvcr_group_name"]))
    if str(host) not in _group(groups, group):
        raise PoolError("%s is not a KVCR host (group %s): a KVCR worker uses its own host's KVCR slot" % (host, group))
    try:
        settings = _kvcr_config.host_worker_settings(host_vars, contract)
    except (KeyError, TypeError, ValueError) as exc:
        raise PoolError("the KVCR settings of %s: %s" % (host, exc))
    if worker.get("engine") == "mocker":
        return {"env": settings["env"]}  # a stand-in: no KV connector, no KV events
    return settings


def worker_parts(host, worker, hostvars, groups, contract):
    """(kv_pool as a mapping with type and host, what the pool gives the worker) for a worker that
    names a pool; (None, {}) for one that does not. Raises PoolError."""
    ref = pool_ref(worker.get("kv_pool"))
    if ref is None:
        return None, {}
    if ref["type"] == "maru":
        pool_host = maru_pool_host(host, ref, groups)
        pool_vars = _host_vars(hostvars, pool_host)
        pool = maru_pool_settings(pool_vars, contract)
        parts = _maru_parts(host, worker, ref, pool_host, pool)
        _check_reachable(host, pool_host, pool, _var(pool_vars, "kvshare_bind_address"))
    else:
        pool_host = str(host)
        parts = _kvcr_parts(host, worker, _host_vars(hostvars, host), groups, contract)
    return dict(ref, host=pool_host), parts


def _user_config(worker):
    """The worker's own kv_transfer_config as a mapping ({} when unset or not parseable)."""
    try:
        return _workers.kv_transfer_config(worker, require_connector=False) or {}
    except ValueError:
        return {}


def _merge(base, over):
    """``over`` merged into ``base``, mapping by mapping (``over`` wins)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def merge(worker, ref, parts):
    """The worker with what its pool gives it (see the module's docstring)."""
    out = dict(worker)
    out["kv_pool"] = ref
    if "kv_transfer_config" in parts:
        out["kv_transfer_config"] = _merge(parts["kv_transfer_config"], _user_config(worker))
    if parts.get("env"):
        out["env"] = dict(parts["env"], **dict(worker.get("env") or {}))
    if parts.get("extra_args"):
        out["extra_args"] = list(parts["extra_args"]) + [str(a) for a in worker.get("extra_args") or []]
    return out


def resolve_workers(host, workers, hostvars, groups, contract):
    """``host``'s workers, each that names a pool with what the pool gives it. Raises PoolError
    naming the worker's kv_pool as the inventory writes it."""
    out = []
    for pos, worker in enumerate(workers or []):
        if not isinstance(worker, Mapping) or worker.get("kv_pool") is None:
            out.append(worker)
            continue
        try:
            ref, parts = worker_parts(host, worker, hostvars, groups, contract)
        except PoolError as exc:
            raise PoolError("%s: %s" % (_workers.key_label(host, worker, pos, "kv_pool"), exc))
        out.append(merge(worker, ref, parts))
    return out


def host_workers(host, hostvars, groups, contract):
    """``host``'s resolved workers read through hostvars; the written ones when a pool does not
    resolve (its own check reports that), [] when the host has none."""
    workers = _var(_host_vars(hostvars, host), "dynamo_workers", [])
    if not isinstance(workers, (list, tuple)):
        return []
    try:
        return resolve_workers(host, list(workers), hostvars, groups, contract)
    except PoolError:
        return list(workers)


def _conflicts(host, worker, pos, ref, parts):
    """What the worker writes again that its pool sets (one source for each setting)."""
    errors = []
    label = "kv_pool: %s on %s" % (ref["type"], ref["host"])
    user = _user_config(worker)
    pool_cfg = parts.get("kv_transfer_config")
    if user and pool_cfg is not None:
        where = _workers.key_label(host, worker, pos, "kv_transfer_config")
        if ref["type"] == "kvcr":
            errors.append("%s: a KVCR worker's connector comes whole from its pool (%s): drop it" % (where, label))
        elif user.get("kv_connector") not in (None, pool_cfg["kv_connector"]):
            errors.append("%s: kv_connector %s, but its pool (%s) gives %s: drop one of the two"
                          % (where, user["kv_connector"], label, pool_cfg["kv_connector"]))
        else:
            extra = user.get("kv_connector_extra_config")
            for key in sorted(k for k in extra or {} if k in MARU_EXTRA_FROM_POOL) if isinstance(extra, Mapping) else ():
                own = MARU_EXTRA_FROM_POOL[key]
                errors.append("%s: kv_connector_extra_config.%s is set by its pool (%s); %s"
                              % (where, key, label, ("set it per worker as kv_pool.%s" % own) if own
                                 else "it follows the pool host's maru_pool_bind_address and maru_pool_server_port"))
    env = worker.get("env") or {}
    for key in sorted(k for k in parts.get("env") or {} if isinstance(env, Mapping) and k in env):
        errors.append("%s: %s is set by its pool (%s)" % (_workers.key_label(host, worker, pos, "env"), key, label))
    return errors


def _block_size_errors(host, worker, pos, ref, parts):
    """A MaruKVConnector worker whose vLLM block size does not divide the chunk (kv_chunk_tokens) its
    pool gives it. The connector then cuts its own chunks to another length (aligned down to the block
    size, or one block when that gives 0), and a chunk's key is the hash of the prompt up to the chunk's
    end: its keys match none the pool's other workers store, and theirs none of its (nothing is
    shared), and one of its pages is not the size the chunk-size check computed."""
    cfg = parts.get("kv_transfer_config") or {}
    if ref["type"] != "maru" or cfg.get("kv_connector") != MARU_CONNECTOR:
        return []
    args = worker.get("extra_args")
    written = _workers.arg_value(args, "--block-size") is not None
    where = _workers.key_label(host, worker, pos, "extra_args" if written else "kv_pool")
    try:
        block = _workers.block_size(worker)
    except ValueError as exc:
        return ["%s: %s" % (where, exc)]
    try:
        tokens = int(cfg["kv_connector_extra_config"]["maru_kv_chunk_tokens"])
    except (KeyError, TypeError, ValueError):
        return []  # the pool's own checks name a bad kv_chunk_tokens
    if tokens <= 0 or tokens % block == 0:
        return []
    source = (_workers.key_label(host, worker, pos, "kv_pool.kv_chunk_tokens") if ref.get("kv_chunk_tokens") is not None
              else "maru_pool_kv_chunk_tokens on %s" % ref["host"])
    size = ("--block-size %d" % block) if written else ("vLLM's default block size %d (no --block-size in extra_args)" % block)
    return ["%s: %s does not divide the %d-token chunks its pool stores (%s). MaruKVConnector would cut this worker's "
            "chunks to %d tokens: their keys (hashes of the prompt up to each chunk's end) match none that the pool's "
            "other workers store, so no KV is shared. Use a block size that divides %d, or a kv_chunk_tokens that is a "
            "multiple of %d for every worker of the pool"
            % (where, size, tokens, source, _maru.effective_kv_chunk_tokens(tokens, block), tokens, block)]


def pool_errors(host, workers, hostvars, groups, contract):
    """Messages about the pools ``host``'s workers name (empty when every one resolves), each naming
    the worker's key as the inventory writes it (dynamo_workers[<worker>].kv_pool on <host>)."""
    errors = []
    if not isinstance(workers, (list, tuple)):
        return errors
    for pos, worker in enumerate(workers):
        if not isinstance(worker, Mapping):
            continue
        if worker.get("kv_pool") is None:
            if _user_config(worker).get("kv_connector") == MARU_CONNECTOR:
                errors.append("%s: a MaruKVConnector worker names its pool, kv_pool: maru (the connector settings come "
                              "from the pool host; per-worker pool_size, chunk_size, kv_chunk_tokens and instance_id go "
                              "in kv_pool)" % _workers.key_label(host, worker, pos, "kv_transfer_config"))
            continue
        try:
            ref, parts = worker_parts(host, worker, hostvars, groups, contract)
        except PoolError as exc:
            errors.append("%s: %s" % (_workers.key_label(host, worker, pos, "kv_pool"), exc))
            continue
        errors.extend(_conflicts(host, worker, pos, ref, parts))
        errors.extend(_block_size_errors(host, worker, pos, ref, parts))
    return errors


def pool_clients(pool_host, hostvars, groups, contract):
    """The workers of every host (group dynamo_workers) that the Maru pool on ``pool_host`` feeds, in
    inventory order: host, name, where (their kv_pool as the inventory writes it), the values they
    use (instance_id, pool_size, chunk_size, kv_chunk_tokens, eager_map), for each value the variable
    it comes from (``source``), and with connector lmcache their LMCache config and its file. Workers
    whose kv_pool does not resolve are left out (their own check reports them)."""
    pool_host = str(pool_host)
    pool = maru_pool_settings(_host_vars(hostvars, pool_host), contract)
    clients, seen = [], set()
    for host in _group(groups, WORKERS_GROUP):
        workers = _var(_host_vars(hostvars, host), "dynamo_workers", [])
        for pos, worker in enumerate(workers if isinstance(workers, (list, tuple)) else []):
            try:
                ref = pool_ref(worker.get("kv_pool")) if isinstance(worker, Mapping) else None
                if ref is None or ref["type"] != "maru" or maru_pool_host(host, ref, groups) != pool_host:
                    continue
            except PoolError:
                continue
            if (host, worker.get("name")) in seen:
                continue  # one name twice on a host: the worker checks say so (not as a shared instance id)
            seen.add((host, worker.get("name")))
            where = _workers.key_label(host, worker, pos, "kv_pool")
            client = dict(_maru_values(host, worker, ref, pool), host=host, name=worker.get("name"), where=where)
            # Where each value comes from: the worker's kv_pool key, else the pool host's default.
            client["source"] = dict((key, _workers.key_label(host, worker, pos, "kv_pool." + key))
                                    for key in ("pool_size", "chunk_size", "kv_chunk_tokens", "instance_id")
                                    if ref.get(key) is not None)
            for key, var in _MARU_POOL_DEFAULT.items():
                client["source"].setdefault(key, var)  # the pool host's (the pool's checks name the host)
            client["source"].setdefault("instance_id", "%s (default %s)" % (where, client["instance_id"]))
            if pool["maru_pool_connector"] == "lmcache":
                client["lmcache_config_file"] = lmcache_config_file(worker.get("name"))
                try:
                    client["lmcache_config"] = _maru.lmcache_config(
                        pool["maru_pool_bind_address"], pool["maru_pool_server_port"], pool["maru_pool_lmcache_pool_size_gb"],
                        client["kv_chunk_tokens"], instance_id=client["instance_id"])
                except _maru.MaruConfigError as exc:
                    raise PoolError(str(exc))
            clients.append(client)
    return clients


def client_errors(clients, pool_defaults, model=None):
    """Messages about a Maru pool's workers (pool_clients): sizes and the per-layer chunk size of each
    (naming the variable each value comes from), and two workers with one maru_instance_id. Without
    workers the pool's own defaults (``pool_defaults``: pool_size, chunk_size, kv_chunk_tokens) are
    checked."""
    errors = []
    rows = list(clients or []) or [dict(pool_defaults or {}, source={})]
    for row in rows:
        source = row.get("source") or {}
        try:
            errors.extend(_maru.check_chunk_size(
                row.get("chunk_size"), row.get("pool_size"), model or None, row.get("kv_chunk_tokens"),
                chunk_var=source.get("chunk_size", "maru_pool_chunk_size"),
                pool_var=source.get("pool_size", "maru_pool_pool_size")))
        except (_maru.MaruConfigError, TypeError, ValueError) as exc:
            errors.append(str(exc))
    seen = {}
    for client in clients or []:
        iid = client["instance_id"]
        if iid in seen:
            errors.append("maru_instance_id '%s' of %s is already used by %s: give each worker its own kv_pool.instance_id"
                          % (iid, client["source"]["instance_id"], seen[iid]["source"]["instance_id"]))
        else:
            seen[iid] = client
    return sorted(set(errors), key=errors.index)
