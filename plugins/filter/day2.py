# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Public filter of the day-2 playbooks: Prometheus file_sd target groups (prometheus_file_sd)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def prometheus_file_sd(hostvars, groups, service_defaults, maru_metrics_port=0, cluster="kvshare"):
    """file_sd target groups per job (see module_utils.day2.prometheus_targets)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    try:
        return _day2.prometheus_targets(dict(hostvars), dict(groups), dict(service_defaults), maru_metrics_port, cluster=cluster)
    except KeyError as exc:
        raise AnsibleFilterError("prometheus_file_sd: the service defaults have no %s (pass kvshare_service_defaults)" % exc) from exc


class FilterModule:
    """kvshare.dynamo public filters (day2)."""

    def filters(self):
        return {
            "prometheus_file_sd": prometheus_file_sd,
        }
