# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Test-only callback (never shipped): records which playbook files ran tasks on which hosts, for tests/playbook_coverage.py.

Loaded whenever its directory is on the callback plugin path (``ANSIBLE_CALLBACK_PLUGINS=<repo>/tests/callback_plugins``:
``CALLBACK_NEEDS_ENABLED = False``, so no ``callbacks_enabled`` entry is needed and the stdout callback,
``ansible.posix.profile_tasks`` and molecule's settings stay as they are). It writes only where
``KVSHARE_RUN_RECORD=<dir>`` is set: one JSON line per playbook given to ``ansible-playbook``, appended to
``<dir>/<pid>.jsonl`` (one file per process, so parallel runs never interleave), when the playbook's stats
arrive, or at exit for a run that stopped before them (``"complete": false``).

A line (``version`` 1)::

    {"version": 1, "pid": 4242, "start": "...Z", "end": "...Z", "complete": true,
     "playbook": "site.yml",                      # as given on the command line
     "playbook_path": "/repo/site.yml",           # its real path
     "cwd": "/repo", "check": false, "diff": false, "tags": [], "skip_tags": ["molecule-notest"],
     "limit": null, "inventory": ["/repo/inventories/sandbox"],
     "launcher": {"KVSHARE_RUN_SUITE": null, "PYTEST_CURRENT_TEST": "tests/day2/test_x.py::test_y (call)",
                  "MOLECULE_SCENARIO_NAME": null, ...},
     "playbooks": {                               # every playbook file whose plays started, imported ones included
       "/repo/playbooks/validate.yml": {
         "plays": [{"name": "Validate ...", "hosts": "all", "line": 9}],
         "hosts": {"sb1": {"ran": {"ssh": 14}, "skipped": 3, "changed": 0, "failed": 0, "unreachable": 0}}}},
     "stats": {"sb1": {"ok": 40, "failures": 0, "unreachable": 0, "changed": 2, "skipped": 9, "rescued": 0, "ignored": 0}}}

``hosts`` of a playbook file: the host each task result was for (the delegated host for a delegated
task), ``ran`` counting its ok, changed, failed and unreachable results by the connection they used
(``ansible_connection`` of that host in the play, else the task's ``connection`` keyword; a delegated
task's own delegated connection); skipped results count only in ``skipped``; ``failed`` counts failed
results that were not ignored (a rescued one included: the run's ``stats`` tell whether the host ended
failed).
"""
from __future__ import annotations

import atexit
import datetime
import json
import os

from ansible import context
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: kvshare_run_record
type: aggregate
short_description: test-only record of which playbook files ran tasks on which hosts (kvshare.dynamo CI)
description:
  - Appends one JSON line per playbook run to C(<KVSHARE_RUN_RECORD>/<pid>.jsonl) when the environment variable
    E(KVSHARE_RUN_RECORD) names a directory; does nothing otherwise.
  - Lives under tests/, never shipped; tests/playbook_coverage.py reads the records.
"""

ENV_DIR = "KVSHARE_RUN_RECORD"
# What says which test or suite launched the run (the first one set names it in the coverage table).
LAUNCHER_ENV = ("KVSHARE_RUN_SUITE", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "MOLECULE_SCENARIO_NAME",
                "MOLECULE_EPHEMERAL_DIRECTORY", "KVSHARE_VERIFY_CHECKS")


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _real(path):
    try:
        return os.path.realpath(path)
    except (TypeError, ValueError):
        return str(path)


def _cli(key, default=None):
    try:
        value = context.CLIARGS.get(key, default)
    except AttributeError:
        return default
    if isinstance(value, (tuple, list)):
        return [str(v) for v in value]
    return value


class CallbackModule(CallbackBase):
    """One JSON line per playbook run: which playbook files ran tasks on which hosts, over which connection."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kvshare_run_record"
    # Loaded from the callback plugin path without a callbacks_enabled entry.
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, display=None):
        super().__init__(display=display)
        self._dir = os.environ.get(ENV_DIR) or None
        self.disabled = self._dir is None
        self._pid = os.getpid()
        self._record = None
        self._play_file = None
        self._play = None
        self._connections = {}
        self._play_ids = set()
        if not self.disabled:
            atexit.register(self._flush_incomplete)

    # -- the run ------------------------------------------------------------------------------------

    def v2_playbook_on_start(self, playbook):
        self._flush_incomplete()
        given = getattr(playbook, "_file_name", None) or ""
        self._record = {
            "version": 1,
            "pid": self._pid,
            "start": _now(),
            "end": None,
            "complete": False,
            "playbook": str(given),
            "playbook_path": _real(given),
            "cwd": os.getcwd(),
            "check": bool(_cli("check", False)),
            "diff": bool(_cli("diff", False)),
            "tags": _cli("tags", []) or [],
            "skip_tags": _cli("skip_tags", []) or [],
            "limit": _cli("subset"),
            "inventory": [_real(i) if os.path.exists(str(i)) else str(i) for i in (_cli("inventory", []) or [])],
            "launcher": {name: os.environ.get(name) for name in LAUNCHER_ENV},
            "playbooks": {},
            "stats": {},
        }
        self._play_ids = set()

    def v2_playbook_on_play_start(self, play):
        if self._record is None:
            return
        path, line = self._source_of(play)
        self._play_file = path
        self._play = play
        self._connections = {}
        entry = self._record["playbooks"].setdefault(path, {"plays": [], "hosts": {}})
        hosts = getattr(play, "hosts", None)
        if isinstance(hosts, (list, tuple)):
            hosts = ",".join(str(h) for h in hosts)
        play_id = str(getattr(play, "_uuid", ""))
        if play_id not in self._play_ids:  # a serial play starts once a batch
            self._play_ids.add(play_id)
            entry["plays"].append({"name": str(play.get_name()), "hosts": None if hosts is None else str(hosts), "line": line})

    def v2_playbook_on_stats(self, stats):
        if self._record is None:
            return
        self._record["stats"] = {host: stats.summarize(host) for host in sorted(stats.processed)}
        self._record["complete"] = True
        self._write()

    # -- task results -------------------------------------------------------------------------------

    def v2_runner_on_ok(self, result):
        self._count(result, "ran", changed=bool(self._data(result).get("changed")))

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result, "ran", failed=not ignore_errors)

    def v2_runner_on_unreachable(self, result):
        self._count(result, "ran", unreachable=True)

    def v2_runner_on_skipped(self, result):
        self._count(result, "skipped")

    # -- helpers ------------------------------------------------------------------------------------

    def _source_of(self, play):
        """(real path, line) of the playbook file the play is written in."""
        where = ""
        try:
            where = play.get_path() or ""
        except Exception:  # pylint: disable=broad-except  # a record must never break the run
            where = ""
        path, line = where, None
        head, sep, tail = where.rpartition(":")
        if sep and tail.isdigit():
            path, line = head, int(tail)
        if not path:
            path = self._record["playbook_path"]
        return _real(path), line

    @staticmethod
    def _data(result):
        data = getattr(result, "_return_data", None)
        if data is None:
            data = getattr(result, "_result", None) or {}
        return data

    def _count(self, result, kind, changed=False, failed=False, unreachable=False):
        if self._record is None or self._play_file is None:
            return
        try:
            host, connection = self._where(result)
        except Exception:  # pylint: disable=broad-except  # a record must never break the run
            host, connection = str(getattr(result, "_host", "?")), "unknown"
        entry = self._record["playbooks"][self._play_file]["hosts"].setdefault(
            host, {"ran": {}, "skipped": 0, "changed": 0, "failed": 0, "unreachable": 0})
        if kind == "skipped":
            entry["skipped"] += 1
            return
        entry["ran"][connection] = entry["ran"].get(connection, 0) + 1
        entry["changed"] += int(changed)
        entry["failed"] += int(failed)
        entry["unreachable"] += int(unreachable)

    def _where(self, result):
        """(host the task ran on, connection it used) for a task result."""
        task = getattr(result, "task", None) or getattr(result, "_task", None)
        host = getattr(result, "host", None) or getattr(result, "_host", None)
        delegated = self._data(result).get("_ansible_delegated_vars")
        if delegated:
            # the task ran on the delegated host: its name (a loop's template: its address), its connection
            name = str(getattr(task, "delegate_to", None) or "")
            if not name or "{{" in name:
                name = str(delegated.get("ansible_host") or "delegated")
            return name, self._plain(delegated.get("ansible_connection") or getattr(task, "connection", None), None)
        name = host.get_name() if host is not None else "?"
        return name, self._host_connection(host, task)

    def _host_connection(self, host, task):
        """ansible_connection of the host in this play (cached per play and host), else the task's keyword."""
        name = host.get_name()
        if name not in self._connections:
            value, variables = None, None
            manager = self._play.get_variable_manager() if self._play is not None else None
            if manager is not None:
                variables = manager.get_vars(play=self._play, host=host, include_hostvars=False)
                value = variables.get("ansible_connection")
            self._connections[name] = (value, variables)
        value, variables = self._connections[name]
        if value is None:
            value = getattr(task, "connection", None)
        return self._plain(value, variables)

    def _plain(self, value, variables):
        """A connection name as text (templated where it is a template)."""
        if value is None:
            return "unknown"
        text = str(value)
        if "{{" in text and variables is not None and self._play is not None:
            try:
                from ansible.template import Templar  # pylint: disable=import-outside-toplevel
                text = str(Templar(loader=self._play._loader, variables=variables).template(value))
            except Exception:  # pylint: disable=broad-except  # a record must never break the run
                return "unknown"
        return text

    def _flush_incomplete(self):
        if self._record is not None and not self._record["complete"] and os.getpid() == self._pid:
            self._write()

    def _write(self):
        record, self._record, self._play_file, self._play = self._record, None, None, None
        record["end"] = _now()
        try:
            os.makedirs(self._dir, exist_ok=True)
            with open(os.path.join(self._dir, "%d.jsonl" % self._pid), "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        except OSError as exc:
            self._display.warning("kvshare_run_record: cannot write %s: %s" % (self._dir, exc))
