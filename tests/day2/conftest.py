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

ENABLED = os.environ.get("KVSHARE_DAY2") == "1"
HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "..", "..", "reports", "day2.json")
RESULTS = {}

if not ENABLED:
    collect_ignore_glob = ["test_*.py"]
else:
    sys.path.insert(0, HERE)


def pytest_report_header(config):
    if not ENABLED:
        return "day-2 suite (tests/day2): skipped, set KVSHARE_DAY2=1 to run it (needs podman, root)"
    return None


@pytest.fixture(scope="session")
def stack():
    """The copy's hosts created and rolled out (ai-dynamo 1.6.1, mockers only)."""
    import d2lib as D
    import sandbox_copy
    t0 = time.monotonic()
    sandbox_copy.build_wheelhouse()
    D.make_copy()
    if os.environ.get("KVSHARE_DAY2_REUSE") != "1":
        res, dummy = D.playbook("sandbox/create.yml")
        D.must(res, "sandbox/create.yml")
        res, dummy = D.playbook("site.yml")
        D.must(res, "site.yml")
    inv = D.Inv()
    D.wait_all_serving(inv, timeout=180)
    RESULTS["_setup"] = {"seconds": round(time.monotonic() - t0, 1)}
    yield inv
    if os.environ.get("KVSHARE_DAY2_DESTROY") == "1":
        D.playbook("sandbox/destroy.yml")


@pytest.fixture
def record(request):
    """Per-test figures for the summary (the test fills it)."""
    entry = {"test": request.node.name, "figures": {}}
    RESULTS[request.node.nodeid] = entry
    start = time.monotonic()
    yield entry["figures"]
    entry["wall_s"] = round(time.monotonic() - start, 1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    entry = RESULTS.get(item.nodeid)
    if entry is not None and (rep.when == "call" or rep.failed):
        entry["result"] = {"passed": "pass", "failed": "FAIL", "skipped": "skip"}[rep.outcome]


def pytest_terminal_summary(terminalreporter):
    cases = [e for k, e in RESULTS.items() if not k.startswith("_")]
    if not cases:
        return
    w = terminalreporter.write_line
    w("")
    for e in cases:
        w("%-40s %-5s %6ss  %s" % (e["test"][:40], e.get("result", "?"), e.get("wall_s", "-"),
                                   json.dumps(e["figures"], sort_keys=True)))
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as handle:
        json.dump({"setup": RESULTS.get("_setup"), "cases": cases}, handle, indent=2, sort_keys=True)
    w("report: %s" % os.path.relpath(REPORT))
