# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Controller side of kvshare.dynamo.port_clash_check: probe now, or queue for one probe per host.

validate.yml sets ``__kvshare_port_probe_queue: true`` for the roles' preflights: each role's
port check then adds its ports to the host's queue (``__kvshare_port_requests``, a fact of this
run only, as set_fact makes it) instead of starting the module on the host, and validate.yml's
last port task probes the whole queue in one module run (each run starts Python on the host and
reads every process's file descriptors: about 1 s on the sandbox, five times per host before).
A role run alone probes at once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

QUEUE = "__kvshare_port_requests"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        queued = list(task_vars.get(QUEUE) or [])
        if boolean(task_vars.get("__kvshare_port_probe_queue", False), strict=False):
            ports = self._task.args.get("ports") or []
            result.update(changed=False, queued=ports,
                          msg="queued %d port(s) for validation's one port probe of this host" % len(ports),
                          ansible_facts={QUEUE: queued + [port for port in ports if port not in queued]},
                          _ansible_facts_cacheable=False)
            return result
        result.update(self._execute_module(module_name="kvshare.dynamo.port_clash_check",
                                           module_args=self._task.args, task_vars=task_vars))
        if queued:
            # The queue is probed (the final task passes it as its ports): empty it for this run.
            result["ansible_facts"] = {QUEUE: []}
            result["_ansible_facts_cacheable"] = False
        return result
