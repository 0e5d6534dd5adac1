# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters for the maru_pool role (kvshare.dynamo.maru_pool_*); logic in plugins/module_utils/maru.py.

Collection roles cannot carry their own filter_plugins, hence this collection-level file."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.kvshare.dynamo.plugins.module_utils import maru


def _wrap(func):
    def inner(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except maru.MaruConfigError as exc:
            raise AnsibleFilterError(str(exc))
    inner.__name__ = func.__name__
    return inner


def connector_configs(workers, server_url, defaults=None, id_prefix=""):
    """{worker: kv_transfer_config dict} for MaruKVConnector."""
    built = maru.connector_configs(workers, server_url, defaults or {}, id_prefix)
    return dict((name, item["kv_transfer_config"]) for name, item in built.items())


def instance_ids(workers, id_prefix=""):
    return [w.get("instance_id") or "%s%s" % (id_prefix, w.get("name")) for w in (workers or [])]


def config_errors(workers, defaults, model=None):
    """Error strings for sizes and the per-layer chunk check, per worker; names the variables."""
    errors = []
    rows = workers or [{}]
    for idx, worker in enumerate(rows):
        label = "maru_pool_workers[%d] (%s)" % (idx, worker.get("name", "?")) if workers else "maru_pool"
        chunk_var = "%s.chunk_size" % label if worker.get("chunk_size") is not None else "maru_pool_chunk_size"
        pool_var = "%s.pool_size" % label if worker.get("pool_size") is not None else "maru_pool_pool_size"

        def pick(key):
            return worker.get(key) if worker.get(key) is not None else defaults.get(key)

        try:
            errors.extend(maru.check_chunk_size(pick("chunk_size"), pick("pool_size"), model or None,
                                                pick("kv_chunk_tokens"), chunk_var=chunk_var, pool_var=pool_var))
        except maru.MaruConfigError as exc:
            errors.append(str(exc))
    return sorted(set(errors))


def lmcache_configs(workers, host, port, pool_size_gb, chunk_tokens=256, id_prefix=""):
    out = {}
    for worker in workers or []:
        iid = worker.get("instance_id") or "%s%s" % (id_prefix, worker["name"])
        out[worker["name"]] = maru.lmcache_config(host, port, pool_size_gb, worker.get("kv_chunk_tokens") or chunk_tokens,
                                                  instance_id=iid)
    return out


def clash_text(clash, variable):
    return "%s %s is held by %s (pid %s) on %s" % (variable, clash["port"], clash["process"], clash["pid"], clash["address"])


class FilterModule(object):
    def filters(self):
        return {
            "maru_pool_connector_configs": _wrap(connector_configs),
            "maru_pool_instance_ids": _wrap(instance_ids),
            "maru_pool_config_errors": _wrap(config_errors),
            "maru_pool_lmcache_configs": _wrap(lmcache_configs),
            "maru_pool_duplicates": _wrap(maru.duplicate_instance_ids),
            "maru_pool_port_clashes": _wrap(maru.port_clashes),
            "maru_pool_parse_size": _wrap(maru.parse_size),
            "maru_pool_clash_text": clash_text,
        }
