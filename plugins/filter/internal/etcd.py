# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Internal filter (kvshare.dynamo.internal.*): the leave check of playbooks/remove_host.yml
(etcd_leave_problem)."""

from __future__ import annotations


def etcd_leave_problem(members, host, peer_url, health):
    """Why this member cannot leave its cluster, or "" (see module_utils.etcd.leave_check)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import etcd as _etcd
    return _etcd.leave_check(str(host), list(members or []), str(peer_url), health)["problem"]


class FilterModule:
    """kvshare.dynamo internal filters (etcd)."""

    def filters(self):
        return {
            "etcd_leave_problem": etcd_leave_problem,
        }
