# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters that derive etcd client settings from the inventory (etcd_client_urls), and the leave
check of playbooks/remove_host.yml (etcd_leave_problem). Each is documented in its <name>.yml."""

from __future__ import annotations


def _get(hostvars_of_host, key, default=None):
    try:
        value = hostvars_of_host[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def etcd_client_urls(hosts, hostvars, service_defaults, tls=True):
    """Return the client URLs of the given etcd hosts, in inventory order; ``service_defaults``
    (kvshare_service_defaults) gives the client port of a host that sets none."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    scheme = "https" if tls else "http"
    urls = []
    for host in hosts or []:
        hv = hostvars[host]
        member = _get(hv, "etcd_member")
        if isinstance(member, dict) and member.get("client_url"):
            urls.append(str(member["client_url"]))
            continue
        address = _get(hv, "etcd_address") or _stack.host_address(hostvars, host)
        port = int(_get(hv, "etcd_client_port", service_defaults["etcd_client_port"]))
        urls.append("%s://%s:%d" % (scheme, address, port))
    return urls


def etcd_leave_problem(members, host, peer_url, health):
    """Why this member cannot leave its cluster, or "" (see module_utils.etcd.leave_check)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import etcd as _etcd
    return _etcd.leave_check(str(host), list(members or []), str(peer_url), health)["problem"]


class FilterModule:
    """kvshare.dynamo etcd filters."""

    def filters(self):
        return {"etcd_client_urls": etcd_client_urls, "etcd_leave_problem": etcd_leave_problem}
