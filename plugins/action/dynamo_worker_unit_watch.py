# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Controller side of kvshare.dynamo.dynamo_worker_unit_watch: run in the background, end with it.

A watch lasts as long as the engines take to start (minutes for a large model), so an operator
needs a line while it runs; Ansible's own ``async``/``poll`` gives one, but it notices the end only
at its next poll: up to ``poll`` seconds after the watch, on every wave pass of every rollout (the
workers' proof and everything after waited that long). With ``async`` and ``poll: 0`` this plugin
starts the module the same way (async_wrapper) and waits for it itself: one command on the host at
a time that checks the job file every 0.2 s and returns when the job ends, or after about
``progress_s`` (less what the last wait cost beyond its slice) with the watched units' states,
which become the progress line. The job file is read and removed
by that same command (what async_status and its cleanup would do, without two more module runs).
Without ``async``, or with ``poll`` above 0, the module runs the usual way.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import shlex
import time

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.vars.clean import remove_internal_keys

display = Display()

# How often the host checks the job file (s).
STEP_S = 0.2
RUNNING = "KVSHARE-WATCH-RUNNING"
DONE = "KVSHARE-WATCH-DONE"
JOB_RUNNING_TEXT = '"finished": false'


def wait_command(results_file, units, slice_s, step_s=STEP_S):
    """A POSIX shell command: wait at most `slice_s` (coreutils timeout: a clock, not a count of
    rounds, which a loaded host stretches) for the async job to end (its file no longer says
    finished false). Ended: DONE, then the file, which is removed. Still running: RUNNING, then
    `systemctl is-active` of each watched unit (one state per line, in order)."""
    is_active = "systemctl is-active %s 2>/dev/null" % " ".join(shlex.quote(u) for u in units) if units else "true"
    # The job file's text while the job runs (async_wrapper's first write), written once: the
    # loop and the final test both get it as an argument.
    return ("f=%(job)s; p=%(running_text)s; "
            "timeout %(slice).1f sh -c 'while grep -qFs \"$2\" \"$1\"; do sleep %(step)s; done' sh \"$f\" \"$p\"; "
            "if grep -qFs \"$p\" \"$f\"; then echo %(running)s; %(is_active)s; "
            "else echo %(done)s; cat \"$f\" && rm -f \"$f\"; fi; true"
            % dict(job=shlex.quote(results_file), running_text=shlex.quote(JOB_RUNNING_TEXT), slice=max(slice_s, 0.1),
                   step=step_s, running=RUNNING, done=DONE, is_active=is_active))


def parse_wait(stdout):
    """(ended, the job file's text or None, the units' states) from wait_command's output; a reply
    that is neither is (True, None, []): the wait itself failed."""
    text = to_text(stdout or "")
    head, dummy, rest = text.lstrip().partition("\n")
    if head.strip() == RUNNING:
        return False, None, [line.strip() for line in rest.splitlines() if line.strip()]
    if head.strip() == DONE and rest.strip():
        return True, rest, []
    return True, None, []


def progress_line(host, elapsed, limit, units, states):
    """What an operator reads while the watch runs: the seconds so far and each unit's state."""
    pairs = ", ".join("%s %s" % (unit, state) for unit, state in zip(units, states)) or "no unit state read"
    return "WATCH %s: %d s of at most %d s; %s" % (host, elapsed, limit, pairs)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        if not wrap_async or self._task.poll != 0:
            result.update(self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        started = self._execute_module(task_vars=task_vars, wrap_async=True)
        if started.get("failed") or not started.get("results_file"):
            result.update(started)
            return result
        units = [u.get("unit") for u in self._task.args.get("units") or [] if isinstance(u, dict) and u.get("unit")]
        progress_s = float(self._task.args.get("progress_s") or 10)
        limit = int(self._task.async_val)
        host = task_vars.get("inventory_hostname", "?")
        begin = time.monotonic()
        # What a wait costs beyond its slice (the connection, the command's start), measured on the
        # last one: the next slice is that much shorter, so the lines come every progress_s.
        overhead = 0.5
        while True:
            slice_s = max(progress_s - overhead, STEP_S)
            sent = time.monotonic()
            res = self._low_level_execute_command(wait_command(started["results_file"], units, slice_s), sudoable=True)
            overhead = min(max(time.monotonic() - sent - slice_s, 0.0), progress_s / 2)
            ended, job, states = parse_wait(res.get("stdout"))
            if ended and job is None:
                result.update(failed=True, ansible_job_id=started.get("ansible_job_id"),
                              msg="waiting for the unit watch's job %s on the host failed (rc %s): %s"
                              % (started.get("ansible_job_id"), res.get("rc"), to_text(res.get("stderr") or res.get("stdout"))[:500]))
                return result
            if ended:
                # As async_status hands a job's result back (the module's own JSON, as written).
                data = self._parse_returned_data({"stdout": job, "stderr": ""}, "legacy")
                remove_internal_keys(data)
                result.update(data)
                return result
            elapsed = time.monotonic() - begin
            if elapsed > limit + 30:
                result.update(failed=True, ansible_job_id=started.get("ansible_job_id"),
                              msg="the unit watch did not end within its async limit of %d s" % limit)
                return result
            display.display(progress_line(host, elapsed, limit, units, states))
