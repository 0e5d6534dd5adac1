# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Watch systemd units of workers while they start: crashes counted from NRestarts, readiness from
the worker's own /health. Pure logic here (the module does the I/O), so it is unit-tested."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

SHOW_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "Result", "ExecMainCode", "ExecMainStatus",
                   "ExecMainPID", "InvocationID")

# exit codes of ExecMainCode (siginfo si_code): 1 exited, 2 killed, 3 dumped core
_CODES = {"1": "exited", "2": "killed by signal", "3": "dumped core"}


def parse_show_blocks(text, count):
    """`systemctl show -p A,B u1 u2 ...` output as one dict per unit, in argument order (systemd
    separates the units' blocks with a blank line). Missing blocks come back empty."""
    blocks, current = [], {}
    for line in (text or "").splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return [blocks[index] if index < len(blocks) else {} for index in range(count)]


def health_ready(code, body):
    """A worker's /health is ready when it answers 200 with status ready/healthy (or no status)."""
    if code != 200:
        return False
    try:
        status = json.loads(body or "{}").get("status")
    except (ValueError, AttributeError):
        status = None
    return status in (None, "ready", "healthy")


class UnitTrack:
    """One unit across polls. Crashes are automatic restarts (NRestarts) seen since the watch
    began. NRestarts is reset by an explicit (re)start, which the rollout may issue just before
    the watch (no_block): the baseline follows it down."""

    def __init__(self, name, unit, health_url=None, pool=False, replaced_invocation=None):
        self.pool = bool(pool)
        self.replaced_invocation = replaced_invocation or None
        self.name = name
        self.unit = unit
        self.health_url = health_url
        self.base = None
        self.props = {}
        self.health = None
        self.ready_after = None
        self.failed_since = None
        self.last_exit = None

    @property
    def n_restarts(self):
        try:
            return int(self.props.get("NRestarts") or 0)
        except ValueError:
            return 0

    @property
    def current(self):
        """False while the unit still runs the invocation a queued restart replaces."""
        if not self.replaced_invocation:
            return True
        invocation = self.props.get("InvocationID") or ""
        return bool(invocation) and invocation != self.replaced_invocation

    @property
    def restarts(self):
        return max(0, self.n_restarts - (self.base or 0))

    def update(self, props, now):
        self.props = props
        n = self.n_restarts
        if self.base is None or n < self.base:
            self.base = n
        code = _CODES.get(props.get("ExecMainCode", ""), "")
        if code and props.get("ExecMainStatus") not in (None, ""):
            self.last_exit = "%s %s" % (code, props.get("ExecMainStatus"))
        # "failed" is also a passing state of a restart whose stop timed out (SIGKILL, then the
        # start job): only a unit that stays failed counts as given up.
        if props.get("ActiveState") == "failed":
            self.failed_since = now if self.failed_since is None else self.failed_since
        else:
            self.failed_since = None

    def crashed(self, now, crash_limit, failed_grace):
        if self.restarts >= crash_limit:
            return True
        return self.failed_since is not None and now - self.failed_since >= failed_grace

    def report(self):
        return {
            "name": self.name,
            "unit": self.unit,
            "pool": self.pool,
            "active_state": self.props.get("ActiveState"),
            "sub_state": self.props.get("SubState"),
            "result": self.props.get("Result"),
            "n_restarts": self.n_restarts,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "health": self.health,
            "ready": self.ready_after is not None,
            "ready_after_s": None if self.ready_after is None else round(self.ready_after, 2),
        }


def journal_tail(text, lines, exclude=()):
    """The last `lines` lines of a journal excerpt without those containing an excluded string."""
    kept = [line for line in (text or "").splitlines() if not any(x in line for x in exclude or ())]
    return "\n".join(kept[-lines:]) if lines > 0 else ""


# A Python exception line (the name may be qualified: "pkg.mod.KVLayoutError: ..."), after any log
# prefix ("(Worker pid=9) ERROR 12-04 12:29:34 [multiproc_executor.py:1058] ").
_EXCEPTION = re.compile(r"(?:^|[\s\]'\"(])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): (\S.*)$")
# systemd's line as it starts the unit again: the journal of one run ends before it.
_STARTING = re.compile(r"^Starting \S+\.service\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def journal_cause(text, exclude=()):
    """The first exception line of the unit's last run that logged one, from a journal excerpt
    (journalctl -o cat), or "". A crashed engine prints its root cause first: vLLM logs the worker's
    exception, then re-raises it wrapped ("Worker failed with error ...", "Engine core initialization
    failed. See root cause above"), and a restart's new run follows; the tail shows only the wrappers."""
    runs, current = [], []
    for line in (text or "").splitlines():
        if _STARTING.match(line):
            runs.append(current)
            current = []
        elif not any(x in line for x in exclude or ()):
            current.append(_ANSI.sub("", line))
    runs.append(current)
    for run in reversed(runs):
        for line in run:
            match = _EXCEPTION.search(line)
            if match:
                return "%s: %s" % (match.group(1), match.group(2).strip())
    return ""


def final_error(cause, names):
    """Whether a cause line (journal_cause) is an exception of one of these class names (any module)."""
    name = (cause or "").split(": ", 1)[0]
    return bool(cause) and name.rsplit(".", 1)[-1] in set(names or ())


def describe(report):
    """One line per unit for messages."""
    return "%s (%s): %s/%s, %d automatic restart(s) during the watch (NRestarts %d), last exit %s, /health %s" % (
        report["name"], report["unit"], report["active_state"], report["sub_state"], report["restarts"],
        report["n_restarts"], report["last_exit"] or "-", report["health"] or "-")


POOL_UNITS = {
    "maru_pool": ("maru-resource-manager.service", "maru-server.service"),
    "kvcr": ("kvcr-service.service", "kvcr-state-agent.service"),
}


def diagnosis_units(host, host_groups, workers, bind_address, pool_units=None):
    """The units verify.yml looks at on a host when sharing is not proven: the pool services the
    host runs (by its groups) and every worker of the host (with its /health)."""
    pool_units = pool_units or {}
    units = []
    for group in sorted(host_groups or []):
        for unit in pool_units.get(group, POOL_UNITS.get(group, ())):
            units.append({"name": unit.rsplit(".", 1)[0], "unit": unit, "pool": True})
    for worker in workers or []:
        units.append({"name": worker["name"], "unit": "dynamo-worker@%s.service" % worker["name"],
                      "health_url": "http://%s:%s/health" % (bind_address, worker["system_port"])})
    return units


def diagnosis_lines(host, reports):
    """What verify.yml says it sees on one host: lines for pool units not active or restarting and
    workers not active, restarting or not ready. Empty when all looks well."""
    lines = []
    for rep in reports or []:
        what = []
        if rep.get("active_state") != "active":
            what.append("%s/%s" % (rep.get("active_state") or "unknown", rep.get("sub_state") or "-"))
        if rep.get("restarts"):
            what.append("restarted %d time(s) while watched (NRestarts %d)" % (rep["restarts"], rep.get("n_restarts") or 0))
        if rep.get("last_exit") and rep.get("active_state") != "active":
            what.append("last exit %s" % rep["last_exit"])
        if rep.get("health") is not None and not rep.get("ready"):
            what.append("/health %s" % rep["health"])
        if what:
            kind = "pool unit" if rep.get("pool") else "worker"
            lines.append("%s %s on %s: %s" % (kind, rep.get("unit"), host, ", ".join(what)))
    return lines
