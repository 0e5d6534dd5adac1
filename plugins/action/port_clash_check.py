# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Controller side of kvshare.dynamo.port_clash_check: probe now, or queue for one probe per host.

validate.yml sets ``__kvshare_port_probe_queue: true`` for the roles' preflights: each role's
port check then adds its ports to the host's queue (``__kvshare_port_requests``, a host fact
tagged with this run: a queue that an earlier run left in a persistent fact cache is ignored)
instead of starting the module on the host, and validate.yml's last port task (``from_queue``)
probes the whole queue in one module run (each run starts Python on the host and reads every
process's file descriptors: about 1 s on the sandbox, five times per host before).
A role run alone probes at once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

QUEUE = "__kvshare_port_requests"


def run_id():
    """This ansible-playbook run: its process id and start time (a worker's parent is the run's main process).

    The queue is a host fact, and a persistent fact cache keeps facts across runs: a queue that an
    earlier run left (its validation stopped between queueing and probing) must not be probed again.
    """
    parent = os.getppid()
    try:
        with open("/proc/%d/stat" % parent) as handle:
            started = handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = ""
    return "%d:%s" % (parent, started)


def this_runs_queue(task_vars, current):
    """The ports queued in this run (read from ansible_facts: facts reach top-level variables only
    where inject_facts_as_vars is on)."""
    facts = task_vars.get("ansible_facts") or {}
    queue = facts.get(QUEUE) if hasattr(facts, "get") else None
    if not hasattr(queue, "get") or queue.get("run") != current:
        return []
    return list(queue.get("ports") or [])


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        current = run_id()
        queued = this_runs_queue(task_vars, current)
        args = dict(self._task.args)
        from_queue = boolean(args.pop("from_queue", False), strict=False)
        if boolean(task_vars.get("__kvshare_port_probe_queue", False), strict=False) and not from_queue:
            ports = args.get("ports") or []
            result.update(changed=False, queued=ports,
                          msg="queued %d port(s) for validation's one port probe of this host" % len(ports),
                          ansible_facts={QUEUE: {"run": current,
                                                 "ports": queued + [port for port in ports if port not in queued]}})
            return result
        if from_queue:
            if not queued:
                result.update(changed=False, listeners=[], clashes=[], msg="no port queued in this run")
                return result
            args["ports"] = queued
        result.update(self._execute_module(module_name="kvshare.dynamo.port_clash_check",
                                           module_args=args, task_vars=task_vars))
        if from_queue:
            # The queue is probed: empty it for the rest of this run.
            result["ansible_facts"] = {QUEUE: {"run": current, "ports": []}}
        return result
