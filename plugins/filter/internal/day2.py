# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Internal filters (kvshare.dynamo.internal.*) of the day-2 playbooks: rolling-restart steps and the
status table."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def worker_restart_groups(workers, unit="worker", names=None):
    """Steps of a rolling restart (see module_utils.day2.restart_groups)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    try:
        return _day2.restart_groups(list(workers or []), unit, None if names is None else list(names))
    except (ValueError, KeyError) as exc:
        raise AnsibleFilterError("worker_restart_groups: %s" % exc) from exc


def stack_status_table(hosts):
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    return _day2.status_table(list(hosts or []))


def stack_status_summary(hosts):
    from ansible_collections.kvshare.dynamo.plugins.module_utils import day2 as _day2
    return _day2.status_summary(list(hosts or []))


class FilterModule:
    """kvshare.dynamo internal filters (day2)."""

    def filters(self):
        return {
            "stack_status_summary": stack_status_summary,
            "stack_status_table": stack_status_table,
            "worker_restart_groups": worker_restart_groups,
        }
