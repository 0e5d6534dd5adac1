# -*- coding: utf-8 -*-
# Copyright: kvshare.dynamo developers
# Apache-2.0 (see galaxy.yml)
"""A systemd unit watched while a service starts: state from ``systemctl show``, crashes counted.

Stdlib only (runs on the managed host inside modules). With ``Restart=always`` a crashing service
never stays failed: systemd restarts it, so the crash shows only as NRestarts rising and as the
``auto-restart`` sub-state between two runs. ``CrashWatch`` counts those while a caller polls.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

# The properties read (systemctl show -p ...).
PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID",
              "ExecMainCode", "ExecMainStatus")
# ExecMainCode: the si_code of the main process's last exit (CLD_EXITED, CLD_KILLED, CLD_DUMPED).
_EXITED, _KILLED, _DUMPED = 1, 2, 3


def show_argv(systemctl, unit):
    return [systemctl, "show", "--no-pager"] + ["--property=%s" % p for p in PROPERTIES] + ["--", unit]


def _int(value, default=0):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def parse_show(text):
    """``systemctl show`` output -> {load_state, active_state, sub_state, result, n_restarts,
    main_pid, exit_code, exit_status}; None when the unit is not loaded (unknown here)."""
    props = {}
    for line in (text or "").splitlines():
        key, eq, value = line.partition("=")
        if eq:
            props[key.strip()] = value.strip()
    if not props or props.get("LoadState") in (None, "", "not-found"):
        return None
    return {
        "load_state": props.get("LoadState", ""),
        "active_state": props.get("ActiveState", ""),
        "sub_state": props.get("SubState", ""),
        "result": props.get("Result", ""),
        "n_restarts": _int(props.get("NRestarts")),
        "main_pid": _int(props.get("MainPID")),
        "exit_code": _int(props.get("ExecMainCode")),
        "exit_status": _int(props.get("ExecMainStatus")),
    }


def exit_text(state):
    """The main process's last exit, e.g. 'status 1 (exit-code)' or 'signal SIGKILL (signal)'."""
    if state["exit_code"] == _EXITED:
        text = "status %d" % state["exit_status"]
    elif state["exit_code"] in (_KILLED, _DUMPED):
        try:
            name = signal.Signals(state["exit_status"]).name
        except ValueError:
            name = str(state["exit_status"])
        text = "signal %s%s" % (name, ", core dumped" if state["exit_code"] == _DUMPED else "")
    else:
        return "none yet"
    return "%s (%s)" % (text, state["result"] or "?")


def down(state):
    """The main process is gone after a crash: waiting to be restarted, or given up."""
    return state["sub_state"] == "auto-restart" or state["active_state"] == "failed"


class CrashWatch:
    """Counts a unit's crashes from the first state it is given on.

    A crash is a restart systemd made (NRestarts rising) or the unit being down right now
    (auto-restart: NRestarts rises only when the restart happens; failed: no restart comes).
    A manual (re)start may reset NRestarts to 0: the restarts counted until then are kept.
    """

    def __init__(self):
        self.base = None
        self.last = None
        self.counted = 0

    def update(self, state):
        """The number of crashes seen so far, given the unit's current state."""
        n = state["n_restarts"]
        if self.base is None:
            self.base = self.last = n
        if n < self.last:
            self.counted += self.last - self.base
            self.base = n
        self.last = n
        return self.counted + (n - self.base) + (1 if down(state) else 0)


def summary(state, crashes):
    """What the module returns about a watched unit."""
    return {
        "active_state": state["active_state"],
        "sub_state": state["sub_state"],
        "n_restarts": state["n_restarts"],
        "crashes": crashes,
        "last_exit": exit_text(state),
        "main_pid": state["main_pid"],
    }


def describe(unit, state, crashes):
    """One line: why the unit is considered crashed."""
    return ("unit %s crashed %d time(s) while starting: ActiveState %s/%s, NRestarts %d, last exit %s"
            % (unit, crashes, state["active_state"], state["sub_state"], state["n_restarts"], exit_text(state)))


def journal_argv(journalctl, unit, lines):
    return [journalctl, "--no-pager", "--output=cat", "-n", str(int(lines)), "-u", unit]
