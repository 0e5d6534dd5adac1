# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""A role's converged state on a host: the stamp a full run records, and the comparison a re-run makes.

A full run of a role ends by recording, in one file per role, a digest of every input the run had
(one digest per variable, so a difference can be named) and a fingerprint of what the role manages
on the host: its files (content, mode, owner), whole configuration directories (so a stray new file
shows), its units (loaded, active, enabled, and the invocation: a restart is a new invocation), its
packages, users, groups and kernel modules. The next run compares; only when nothing differs may the
role skip its body. Pure functions here (unit-tested); the module only reads the host and writes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import hashlib
import json
import os
import pwd
import stat
from collections.abc import Mapping

from ansible_collections.kvshare.dynamo.plugins.module_utils.unit_watch import parse_show_blocks

STAMP_VERSION = 1
# Drift lines shown in full; the rest is counted.
MAX_DRIFT_LINES = 12
DEFAULT_STAMP_DIR = "/var/lib/kvshare/converged"
NO_STAMP = "no record of a full run of this role (the first run, or the last one did not finish)"
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState", "InvocationID", "FragmentPath",
                   "DropInPaths")
# Unit fields compared, with how a difference reads.
UNIT_FIELDS = (
    ("load", "its unit file is now %s (was %s)"),
    ("active", "it is now %s (was %s)"),
    ("enabled", "it is now %s at boot (was %s)"),
    ("invocation", "it was restarted since the last full run (invocation %s, was %s)"),
    ("fragment", "its unit file is now %s (was %s)"),
    ("dropins", "its drop-ins are now %s (was %s)"),
)


def value_digest(value):
    """A short digest of any JSON-able value (mappings in key order; anything else by its text)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _owner(st):
    return "%d:%d" % (st.st_uid, st.st_gid)


def path_fingerprint(path):
    """One line for a path: its kind, and its content digest (files), target (links), mode and owner."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return "unreadable (%s)" % exc.strerror
    mode = "%04o" % stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return "link -> %s" % os.readlink(path)
    if stat.S_ISDIR(st.st_mode):
        return "dir mode=%s owner=%s" % (mode, _owner(st))
    if stat.S_ISREG(st.st_mode):
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except OSError as exc:
            return "unreadable (%s)" % exc.strerror
        return "file sha256=%s mode=%s owner=%s" % (digest.hexdigest()[:16], mode, _owner(st))
    return "special mode=%s owner=%s" % (mode, _owner(st))


def tree_fingerprint(root):
    """{path: fingerprint} for a directory and everything under it (links not followed)."""
    found = {root: path_fingerprint(root)}
    if not found[root].startswith("dir "):
        return found
    for top, dirs, files in os.walk(root, onerror=None, followlinks=False):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            full = os.path.join(top, name)
            found[full] = path_fingerprint(full)
    return found


def parse_systemctl_show(text, units):
    """{unit: fingerprint} from `systemctl show --property=... u1 u2 ...` (blocks in argument order)."""
    return dict((unit, unit_fingerprint(props)) for unit, props in zip(units, parse_show_blocks(text, len(units))))


def unit_fingerprint(props):
    fields = (
        ("load", props.get("LoadState", "") or "unknown"),
        ("active", props.get("ActiveState", "") or "unknown"),
        ("enabled", props.get("UnitFileState", "") or "-"),
        ("invocation", props.get("InvocationID", "") or "-"),
        ("fragment", props.get("FragmentPath", "") or "-"),
        ("dropins", " ".join(sorted(props.get("DropInPaths", "").split())) or "-"),
    )
    return " ".join("%s=%s" % (key, value.replace(" ", ",")) for key, value in fields)


def parse_dpkg_query(text, packages):
    """{name: 'installed VERSION' | 'not installed'} from dpkg-query -W -f '${Package}\\t${db:Status-Abbrev}\\t${Version}\\n'."""
    seen = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            seen[parts[0]] = (parts[1].strip(), parts[2])
    result = {}
    for name in packages:
        base = package_base(name)
        status, version = seen.get(base, ("", ""))
        result[name] = ("installed %s" % version) if status.startswith("ii") else "not installed"
    return result


def package_base(name):
    """The dpkg package name of an entry that may carry a version (=1.2) or an architecture (:amd64)."""
    return name.split("=", 1)[0].split(":", 1)[0]


def user_fingerprint(name):
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return "absent"
    return "uid=%d gid=%d home=%s shell=%s" % (entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_shell)


def group_fingerprint(name):
    try:
        entry = grp.getgrnam(name)
    except KeyError:
        return "absent"
    return "gid=%d members=%s" % (entry.gr_gid, ",".join(sorted(entry.gr_mem)) or "-")


def loaded_modules(proc_modules_text):
    return set(line.split(" ", 1)[0] for line in proc_modules_text.splitlines() if line.strip())


def describe_state_difference(key, was, now):
    """One drift line for a state entry (key 'kind:name') that differs between the stamp and now."""
    kind, dummy, name = key.partition(":")
    if kind == "unit":
        old, new = _fields(was), _fields(now)
        for field, text in UNIT_FIELDS:
            if old.get(field) != new.get(field):
                return "unit %s: %s" % (name, text % (new.get(field, "?"), old.get(field, "?")))
        return "unit %s: %s (was %s)" % (name, now, was)
    if kind == "path":
        if now == "absent":
            return "%s: missing" % name
        if was is None:
            return "%s: new (%s)" % (name, now.split(" ", 1)[0])
        old, new = _fields(was), _fields(now)
        if was.split(" ", 1)[0] != now.split(" ", 1)[0]:
            return "%s: now %s (was %s)" % (name, now, was)
        for field, label in (("sha256", "content changed"), ("mode", "mode"), ("owner", "owner")):
            if old.get(field) != new.get(field):
                if field == "sha256":
                    return "%s: %s" % (name, label)
                return "%s: %s %s (was %s)" % (name, label, new.get(field), old.get(field))
        return "%s: now %s (was %s)" % (name, now, was)
    if now is None:
        return "%s %s: no longer checked" % (kind, name)
    return "%s %s: now %s (was %s)" % (kind, name, now, was)


