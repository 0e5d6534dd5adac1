# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters for the day-2 playbooks: rolling-restart steps, Prometheus file_sd, the status table."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def worker_restart_groups(workers, unit="worker", names=None):
    """Steps of a rolling restart (see module_utils.day2.restart_groups)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    try:
        return _day2.restart_groups(list(workers or []), unit, None if names is None else list(names))
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError("worker_restart_groups: %s" % exc) from exc


def prometheus_file_sd(hostvars, groups, service_defaults, maru_metrics_port=0, cluster="kvshare"):
    """file_sd target groups per job (see module_utils.day2.prometheus_targets)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    try:
        return _day2.prometheus_targets(dict(hostvars), dict(groups), dict(service_defaults), maru_metrics_port, cluster=cluster)
    except KeyError as exc:
        raise AnsibleFilterError("prometheus_file_sd: the service defaults have no %s (pass kvshare_service_defaults)" % exc) from exc


def stack_status_table(hosts):
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    return _day2.status_table(list(hosts or []))


def stack_status_summary(hosts):
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    return _day2.status_summary(list(hosts or []))


class FilterModule:
    """kvshare.dynamo day-2 filters."""

    def filters(self):
        return {
            "worker_restart_groups": worker_restart_groups,
            "prometheus_file_sd": prometheus_file_sd,
            "stack_status_table": stack_status_table,
            "stack_status_summary": stack_status_summary,
        }
