# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Public filters, who is where: a host's address and the frontend URL (module_utils/stack.py, the
one definition)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def host_address(host, hostvars):
    """``host``'s address: kvshare_bind_address, else its default IPv4 fact, else ansible_host, else its name."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    return _stack.host_address(hostvars, host)


def frontend_url(groups, hostvars, service_defaults, group=None):
    """``http://<address>:<port>`` of the first host of the frontend group ('' when there is none;
    ``service_defaults``: kvshare_service_defaults, the port's default; ``group`` defaults to
    module_utils' FRONTEND_GROUP)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    try:
        return _stack.frontend_url(hostvars, groups, dict(service_defaults),
                                   _stack.FRONTEND_GROUP if group is None else group)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("frontend_url: pass kvshare_service_defaults (role kvshare.dynamo.kvshare) as "
                                 "the service defaults: %s" % exc) from exc


class FilterModule:
    """kvshare.dynamo public filters (stack)."""

    def filters(self):
        return {
            "frontend_url": frontend_url,
            "host_address": host_address,
        }
