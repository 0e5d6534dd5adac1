# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Day-2 suite session: its sandbox copy up and rolled out; results table and reports/day2.json.

Needs podman and root: skipped unless KVSHARE_DAY2=1 (`./dev.sh day2` sets it).
  KVSHARE_DAY2_REUSE=1    reuse the copy's running hosts (no create.yml/site.yml at start)
  KVSHARE_DAY2_DESTROY=1  remove the copy's hosts at the end
"""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lib.suite import Suite  # noqa: E402

SUITE = Suite(__file__, "KVSHARE_DAY2", "day2.json", "day-2 suite (tests/day2)",
              lambda node: {"test": node.name, "figures": {}}, view=lambda entry: entry["figures"])
collect_ignore_glob, pytest_report_header, record, pytest_runtest_makereport = SUITE.hooks()


@pytest.fixture(scope="session")
def stack():
    """The copy's hosts created and rolled out (ai-dynamo 1.6.1, mockers only): a Sandbox of the copy."""
    import d2lib as D
    t0 = time.monotonic()
    D.build_wheelhouse()
    D.make_copy()
    if os.environ.get("KVSHARE_DAY2_REUSE") != "1":
        # The copy's hosts from an interrupted earlier run are in an unknown state: start from none.
        res, dummy = D.playbook("sandbox/destroy.yml")
        D.must(res, "sandbox/destroy.yml")
        res, dummy = D.playbook("sandbox/create.yml")
        D.must(res, "sandbox/create.yml")
        res, dummy = D.playbook("site.yml")
        D.must(res, "site.yml")
    inv = D.Inv()
    inv.wait_all_serving(timeout=180)
    SUITE.results["_setup"] = {"seconds": round(time.monotonic() - t0, 1)}
    yield inv
    if os.environ.get("KVSHARE_DAY2_DESTROY") == "1":
        D.playbook("sandbox/destroy.yml")


def pytest_terminal_summary(terminalreporter):
    cases = SUITE.cases()
    if not cases:
        return
    w = terminalreporter.write_line
    w("")
    for e in cases:
        w("%-40s %-5s %6ss  %s" % (e["test"][:40], e.get("result", "?"), e.get("wall_s", "-"),
                                   json.dumps(e["figures"], sort_keys=True)))
    SUITE.write_report(terminalreporter, {}, sort_keys=True)
