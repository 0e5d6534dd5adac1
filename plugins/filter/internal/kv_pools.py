# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Internal filters (kvshare.dynamo.internal.*) of the workers' KV pools: validation, the pool's
clients, the maru-server URL; logic in plugins/module_utils/kv_pools.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def kv_pool_errors(workers, host, hostvars, groups, contract):
    """Why the pools ``host``'s workers name do not resolve, or what they set twice (empty when fine)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    return _kv_pools.pool_errors(host, workers, hostvars, groups, dict(contract))


def kv_pool_clients(pool_host, hostvars, groups, contract):
    """The workers of every host that the Maru pool on ``pool_host`` feeds."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    try:
        return _kv_pools.pool_clients(pool_host, hostvars, groups, dict(contract))
    except _kv_pools.PoolError as exc:
        raise AnsibleFilterError("kv_pool_clients of %s: %s" % (pool_host, exc)) from exc


def kv_pool_client_errors(clients, pool_defaults, model=None):
    """Size, per-layer chunk and instance id checks of a Maru pool's workers."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    return _kv_pools.client_errors(list(clients or []), dict(pool_defaults or {}), model)


def maru_server_url(pool):
    """maru-server URL of a pool from its maru_pool_bind_address and maru_pool_server_port."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    try:
        return _kv_pools.maru_server_url(pool)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("maru_server_url: %s (input: %r)" % (exc, pool)) from exc


class FilterModule:
    """kvshare.dynamo internal filters (kv_pools)."""

    def filters(self):
        return {
            "kv_pool_client_errors": kv_pool_client_errors,
            "kv_pool_clients": kv_pool_clients,
            "kv_pool_errors": kv_pool_errors,
            "maru_server_url": maru_server_url,
        }
