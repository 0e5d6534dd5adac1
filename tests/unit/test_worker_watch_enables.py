# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Every unit watch of the worker role that starts workers also enables them.

A worker started but not enabled runs until the next reboot and then stays down: the host comes
back without it, and no check of the rollout sees it. The role starts workers in two places
(roles/dynamo_worker/tasks/wave.yml): the wave watch, and the retry of late workers, which also
starts the workers of later waves that the late wave held back. A CI run found the retry without
`enable` (a same-GPU worker of the second wave, started by the retry, was running and disabled;
the next whole site.yml enabled it and reported a change).
"""
import os

import yaml

ROLE_TASKS = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "dynamo_worker", "tasks")
MODULE = "kvshare.dynamo.dynamo_worker_unit_watch"


def _tasks(items):
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _watches():
    found = []
    for name in sorted(os.listdir(ROLE_TASKS)):
        if not name.endswith(".yml"):
            continue
        with open(os.path.join(ROLE_TASKS, name)) as handle:
            for task in _tasks(yaml.safe_load(handle)):
                if MODULE in task:
                    found.append((name, task.get("name"), task[MODULE]))
    return found


def test_the_role_has_both_starting_watches():
    starting = [(f, n) for f, n, args in _watches() if "worker_watch_units(" in str(args.get("units"))
                and ", true," in str(args.get("units"))]
    assert len(starting) == 2, starting


def test_every_watch_that_starts_workers_enables_them():
    for filename, name, args in _watches():
        units = str(args.get("units"))
        if "worker_watch_units(" in units and ", true," in units:
            assert args.get("enable") is True, "%s: %r starts workers without enable: true" % (filename, name)
