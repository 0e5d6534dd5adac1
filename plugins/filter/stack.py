# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Who is where: a host's address and the frontend URL (module_utils/stack.py, the one definition)."""

from __future__ import annotations

from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack


def host_address(host, hostvars):
    """``host``'s address: kvshare_bind_address, else its default IPv4 fact, else ansible_host, else its name."""
    return _stack.host_address(hostvars, host)


def frontend_url(groups, hostvars, group=_stack.FRONTEND_GROUP):
    """``http://<address>:<port>`` of the first host of the frontend group ('' when there is none)."""
    return _stack.frontend_url(hostvars, groups, group)


class FilterModule:
    """kvshare.dynamo stack filters (who is where)."""

    def filters(self):
        return {"host_address": host_address, "frontend_url": frontend_url}
