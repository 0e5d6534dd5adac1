# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Session bookkeeping of a sandbox suite (tests/faults, tests/day2): gate, per-case records, report.

A suite runs only when its environment variable is 1 (else its test files are not collected), keeps
one record per case (filled by the test through the `record` fixture, the outcome added by the
report hook) and writes reports/<name>.json at the end. Its conftest.py takes the hooks:

    SUITE = Suite(__file__, "KVSHARE_FAULTS", "faults.json", "fault suite (tests/faults)", new_record)
    collect_ignore_glob, pytest_report_header, record, pytest_runtest_makereport = SUITE.hooks()
"""
import json
import os
import sys
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Suite:
    """conftest: the suite's conftest.py (__file__); gate: its environment variable; report: the
    file name under reports/; title: how the skipped-suite header names it; new_record(node): a
    case's fresh record; view: what the `record` fixture yields of it (default: the record)."""

    def __init__(self, conftest, gate, report, title, new_record, view=None):
        self.here = os.path.dirname(os.path.abspath(conftest))
        self.gate, self.title = gate, title
        self.enabled = os.environ.get(gate) == "1"
        self.report = os.path.join(REPO, "reports", report)
        self.new_record, self.view = new_record, view or (lambda entry: entry)
        self.results = {}
        if self.enabled:
            # The suite's own helpers (faultlib, d2lib) import as top-level modules.
            sys.path.insert(0, self.here)

    def hooks(self):
        """(collect_ignore_glob, pytest_report_header, record, pytest_runtest_makereport) for conftest.py."""
        suite = self

        def pytest_report_header(config):
            if not suite.enabled:
                return "%s: skipped, set %s=1 to run it (needs podman, root)" % (suite.title, suite.gate)
            return None

        @pytest.fixture
        def record(request):
            """Per-case record for the summary (the test fills it); outcome and wall time are added."""
            entry = suite.new_record(request.node)
            suite.results[request.node.nodeid] = entry
            start = time.monotonic()
            yield suite.view(entry)
            entry["wall_s"] = round(time.monotonic() - start, 1)

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            suite.note(item.nodeid, outcome.get_result())

        return ([] if self.enabled else ["test_*.py"]), pytest_report_header, record, pytest_runtest_makereport

    def note(self, nodeid, rep):
        """A case's result: its call, or a setup that did not pass, or a teardown that failed."""
        entry = self.results.get(nodeid)
        if entry is None:
            return
        if rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed") or (rep.when == "teardown" and rep.failed):
            if hasattr(rep, "wasxfail"):
                entry["result"] = "xpass" if rep.outcome == "passed" else "xfail"
                entry["note"] = entry.get("note") or rep.wasxfail
            else:
                entry["result"] = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}[rep.outcome]
            if rep.failed:
                entry["error"] = str(rep.longrepr)[-1500:]

    def cases(self):
        return [e for k, e in self.results.items() if not k.startswith("_")]

    def write_report(self, terminalreporter, summary, **json_args):
        """reports/<name>.json: the setup's record, the cases and the summary's figures."""
        os.makedirs(os.path.dirname(self.report), exist_ok=True)
        with open(self.report, "w") as handle:
            json.dump({"setup": self.results.get("_setup"), "cases": self.cases(), **summary}, handle, indent=2, **json_args)
        terminalreporter.write_line("report: %s" % os.path.relpath(self.report))
