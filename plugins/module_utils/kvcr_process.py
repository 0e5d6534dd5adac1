# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR (KV Cache Runner) variant: the engine processes in a worker unit's cgroup, and killing them.

Stdlib only (kvcr_engine runs it on managed hosts); imports nothing of the collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal

ENGINE_TITLE = "VLLM::EngineCore"


def unit_cgroup_dirs(cgroup_root, control_group):
    """Where a unit's ControlGroup lives: unified (v2), hybrid (unified/ or systemd/ below the root)."""
    rel = str(control_group or "").lstrip("/")
    if not rel:
        return []
    return [os.path.join(cgroup_root, sub, rel) for sub in ("", "unified", "systemd")
            if os.path.isfile(os.path.join(cgroup_root, sub, rel, "cgroup.procs"))]


def cgroup_pids(cgroup_dir):
    """Every pid in a cgroup (v2) directory and its children."""
    pids = []
    for root, _dirs, files in os.walk(cgroup_dir):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(root, "cgroup.procs")) as handle:
                    pids.extend(int(line) for line in handle.read().split())
            except (OSError, ValueError):
                continue
    return sorted(set(pids))


def process_title(pid, proc_root="/proc"):
    """The process's title as ps shows it: cmdline (NULs as spaces), else comm."""
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        raw = b""
    title = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    if title:
        return title
    try:
        with open(os.path.join(proc_root, str(pid), "comm")) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def engine_pids(cgroup_dir, pattern=ENGINE_TITLE, proc_root="/proc"):
    """[(pid, title)] of the processes in the unit's cgroup whose title contains pattern."""
    found = []
    for pid in cgroup_pids(cgroup_dir):
        title = process_title(pid, proc_root)
        if pattern in title:
            found.append((pid, title))
    return found


def kill_pids(pids, sig=signal.SIGKILL, kill=os.kill):
    """Send sig to each pid; returns (killed, gone) lists (a pid that vanished is not an error)."""
    killed, gone = [], []
    for pid in pids:
        try:
            kill(pid, sig)
            killed.append(pid)
        except ProcessLookupError:
            gone.append(pid)
    return killed, gone
