# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Fault suite session: the sandbox copy up and rolled out, results table and reports/faults.json.

Needs podman and root: skipped unless KVSHARE_FAULTS=1 (`./dev.sh faults` sets it).
  KVSHARE_FAULTS_INVENTORY  run on these rolled-out hosts instead of a copy (CI: the cases not marked
                            kv, on the day-2 copy after its suite; the kv ones, ./dev.sh faults_kv,
                            on inventories/sandbox after molecule's verify); logs go to KVSHARE_FAULTS_DIR
  KVSHARE_FAULTS_REUSE=1    reuse the copy's running hosts (no create.yml/site.yml at start)
  KVSHARE_FAULTS_DESTROY=1  remove the copy's hosts at the end
"""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lib.suite import Suite  # noqa: E402


def _new_record(node):
    """The test sets recovery_s (and note); outcome is added by the report hook."""
    return {"case": node.name, "doc": (node.function.__doc__ or "").strip().split("\n")[0],
            "recovery_s": None, "note": ""}


SUITE = Suite(__file__, "KVSHARE_FAULTS", "faults.json", "fault suite (tests/faults)", _new_record)
collect_ignore_glob, pytest_report_header, record, pytest_runtest_makereport = SUITE.hooks()


@pytest.fixture(scope="session")
def stack():
    """The copy's hosts created and rolled out; yields the "nothing lost" baseline."""
    import faultlib as F
    t0 = time.monotonic()
    # On given, rolled-out hosts (KVSHARE_FAULTS_INVENTORY, CI: molecule's or the day-2 copy's) or a
    # reused copy: no setup.
    if not F.TARGET and os.environ.get("KVSHARE_FAULTS_REUSE") != "1":
        res, dummy = F.playbook("sandbox/create.yml")
        assert res.returncode == 0, "sandbox/create.yml failed:\n" + res.stdout[-4000:]
        res, dummy = F.playbook("site.yml")
        assert res.returncode == 0, "site.yml failed:\n" + res.stdout[-4000:]
    F.wait_all_serving(timeout=300)
    SUITE.results["_setup"] = {"seconds": round(time.monotonic() - t0, 1)}
    yield F.baseline()
    if os.environ.get("KVSHARE_FAULTS_DESTROY") == "1" and not F.TARGET:
        F.playbook("sandbox/destroy.yml")


def pytest_configure(config):
    config.addinivalue_line("markers", "kv: about the KV pool and its vLLM engines (CI: on the molecule hosts)")


def pytest_terminal_summary(terminalreporter):
    cases = SUITE.cases()
    if not cases:
        return
    fmt = "%-44s %-6s %12s %8s  %s"
    w = terminalreporter.write_line
    w("")
    w(fmt % ("case", "result", "recovery (s)", "wall (s)", "note"))
    for e in cases:
        rec = "-" if e.get("recovery_s") is None else "%.1f" % e["recovery_s"]
        w(fmt % (e["case"][:44], e.get("result", "?"), rec, e.get("wall_s", "-"), e.get("note", "")[:90]))
    faults = [e for e in cases if e["case"].startswith("test_fault")]
    survived = sum(e.get("result") in ("pass", "xpass") for e in faults)
    w("faults survived %d/%d" % (survived, len(faults)))
    kept = sum(bool(e.get("nothing_lost")) for e in faults)
    w("nothing lost %d/%d (etcd key, pool files, Maru RM secret, every worker serving, verify.yml passing after each case)"
      % (kept, len(faults)))
    SUITE.write_report(terminalreporter, {"faults_survived": survived, "faults_total": len(faults), "nothing_lost": kept})