def _fields(text):
    out = {}
    for part in (text or "").split(" "):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out


def input_lines(old_inputs, inputs):
    """Drift lines between the inputs a stamp recorded and this run's."""
    lines = []
    for name in sorted(set(old_inputs) | set(inputs)):
        if name not in inputs:
            lines.append("input %s: no longer set" % name)
        elif name not in old_inputs:
            lines.append("input %s: newly set" % name)
        elif old_inputs[name] != inputs[name]:
            lines.append("input %s: changed" % name)
    return lines


def state_lines(stamp, state):
    """Drift lines between the host state a stamp recorded and the host's now."""
    old_state = stamp.get("state") or {}
    return [describe_state_difference(key, old_state.get(key), state.get(key))
            for key in sorted(set(old_state) | set(state)) if old_state.get(key) != state.get(key)]


def compare(stamp, inputs, state):
    """Drift lines between a stamp and this run's inputs and host state ([] when converged).

    state holds the same keys as stamp['state'] (plus any new path found under a recorded tree).
    """
    return input_lines(stamp.get("inputs") or {}, inputs) + state_lines(stamp, state)


# What may differ in a unit for its role to only start it again: it stopped, failed or was
# restarted; its unit file, drop-ins and enablement are what the role's body writes.
UNIT_RUN_FIELDS = frozenset(["active", "invocation"])


def state_start_only(stamp, state):
    """True when the host differs from the stamp, and only in units that no longer run the recorded
    invocation (stopped, failed, restarted) with their files and enablement unchanged."""
    old_state = stamp.get("state") or {}
    differ = [key for key in set(old_state) | set(state) if old_state.get(key) != state.get(key)]
    if not differ:
        return False
    for key in differ:
        if key.partition(":")[0] != "unit" or key not in old_state or key not in state:
            return False
        old, new = _fields(old_state[key]), _fields(state[key])
        if any(old.get(field) != new.get(field) for field in set(old) | set(new) if field not in UNIT_RUN_FIELDS):
            return False
    return True


def start_only(stamp, inputs, state):
    """True when the inputs are the same and every difference is a unit that no longer runs the
    recorded invocation (stopped, failed, restarted) with its files and enablement unchanged: the
    role's configuration would change nothing, only its start and readiness steps have work."""
    return (stamp.get("inputs") or {}) == inputs and state_start_only(stamp, state)


def reading(stamp, state):
    """What a check needs of the host, read before the run's inputs are known (the converged
    module's state=read): the stamp's inputs, and how the host differs from the stamp."""
    return {"inputs": dict(stamp.get("inputs") or {}), "state_lines": state_lines(stamp, state),
            "state_start_only": state_start_only(stamp, state)}


def reading_of(prefetch, name, stamp_dir):
    """The reading of role ``name`` in a registered result of the module's state=read (``prefetch``),
    or None where there is none to use: no read in this run, one forgotten since ({}), or one of
    another stamp directory. A role without a stamp there reads as missing (NO_STAMP)."""
    if not isinstance(prefetch, Mapping) or prefetch.get("stamp_dir") != stamp_dir:
        return None
    readings = prefetch.get("readings")
    if not isinstance(readings, Mapping):
        return None
    found = readings.get(name)
    return found if isinstance(found, Mapping) else {"why": NO_STAMP}


def compare_reading(found, inputs):
    """(converged, start_only, drift lines) of a check from a reading of the host (reading(), or
    {"why": ...} where the stamp is missing or unusable) and this run's inputs: what compare() and
    start_only() give for the stamp and the state it was read with."""
    if found.get("why"):
        return False, False, [found["why"]]
    lines = input_lines(found["inputs"], inputs) + list(found["state_lines"])
    return not lines, found["inputs"] == inputs and found["state_start_only"], lines


def summarize(lines):
    if len(lines) <= MAX_DRIFT_LINES:
        return list(lines)
    return list(lines[:MAX_DRIFT_LINES]) + ["... and %d more" % (len(lines) - MAX_DRIFT_LINES)]


def validate_stamp(stamp, name):
    """Why a stamp read from disk cannot be used ('' when it can)."""
    if not isinstance(stamp, dict):
        return "the record is not a mapping"
    if stamp.get("version") != STAMP_VERSION:
        return "the record has format %r, this collection writes %d" % (stamp.get("version"), STAMP_VERSION)
    if stamp.get("name") != name:
        return "the record names %r, not %r" % (stamp.get("name"), name)
    if not isinstance(stamp.get("inputs"), dict) or not isinstance(stamp.get("state"), dict):
        return "the record lacks its inputs or state"
    return ""


def stamp_document(name, inputs, state, recorded_at):
    return {"version": STAMP_VERSION, "name": name, "recorded_at": recorded_at,
            "inputs": dict(sorted(inputs.items())), "state": dict(sorted(state.items()))}


def tracked(state):
    """The paths, trees, units, packages, users, groups and modules a recorded state covers."""
    out = {"paths": [], "trees": [], "units": [], "packages": [], "users": [], "groups": [], "kernel_modules": []}
    kinds = {"path": "paths", "tree": "trees", "unit": "units", "package": "packages", "user": "users",
             "group": "groups", "module": "kernel_modules"}
    for key in state:
        kind, dummy, name = key.partition(":")
        if kind in kinds:
            out[kinds[kind]].append(name)
    return out
