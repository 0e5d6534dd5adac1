# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The table `playbook -> runs against hosts in this CI run`, from what the runs recorded, not from names.

Every ansible-playbook run of the CI run records itself (tests/callback_plugins/kvshare_run_record.py,
on the callback plugin path with KVSHARE_RUN_RECORD=<dir>): which playbook files' plays ran, on which
hosts, over which connection, whether with --check, the final stats and which test launched it
(PYTEST_CURRENT_TEST, molecule's MOLECULE_SCENARIO_NAME, KVSHARE_RUN_SUITE).

    python tests/playbook_coverage.py [RECORD_DIR] [--allow-missing] [--all-launchers]

RECORD_DIR defaults to $KVSHARE_RUN_RECORD. A shipped playbook (playbooks/*.yml; the root site.yml and
verify.yml import playbooks/site.yml and playbooks/verify.yml, whose plays are the ones that run) counts
as run against hosts when at least one task of its own plays ran (ok, changed, failed or unreachable;
not skipped) on a host over a connection other than local: an offline validation (every host on the
controller, connection local) does not count. A controller-only playbook (every play `hosts:
localhost`, e.g. prometheus_targets.yml) has no other target: a task run on localhost counts for it.
Exit status 1 when a shipped playbook has no run against hosts (0 with --allow-missing).
"""
import argparse
import glob
import json
import os
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PLAYBOOKS = os.path.join(REPO, "playbooks")
LOCAL_CONNECTIONS = ("local", "ansible.builtin.local")
CONTROLLER = ("localhost", "127.0.0.1", "::1")
# In an installed copy of the collection (ansible-galaxy collection install), a shipped playbook lives here.
INSTALLED = os.sep + os.path.join("ansible_collections", "kvshare", "dynamo", "playbooks") + os.sep
SHOWN_LAUNCHERS = 4


def playbooks(pdir=PLAYBOOKS):
    """The shipped playbooks: names of playbooks/*.yml without .yml."""
    return sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(pdir, "*.yml")))


def controller_only(name, pdir=PLAYBOOKS):
    """True when every play of the playbook targets localhost alone (its hosts are the controller)."""
    try:
        with open(os.path.join(pdir, name + ".yml"), encoding="utf-8") as handle:
            plays = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(plays, list) or not plays:
        return False
    return all(isinstance(p, dict) and "hosts" in p and str(p["hosts"]).strip() in CONTROLLER for p in plays)


def load_records(rdir):
    """Every record (one JSON object a line) of the *.jsonl files in rdir, oldest first; [] when there are none."""
    records = []
    for path in sorted(glob.glob(os.path.join(rdir, "*.jsonl"))) if rdir else []:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except ValueError:
                    sys.stderr.write("playbook_coverage: %s:%d is not JSON, ignored\n" % (path, number))
    return sorted(records, key=lambda r: r.get("start") or "")


def shipped_name(path, pdir=PLAYBOOKS):
    """The shipped playbook a recorded file path is, or None (molecule's converge.yml, a test's own playbook)."""
    real = os.path.realpath(path)
    if os.path.dirname(real) == os.path.realpath(pdir) and real.endswith(".yml"):
        return os.path.basename(real)[:-4]
    if path.endswith(".yml") and os.path.dirname(path).endswith(INSTALLED.rstrip(os.sep)):
        return os.path.basename(path)[:-4]
    return None


def launcher(record):
    """Which test or suite started the run, as one label."""
    env = record.get("launcher") or {}
    parts = []
    if env.get("KVSHARE_RUN_SUITE"):
        parts.append(env["KVSHARE_RUN_SUITE"])
    test = env.get("PYTEST_CURRENT_TEST") or ""
    scenario = env.get("MOLECULE_SCENARIO_NAME")
    if scenario:
        if test:
            action = "verify"
        elif record.get("check"):
            action = "check"
        elif "molecule-idempotence-notest" in (record.get("skip_tags") or []):
            action = "idempotence"
        else:
            action = os.path.basename(record.get("playbook") or "?").rsplit(".", 1)[0]
        parts.append("molecule %s %s" % (scenario, action))
    if test:
        parts.append(test[:-len(" (call)")] if test.endswith(" (call)") else test)
    if not parts:
        parts.append("ansible-playbook %s (no test)" % os.path.relpath(record.get("playbook_path") or "?", REPO))
    return ": ".join(parts)


def ran_against_hosts(entry, on_controller=False):
    """True when a task of this playbook file ran on a host over a non-local connection
    (on_controller: on localhost, over any connection)."""
    for host, counts in (entry.get("hosts") or {}).items():
        ran = counts.get("ran") or {}
        if on_controller and host in CONTROLLER and sum(ran.values()):
            return True
        if any(n and connection not in LOCAL_CONNECTIONS for connection, n in ran.items()):
            return True
    return False


def failed(record, entry):
    """True when a task of this playbook file failed (or its host was unreachable) on a host that the run
    ended with as failed or unreachable (a failure that a rescue section handled leaves the run's stats clean)."""
    stats = record.get("stats") or {}
    for host, counts in (entry.get("hosts") or {}).items():
        if not (counts.get("failed") or counts.get("unreachable")):
            continue
        if not record.get("complete") or host not in stats:
            return True
        if stats[host].get("failures") or stats[host].get("unreachable"):
            return True
    return False


def table(records, pdir=PLAYBOOKS):
    """One row a shipped playbook: {name, controller_only, runs, local_only, check, failed, launchers, via}."""
    rows = {name: {"name": name, "controller_only": controller_only(name, pdir), "runs": 0, "local_only": 0,
                   "check": 0, "failed": 0, "launchers": {}, "local_launchers": {}, "via": set()}
            for name in playbooks(pdir)}
    for record in records:
        for path, entry in (record.get("playbooks") or {}).items():
            name = shipped_name(path, pdir)
            if name not in rows:
                continue
            row = rows[name]
            label = launcher(record)
            if not ran_against_hosts(entry, row["controller_only"]):
                if any(sum((c.get("ran") or {}).values()) for c in (entry.get("hosts") or {}).values()):
                    row["local_only"] += 1
                    row["local_launchers"][label] = row["local_launchers"].get(label, 0) + 1
                continue
            row["runs"] += 1
            row["check"] += bool(record.get("check"))
            row["failed"] += failed(record, entry)
            row["launchers"][label] = row["launchers"].get(label, 0) + 1
            top = record.get("playbook_path") or ""
            if os.path.realpath(top) != os.path.realpath(path):
                row["via"].add(os.path.relpath(top, REPO) if top.startswith(REPO + os.sep) else top)
    return [rows[name] for name in sorted(rows)]


def _launchers(counts, every):
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = items if every else items[:SHOWN_LAUNCHERS]
    text = "; ".join("%s (%d)" % (label, n) if n > 1 else label for label, n in shown)
    if len(items) > len(shown):
        text += "; +%d more" % (len(items) - len(shown))
    return text


def render(rows, records, rdir, every=False, pending=()):
    covered = sum(1 for r in rows if r["runs"])
    lines = ["playbook -> runs against hosts in this CI run (%d ansible-playbook runs recorded in %s)" % (len(records), rdir),
             "  %-23s %5s %7s %6s  %s" % ("playbook", "runs", "--check", "failed", "launched by (runs)")]
    for row in rows:
        name = row["name"] + ".yml"
        if row["runs"]:
            lines.append("  %-23s %5d %7d %6d  %s" % (name, row["runs"], row["check"], row["failed"], _launchers(row["launchers"], every)))
            if row["via"]:
                lines.append("  %-23s %21s  via %s" % ("", "", ", ".join(sorted(row["via"]))))
        else:
            why = "NOT RUN against hosts" + (" (pending: %s)" % pending[row["name"]] if row["name"] in pending else "")
            if row["local_only"]:
                why += "; %d run(s) with connection local only: %s" % (row["local_only"], _launchers(row["local_launchers"], every))
            lines.append("  %-23s %5d %7s %6s  %s" % (name, 0, "-", "-", why))
        if row["controller_only"]:
            lines.append("  %-23s %21s  (controller-only playbook: its tasks on localhost count)" % ("", ""))
    lines.append("playbooks run against hosts in this CI run: %d/%d" % (covered, len(rows)))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("record_dir", nargs="?", default=os.environ.get("KVSHARE_RUN_RECORD"),
                        help="directory of the run records (default: $KVSHARE_RUN_RECORD)")
    parser.add_argument("--allow-missing", action="store_true", help="exit 0 even when a playbook has no run against hosts")
    parser.add_argument("--all-launchers", action="store_true", help="list every launcher, not the first %d" % SHOWN_LAUNCHERS)
    parser.add_argument("--pending", action="append", default=[], metavar="NAME=WHY",
                        help="a playbook known not to run in CI yet, with the reason: its absence is printed, not failed; "
                             "once it runs, naming it fails (the list only shrinks)")
    args = parser.parse_args(argv)
    pending = dict(item.split("=", 1) if "=" in item else (item, "") for item in args.pending)
    if not args.record_dir or not os.path.isdir(args.record_dir):
        print("playbook_coverage: no run records (%s): set KVSHARE_RUN_RECORD and ANSIBLE_CALLBACK_PLUGINS=%s for the runs"
              % (args.record_dir or "KVSHARE_RUN_RECORD unset", os.path.join(REPO, "tests", "callback_plugins")))
    records = load_records(args.record_dir)
    rows = table(records)
    print(render(rows, records, args.record_dir, every=args.all_launchers, pending=pending))
    missing = [r["name"] for r in rows if not r["runs"] and r["name"] not in pending]
    stale = sorted(set(pending) & set(r["name"] for r in rows if r["runs"]))
    unknown = sorted(set(pending) - set(r["name"] for r in rows))
    if stale or unknown:
        print("playbook_coverage: --pending names %s: %s" % ("playbooks that ran" if stale else "no shipped playbook", ", ".join(stale or unknown)))
        return 1
    return 0 if args.allow_missing or not missing else 1


if __name__ == "__main__":
    sys.exit(main())
