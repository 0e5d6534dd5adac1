# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters for the shared preflight checks (kvshare.dynamo.*); logic in plugins/module_utils/."""

from __future__ import annotations


def worker_port_requests(workers, bind_address):
    """Port items for kvshare.dynamo.port_clash_check: every worker's system_port and rpc_port."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    return _workers.port_requests(list(workers or []) if isinstance(workers, list) else [], bind_address)


def worker_cluster_errors(hosts, hostvars, groups, contract):
    """Cross-host worker checks (unique maru_instance_id), on the workers as their pools (kv_pool) configure them."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    contract = dict(contract)
    return _workers.cluster_worker_errors(dict((host, _kv_pools.host_workers(host, hostvars, groups, contract))
                                               for host in hosts or []))


def worker_endpoint_errors(hosts, hostvars):
    """Workers of ``hosts`` that register different models on one Dynamo endpoint (module_utils.workers)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    host_workers, namespaces, envs = {}, {}, {}
    for host in hosts or []:
        host = str(host)
        try:
            host_vars = hostvars[host]
            host_workers[host] = host_vars.get("dynamo_workers") or []
            namespaces[host] = host_vars.get("dynamo_worker_namespace")
            envs[host] = host_vars.get("dynamo_worker_env")
        except Exception:  # a value that cannot be templated: its own check reports it
            continue
    return _workers.endpoint_model_errors(host_workers, namespaces, envs)


def _host_lookup(hostvars, host):
    """key -> the host's own value (inventory, extra vars, facts); KeyError when it has none."""
    def lookup(key):
        host_vars = hostvars[host]
        if key not in host_vars:
            raise KeyError(key)
        return host_vars[key]
    return lookup


def _unset(key):
    """A host that sets nothing (no host to read)."""
    raise KeyError(key)


def _role_defaults(service_defaults, host_lookup=None):
    """role -> {variable: default} for module_utils.ports from the stack contract (kvshare_service_defaults),
    with the kvcr role's state agent default evaluated for the host (ports.runs_state_agent)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import ports as _ports
    defaults = dict(service_defaults or {}, kvcr_state_agent_enabled=_ports.runs_state_agent(
        host_lookup or _unset, service_defaults or {}))
    return dict((role, defaults) for role in _ports.SERVICE_ROLES)


def worker_service_port_errors(workers, host, groups, hostvars, service_defaults):
    """Workers of ``host`` asking for a port another service of the host listens on (defaults included)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import ports as _ports
    lookup = _host_lookup(hostvars, host)
    found, errors = _ports.host_service_ports(str(host), dict(groups), lookup, _role_defaults(service_defaults, lookup))
    return errors + _ports.worker_port_errors(str(host), workers, found)


def bind_address_errors(host, hosts, hostvars):
    """``host``'s kvshare_bind_address (else its default IPv4 fact: stack.bind_address_of) shared with another host."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import ports as _ports
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    addresses = {}
    for name in hosts or []:
        try:
            host_vars = hostvars[name]
            address = _stack.bind_address_of(host_vars)
        except Exception:  # a value that cannot be templated: its own check reports it
            address = None
        addresses[str(name)] = address
    return _ports.bind_address_errors(str(host), addresses)


class FilterModule:
    """kvshare.dynamo validation filters."""

    def filters(self):
        return {
            "worker_port_requests": worker_port_requests,
            "worker_cluster_errors": worker_cluster_errors,
            "worker_endpoint_errors": worker_endpoint_errors,
            "worker_service_port_errors": worker_service_port_errors,
            "bind_address_errors": bind_address_errors,
        }
