# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Public filter: the etcd client URLs of the inventory's members (etcd_client_urls)."""

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


class FilterModule:
    """kvshare.dynamo public filters (etcd)."""

    def filters(self):
        return {
            "etcd_client_urls": etcd_client_urls,
        }
