# -*- coding: utf-8 -*-
# Copyright: kvshare.dynamo developers
# Apache-2.0 (see galaxy.yml)
"""Filters for the shared preflight checks (kvshare.dynamo.*); logic in plugins/module_utils/."""

from __future__ import annotations

from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers


def worker_port_requests(workers, bind_address):
    """Port items for kvshare.dynamo.port_clash_check: every worker's system_port and rpc_port."""
    return _workers.port_requests(list(workers or []) if isinstance(workers, list) else [], bind_address)


def worker_cluster_errors(hosts, hostvars, maru_hosts=None):
    """Cross-host worker checks (unique maru_instance_id, Maru server URLs served by a maru_pool host)."""
    host_workers = {}
    for host in hosts or []:
        try:
            host_workers[host] = hostvars[host]["dynamo_workers"]
        except KeyError:
            continue
    urls = None
    if maru_hosts is not None:
        urls = []
        for host in maru_hosts:
            try:
                urls.append(str(hostvars[host]["maru_pool_server_url"]))
            except KeyError:
                urls = None  # the maru_pool preflight did not run for this host: no URL check
                break
    return _workers.cluster_worker_errors(host_workers, urls)


class FilterModule:
    """kvshare.dynamo validation filters."""

    def filters(self):
        return {
            "worker_port_requests": worker_port_requests,
            "worker_cluster_errors": worker_cluster_errors,
        }
