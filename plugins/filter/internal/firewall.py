# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters for the firewall role (kvshare.dynamo.firewall_*); logic in plugins/module_utils/firewall.py.

The ports come from the variables the service roles use: a host's own (inventory) value, else the
default from the stack contract (kvshare_service_defaults, roles/kvshare), which the role passes in,
so no port number is repeated in the firewall role and no role file is read here."""

from __future__ import annotations


from ansible.errors import AnsibleError, AnsibleFilterError


def role_defaults(service_defaults):
    """{variable: default} for the variables of _fw.ROLE_DEFAULT_KEYS, from the stack contract
    (kvshare_service_defaults, roles/kvshare)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import firewall as _fw
    out = {}
    for role, keys in _fw.ROLE_DEFAULT_KEYS.items():
        for key in keys:
            if key not in (service_defaults or {}):
                raise AnsibleFilterError("firewall: %s (the %s role's service default) is missing from "
                                         "kvshare_service_defaults (roles/kvshare)" % (key, role))
            else:
                out[key] = service_defaults[key]
    return out


class _HostView:
    """One host's variables, templated on access; a value that cannot be templated (it refers to a
    fact another play sets, e.g. the kvcr exports in dynamo_workers) is returned raw, so the ports
    next to it can still be read."""

    def __init__(self, hostvars, host):
        self._hostvars = hostvars
        self._host = host
        self._vars = hostvars[host]

    def __contains__(self, key):
        return key in self._vars

    def __getitem__(self, key):
        try:
            return self._vars[key]
        except AnsibleError:
            raw_get = getattr(self._hostvars, "raw_get", None)
            if raw_get is None:
                raise
            return raw_get(self._host)[key]


class _HostVarsView:
    def __init__(self, hostvars):
        self._hostvars = hostvars

    def __getitem__(self, host):
        if host not in self._hostvars:
            raise KeyError(host)
        return _HostView(self._hostvars, host)


def firewall_plan(hostvars, host, groups, options, service_defaults):
    """The firewall plan of ``host`` (see module_utils.firewall.host_plan); ``service_defaults``: the
    stack contract kvshare_service_defaults."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import firewall as _fw
    try:
        return _fw.host_plan(str(host), dict(groups), _HostVarsView(hostvars), dict(options or {}),
                             role_defaults(service_defaults))
    except _fw.FirewallError as exc:
        raise AnsibleFilterError(str(exc))


def firewall_ssh_lockout_error(ssh_connection, ssh_port, ssh_sources, host):
    from ansible_collections.kvshare.dynamo.plugins.module_utils import firewall as _fw
    return _fw.ssh_lockout_error(ssh_connection, ssh_port, ssh_sources, host)


def firewall_local_port_range_error(proc_text, dynamic_port_range, host):
    from ansible_collections.kvshare.dynamo.plugins.module_utils import firewall as _fw
    return _fw.local_port_range_error(proc_text, dynamic_port_range, host)


class FilterModule(object):
    def filters(self):
        return {
            "firewall_plan": firewall_plan,
            "firewall_ssh_lockout_error": firewall_ssh_lockout_error,
            "firewall_local_port_range_error": firewall_local_port_range_error,
        }
