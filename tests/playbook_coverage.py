# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The table `playbook -> test that runs it` for every file in playbooks/, printed in CI.

A playbook counts as run by a test file when that file names it (e.g. "guard_recovery.yml" or
playbooks/<name>) and the test belongs to a suite below; a playbook imported by another
(site.yml imports validate, etcd, kvcr) also runs wherever its importer runs. Suites outside CI
(too slow for its 45 minutes) are listed with the command that runs them.
"""
import os
import re
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# (path prefix, suite, where it runs, on what)
SUITES = [
    ("molecule/default/", "molecule", "CI (./dev.sh test)", "sandbox hosts, real components"),
    ("tests/unit/", "unit", "CI (./dev.sh test)", "offline: render, validation"),
    ("tests/validation/", "validation", "CI (./dev.sh test)", "offline validation"),
    ("tests/bad_inputs/", "bad inputs", "CI (./dev.sh test)", "validate before any change"),
    ("tests/faults/", "faults", "./dev.sh faults", "sandbox hosts, real components"),
    ("tests/day2/", "day-2", "./dev.sh day2", "sandbox hosts, mockers"),
    ("tests/integration/kvcr/", "kvcr integration", "KVSHARE_INTEGRATION=1 pytest tests/integration/kvcr",
     "KVCR sandbox hosts, real kvcr service/agent"),
    ("tests/integration/maru_pool/", "maru_pool integration", "KVSHARE_INTEGRATION=1 pytest tests/integration/maru_pool",
     "sandbox host, real Maru"),
    ("bench/", "bench", "./dev.sh bench", "sandbox hosts"),
]
SCAN_EXT = (".py", ".yml", ".yaml", ".sh")
# Where a run of the importer does not run the playbook's tasks everywhere.
NOTES = {
    "kvcr": "its plays target the kvcr/rdma groups: tasks run only on the KVCR topology (kvcr integration)",
}


def playbooks():
    pdir = os.path.join(REPO, "playbooks")
    return sorted(f[:-4] for f in os.listdir(pdir) if f.endswith(".yml"))


def imports():
    """{playbook: [playbooks importing it]} from import_playbook lines in playbooks/."""
    out = {}
    for name in playbooks():
        with open(os.path.join(REPO, "playbooks", name + ".yml"), encoding="utf-8") as handle:
            for m in re.finditer(r"import_playbook:\s*(\S+)\.yml", handle.read()):
                out.setdefault(os.path.basename(m.group(1)), []).append(name)
    return out


def references():
    """{playbook: {(suite, where, what, file)}} from the test files that name it."""
    names = playbooks()
    pattern = re.compile(r"(?<![\w.-])(%s)\.yml" % "|".join(re.escape(n) for n in names))
    refs = {n: set() for n in names}
    for prefix, suite, where, what in SUITES:
        root = os.path.join(REPO, prefix)
        for dirpath, _dirs, files in os.walk(root):
            for fname in files:
                if not fname.endswith(SCAN_EXT):
                    continue
                path = os.path.join(dirpath, fname)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
                for m in set(pattern.findall(text)):
                    refs[m].add((suite, where, what, os.path.relpath(path, REPO)))
    return refs


def table():
    refs = references()
    imported_by = imports()
    rows = []
    for name in playbooks():
        direct = sorted(refs[name])
        via = [] if direct else sorted({r for parent in imported_by.get(name, []) for r in refs.get(parent, ())})
        rows.append((name, direct, list(imported_by.get(name, [])) if via else [], via))
    return rows


def render(rows):
    lines = ["playbook -> tests that run it (suite: where it runs)"]
    for name, direct, parents, via in rows:
        found = direct or via
        suites = {}
        for suite, where, what, path in found:
            suites.setdefault((suite, where, what), []).append(path)
        if not found:
            lines.append("  %-20s NO TEST" % (name + ".yml"))
            continue
        first = True
        for (suite, where, what), paths in sorted(suites.items(), key=lambda kv: (not kv[0][1].startswith("CI"), kv[0][0])):
            label = (name + ".yml") if first else ""
            lines.append("  %-23s %-22s %-52s %s: %s" % (label, suite, where, what, ", ".join(sorted(paths)[:3])))
            first = False
        if parents:
            lines.append("  %-23s (no test names it: it runs as part of %s)" % ("", ", ".join(p + ".yml" for p in parents)))
        if name in NOTES:
            lines.append("  %-23s (%s)" % ("", NOTES[name]))
    in_ci = sum(1 for _n, d, _p, v in rows if any(w.startswith("CI") for _s, w, _x, _f in d + v))
    lines.append("playbooks: %d; with a test: %d; run in CI: %d"
                 % (len(rows), sum(1 for r in rows if r[1] or r[3]), in_ci))
    return "\n".join(lines)


def main():
    rows = table()
    print(render(rows))
    return 0 if all(r[1] or r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
