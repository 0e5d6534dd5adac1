# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Internal filter (kvshare.dynamo.internal.*): why the frontend group is not one host."""

from __future__ import annotations


def frontend_group_errors(groups, group=None):
    """Why the frontend group is not one host (empty when it is; ``group`` defaults to module_utils'
    FRONTEND_GROUP)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    return _stack.frontend_group_errors(groups, _stack.FRONTEND_GROUP if group is None else group)


class FilterModule:
    """kvshare.dynamo internal filters (stack)."""

    def filters(self):
        return {
            "frontend_group_errors": frontend_group_errors,
        }
