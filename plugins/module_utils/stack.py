# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Who is where in a kvshare.dynamo stack: the one definition of a host's address and of the
frontend URL, read by modules, filters, playbooks and role defaults alike.

The address of host H (ADDRESS_ORDER, the only fallback in the collection):

1. ``kvshare_bind_address`` (the inventory's: every service of H listens on and advertises it),
2. H's default IPv4 from gathered facts (``ansible_facts.default_ipv4.address``),
3. ``ansible_host``,
4. the inventory name of H.

The frontend URL: ``http://<address>:<port>`` of the first host of the frontend group, where the
address is the host's ``dynamo_frontend_http_host`` if the inventory sets one, else its address, and
the port its ``dynamo_frontend_http_port``, else the stack contract's (``kvshare_service_defaults``,
passed in by the caller: roles/kvshare is its only home).

``hostvars`` may be Ansible's HostVars (values templated on access) or plain dicts.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

ADDRESS_ORDER = ("kvshare_bind_address", "ansible_facts.default_ipv4.address", "ansible_host", "inventory name")
FRONTEND_GROUP = "dynamo_frontend"
# The variables bind_address_of reads: a caller that hands it a host's variables picks these.
BIND_ADDRESS_VARIABLES = ("kvshare_bind_address", "ansible_facts", "ansible_default_ipv4")


def _get(host_vars, key):
    try:
        value = host_vars[key]
    except (KeyError, TypeError, AttributeError):
        return None
    return None if value in (None, "") else value


def _host_vars(hostvars, host):
    try:
        return hostvars[host]
    except (KeyError, TypeError):
        return {}


def default_ipv4_address(facts):
    """The default IPv4 address in a host's gathered facts (``ansible_facts``), as gathered (None when absent)."""
    return ((facts or {}).get("default_ipv4") or {}).get("address")


def bind_address_of(host_vars):
    """The address the host's services bind to: steps 1-2 of ADDRESS_ORDER (None when neither is known)."""
    value = _get(host_vars, "kvshare_bind_address")
    if value is None:
        facts = _get(host_vars, "ansible_facts") or {}
        value = _get(_get(facts, "default_ipv4") or {}, "address") if hasattr(facts, "get") else None
    if value is None:
        value = _get(_get(host_vars, "ansible_default_ipv4") or {}, "address")
    return None if value is None else str(value).strip()


def address_of(host_vars, host=None):
    """The address of one host from its own variables (all of ADDRESS_ORDER)."""
    value = bind_address_of(host_vars)
    if value is None:
        value = _get(host_vars, "ansible_host")
    if value is None:
        value = host
    return None if value is None else str(value).strip()


def host_address(hostvars, host):
    """The address of ``host`` (ADDRESS_ORDER)."""
    return address_of(_host_vars(hostvars, host), str(host))


def frontend_host(groups, group=FRONTEND_GROUP):
    """The frontend host: the first host of ``group`` ('' when there is none)."""
    hosts = list((groups or {}).get(group) or [])
    return str(hosts[0]) if hosts else ""


def frontend_group_errors(groups, group=FRONTEND_GROUP):
    """Why the frontend group is not one host ([] when it is, or is empty: the worker checks say
    that). A deployment has one frontend: the workers' readiness probes, verify.yml, status.yml and
    the frontend URL all use the first host of the group, so a second frontend would be started but
    never proven ready, nor used."""
    hosts = [str(h) for h in (groups or {}).get(group) or []]
    if len(hosts) <= 1:
        return []
    return ["group %s has %d hosts (%s): a deployment has one frontend. The workers' readiness probes, "
            "verify.yml, status.yml and the frontend URL use the first, %s, only: %s would be started but "
            "never proven ready, nor used. Keep one host in %s"
            % (group, len(hosts), ", ".join(hosts), hosts[0], ", ".join(hosts[1:]), group)]


def frontend_url(hostvars, groups, service_defaults, group=FRONTEND_GROUP):
    """``http://<address>:<port>`` of the frontend ('' when the group is empty); ``service_defaults``:
    the stack contract, whose dynamo_frontend_http_port applies where the host sets none."""
    host = frontend_host(groups, group)
    if not host:
        return ""
    host_vars = _host_vars(hostvars, host)
    address = _get(host_vars, "dynamo_frontend_http_host") or host_address(hostvars, host)
    port = _get(host_vars, "dynamo_frontend_http_port") or service_defaults["dynamo_frontend_http_port"]
    return "http://%s:%s" % (address, port)


def worker_system_url(hostvars, host, system_port):
    """``http://<address of host>:<system_port>``: a worker's DYN_SYSTEM_PORT endpoint (health, metrics)."""
    return "http://%s:%s" % (host_address(hostvars, host), system_port)
