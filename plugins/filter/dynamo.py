# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Public filter: the cross-instance sharing pairs verify.yml proves (kv_share_pairs)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def kv_share_pairs(hosts, hostvars, named_pairs, groups, contract):
    """Worker pairs for verify.yml (see module_utils.workers.share_pairs); each worker as its pool
    (kv_pool) configures it, which needs ``groups`` and the stack contract (kvshare_service_defaults)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    host_workers = dict((host, _kv_pools.host_workers(host, hostvars, groups, dict(contract))) for host in hosts or [])
    try:
        return _workers.share_pairs(host_workers, named_pairs)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """kvshare.dynamo public filters (dynamo)."""

    def filters(self):
        return {
            "kv_share_pairs": kv_share_pairs,
        }
