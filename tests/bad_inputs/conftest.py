"""Prints "bad inputs rejected N/N" at the end of a run that includes the bad-input suite."""

_COUNTS = {"passed": 0, "total": 0}


def pytest_runtest_logreport(report):
    if "test_bad_input_rejected[" not in report.nodeid:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _COUNTS["total"] += 1
        _COUNTS["passed"] += report.outcome == "passed"


def pytest_terminal_summary(terminalreporter):
    if _COUNTS["total"]:
        terminalreporter.write_line("bad inputs rejected %d/%d" % (_COUNTS["passed"], _COUNTS["total"]))
