"""Unit tests for plugins/module_utils/units.py (a systemd unit watched while it starts)."""
from ansible_collections.kvshare.dynamo.plugins.module_utils import units


def state(active="activating", sub="start", restarts=0, code=0, status=0, result="success"):
    return units.parse_show("LoadState=loaded\nActiveState=%s\nSubState=%s\nResult=%s\nNRestarts=%d\nMainPID=12\n"
                            "ExecMainCode=%d\nExecMainStatus=%d\n" % (active, sub, result, restarts, code, status))


def test_parse_show_and_unknown_units():
    assert state("active", "running", 3, 1, 0) == {
        "load_state": "loaded", "active_state": "active", "sub_state": "running", "result": "success",
        "n_restarts": 3, "main_pid": 12, "exit_code": 1, "exit_status": 0}
    assert units.parse_show("LoadState=not-found\nActiveState=inactive\n") is None
    assert units.parse_show("") is None
    assert units.parse_show("LoadState=loaded\nNRestarts=[not set]\n")["n_restarts"] == 0


def test_exit_text():
    assert units.exit_text(state(code=1, status=3, result="exit-code")) == "status 3 (exit-code)"
    assert units.exit_text(state(code=2, status=9, result="signal")) == "signal SIGKILL (signal)"
    assert units.exit_text(state(code=3, status=6, result="core-dump")) == "signal SIGABRT, core dumped (core-dump)"
    assert units.exit_text(state()) == "none yet"


def test_crash_watch_counts_restarts_and_a_pending_one():
    watch = units.CrashWatch()
    assert watch.update(state(restarts=4)) == 0                        # restarts before the watch do not count
    assert watch.update(state(sub="auto-restart", restarts=4)) == 1    # down, restart pending
    assert watch.update(state("active", "running", 5)) == 1           # the same crash, restarted
    assert watch.update(state("failed", "failed", 5)) == 2            # down for good


def test_crash_watch_keeps_count_over_a_manual_restart():
    watch = units.CrashWatch()
    watch.update(state(restarts=0))
    watch.update(state("active", "running", 1))
    assert watch.update(state("activating", "start", 0)) == 1         # NRestarts reset by a manual restart
    assert watch.update(state("activating", "auto-restart", 0)) == 2


def test_argv():
    argv = units.show_argv("/bin/systemctl", "dynamo-worker@w0.service")
    assert argv[:3] == ["/bin/systemctl", "show", "--no-pager"] and argv[-2:] == ["--", "dynamo-worker@w0.service"]
    assert "--property=NRestarts" in argv and "--property=ExecMainStatus" in argv
    assert units.journal_argv("/bin/journalctl", "u", 40) == ["/bin/journalctl", "--no-pager", "--output=cat", "-n", "40",
                                                             "-u", "u"]
