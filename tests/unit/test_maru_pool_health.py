# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/maru_pool/files/maru-pool-health (the pool services' liveness round, run by
maru-pool-health.timer): its decisions, a probe that never returns (a frozen process whose port
still accepts), and one round with systemctl and the probes as fakes. The probes themselves speak
to the real resource manager and maru-server on the sandbox hosts (molecule's steady check reads
their verdicts; fault case 12 freezes maru-server and watches the probe restart it)."""
import argparse
import json
import os
import threading
import time

import pytest

from lib.unit import load_script

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MPH = load_script(os.path.join(REPO, "roles", "maru_pool", "files", "maru-pool-health"), "maru_pool_health")
RM, SERVER = MPH.RM_UNIT, MPH.SERVER_UNIT
NOW_US = 1000 * 10**6  # 1000 s of monotonic time


def active(invocation, since_s):
    """systemctl show properties of a unit active for since_s seconds."""
    return {"Id": "x", "ActiveState": "active", "InvocationID": invocation,
            "ActiveEnterTimestampMonotonic": str(NOW_US - since_s * 10**6)}


def test_answering_units_are_marked_live_and_nothing_restarts():
    units = {RM: active("r1", 5), SERVER: active("s1", 5)}
    state, restart, lines = MPH.plan(units, {}, {RM: (True, "1 pool(s)"), SERVER: (True, "")}, 3, 60, NOW_US)
    assert restart == [] and lines == []
    assert state == {RM: {"invocation": "r1", "live": True, "failures": 0},
                     SERVER: {"invocation": "s1", "live": True, "failures": 0}}


def test_a_starting_unit_is_not_counted_until_its_grace_ends():
    units = {RM: active("r1", 10), SERVER: active("s1", 10)}
    results = {RM: (False, "no answer in 4 s"), SERVER: (True, "")}
    state, restart, lines = MPH.plan(units, {}, results, 3, 60, NOW_US)
    assert restart == [] and state[RM]["failures"] == 0 and not state[RM]["live"]
    assert "starting (10 s active" in lines[0]
    # After the grace the same silence counts.
    units[RM] = active("r1", 61)
    state, restart, lines = MPH.plan(units, state, results, 3, 60, NOW_US)
    assert state[RM]["failures"] == 1 and restart == [], lines


def test_three_failures_in_a_row_of_a_live_unit_restart_it():
    units = {RM: active("r1", 5), SERVER: active("s1", 5)}
    state, _restart, _lines = MPH.plan(units, {}, {RM: (True, ""), SERVER: (True, "")}, 3, 60, NOW_US)
    frozen = {RM: (True, ""), SERVER: (False, "no answer in 4 s")}
    for count in (1, 2):
        state, restart, lines = MPH.plan(units, state, frozen, 3, 60, NOW_US)
        assert restart == [] and state[SERVER]["failures"] == count, lines
    state, restart, lines = MPH.plan(units, state, frozen, 3, 60, NOW_US)
    assert restart == [SERVER], lines
    assert "maru-server.service restarted: 3 failed probes in a row, last: no answer in 4 s" in lines
    assert SERVER not in state  # the next invocation starts from zero


def test_an_answer_resets_the_count():
    units = {RM: active("r1", 100), SERVER: active("s1", 100)}
    state = {SERVER: {"invocation": "s1", "live": True, "failures": 2}}
    state, restart, dummy = MPH.plan(units, state, {RM: (True, ""), SERVER: (True, "")}, 3, 60, NOW_US)
    assert restart == [] and state[SERVER]["failures"] == 0


def test_a_new_invocation_starts_from_zero():
    units = {RM: active("r1", 100), SERVER: active("s2", 5)}
    state = {SERVER: {"invocation": "s1", "live": True, "failures": 2}}
    state, restart, lines = MPH.plan(units, state, {RM: (True, ""), SERVER: (False, "refused")}, 3, 60, NOW_US)
    assert restart == [] and state[SERVER] == {"invocation": "s2", "live": False, "failures": 0}, lines


def test_both_failing_restart_the_resource_manager_only():
    units = {RM: active("r1", 100), SERVER: active("s1", 100)}
    state = {RM: {"invocation": "r1", "live": True, "failures": 2}, SERVER: {"invocation": "s1", "live": True, "failures": 2}}
    dummy, restart, lines = MPH.plan(units, state, {RM: (False, "x"), SERVER: (False, "y")}, 3, 60, NOW_US)
    assert restart == [RM], lines  # its restart restarts maru-server (Requires=)


def test_inactive_units_are_not_probed_and_lose_their_count():
    units = {RM: dict(active("r1", 100), ActiveState="failed"), SERVER: dict(active("s1", 100), ActiveState="inactive")}
    state = {SERVER: {"invocation": "s1", "live": True, "failures": 2}}
    state, restart, lines = MPH.plan(units, state, {}, 3, 60, NOW_US)
    assert (state, restart, lines) == ({}, [], [])


def test_a_probe_that_never_returns_fails_within_the_timeout():
    block = threading.Event()
    t0 = time.monotonic()
    out = MPH.probe_all({RM: lambda: (True, ""), SERVER: lambda: block.wait(30) and (True, "")}, 0.5)
    took = time.monotonic() - t0
    block.set()
    assert out[RM] == (True, "") and out[SERVER] == (False, "no answer in 0.5 s"), out
    assert took < 5, took


def test_a_probe_that_raises_is_a_failure_naming_the_error_on_one_line():
    def boom():
        raise ConnectionError("Resource manager is not running (address: 127.0.0.1:1).\nStart it first: ...")
    assert MPH.probe_all({RM: boom}, 1) == {
        RM: (False, "ConnectionError: Resource manager is not running (address: 127.0.0.1:1). Start it first: ...")}


def test_parse_units_reads_systemctl_show_blocks():
    text = ("Id=maru-resource-manager.service\nActiveState=active\nInvocationID=r1\n\n"
            "Id=maru-server.service\nActiveState=inactive\nInvocationID=\n")
    units = MPH.parse_units(text)
    assert units[RM]["InvocationID"] == "r1" and units[SERVER]["ActiveState"] == "inactive"


def test_one_round_probes_active_units_keeps_state_and_restarts(tmp_path):
    args = argparse.Namespace(rm_address="127.0.0.1:9", server_url="tcp://127.0.0.1:9", state=str(tmp_path / "s" / "state.json"),
                              failures=2, timeout=0.5, start_grace=0)
    units = {RM: active("r1", 100), SERVER: active("s1", 100)}
    restarted, probed = [], []

    def probes():
        return {RM: lambda: probed.append(RM) or (True, ""), SERVER: lambda: probed.append(SERVER) or (False, "no heartbeat")}
    for dummy in range(2):
        lines = MPH.round_once(args, show=lambda names: units, probes=probes(), restart_units=restarted.extend, now_us=NOW_US)
    assert sorted(probed) == [RM, RM, SERVER, SERVER]
    assert restarted == [SERVER] and "maru-server.service restarted: 2 failed probes in a row, last: no heartbeat" in lines
    # A stopped unit is not probed at all.
    units[SERVER] = dict(units[SERVER], ActiveState="inactive")
    probed.clear()
    MPH.round_once(args, show=lambda names: units, probes=probes(), restart_units=restarted.extend, now_us=NOW_US)
    assert probed == [RM]


def test_the_clients_load_before_the_probes_timeout_starts(tmp_path):
    """Importing Maru's clients may take seconds on a busy host: it is not charged to the services'
    --timeout (charged to it, a slow import would count as a failed probe of a healthy pool)."""
    args = argparse.Namespace(rm_address="127.0.0.1:9", server_url="tcp://127.0.0.1:9", state=str(tmp_path / "state.json"),
                              failures=3, timeout=0.2, start_grace=0)
    calls = []

    class Rm:
        def __init__(self, address):
            calls.append(("rm", address))

        def stats(self):
            return [{"pool": 1}]

        def close(self):
            pass

    class Server:
        def __init__(self, url, timeout_ms):
            calls.append(("server", url, timeout_ms))

        def connect(self):
            pass

        def heartbeat(self):
            return True

        def close(self):
            pass

    def slow_load():
        time.sleep(1.5)  # longer than the probes' whole wait (timeout + 1 s)
        return Rm, Server
    units = {RM: active("r1", 100), SERVER: active("s1", 100)}
    lines = MPH.round_once(args, show=lambda names: units, restart_units=calls.append, now_us=NOW_US, load=slow_load)
    assert lines == [] and sorted(calls) == [("rm", "127.0.0.1:9"), ("server", "tcp://127.0.0.1:9", 200)]
    state = json.load(open(args.state))
    assert state[RM]["live"] and state[SERVER]["live"] and state[RM]["failures"] == state[SERVER]["failures"] == 0


def test_clients_that_cannot_load_blame_no_service(tmp_path, monkeypatch, capsys):
    def broken():
        raise ImportError("No module named 'maru_shm'")
    monkeypatch.setattr(MPH, "load_clients", broken)
    monkeypatch.setattr(MPH, "systemctl_show", lambda names: {RM: active("r1", 100), SERVER: active("s1", 100)})
    monkeypatch.setattr(MPH, "systemctl_restart", lambda names: pytest.fail("restarted %s" % names))
    state = tmp_path / "state.json"
    assert MPH.main(["--rm-address", "a:1", "--server-url", "tcp://a:1", "--state", str(state)]) == 1
    assert "cannot load Maru's clients: No module named 'maru_shm'" in capsys.readouterr().err
    assert not state.exists()


@pytest.mark.parametrize("argv", [["--failures", "0"], ["--timeout", "0"], ["--start-grace", "-1"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        MPH.main(["--rm-address", "a:1", "--server-url", "tcp://a:1", "--state", "/nonexistent/s.json"] + argv)
