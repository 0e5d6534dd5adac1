# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Public filter: each worker with the settings of the KV pool it names (kv_pool_workers); logic in
plugins/module_utils/kv_pools.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def kv_pool_workers(workers, host, hostvars, groups, contract):
    """``host``'s workers, each that names a pool (kv_pool) with what the pool gives it (``contract``: the
    stack contract, kvshare_service_defaults, for what the pool host leaves unset)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    try:
        return _kv_pools.resolve_workers(host, list(workers or []), hostvars, groups, dict(contract))
    except _kv_pools.PoolError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """kvshare.dynamo public filters (kv_pools)."""

    def filters(self):
        return {
            "kv_pool_workers": kv_pool_workers,
        }
