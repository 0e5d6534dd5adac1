# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/dynamo_worker/files/worker-health (the workers' liveness round, run by
dynamo-worker-health.timer) against local HTTP servers on 127.0.0.1 that answer like a worker's
system /live (200, 503) or hang like a frozen (SIGSTOPped) one; systemctl is a fake."""
import argparse
import http.server
import importlib.machinery
import importlib.util
import os
import socket
import threading

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "roles", "dynamo_worker", "files", "worker-health")


_LOADER = importlib.machinery.SourceFileLoader("worker_health", SCRIPT)  # no .py suffix: an explicit loader
WH = importlib.util.module_from_spec(importlib.util.spec_from_loader("worker_health", _LOADER))
_LOADER.exec_module(WH)


class Worker:
    """A worker's system port on 127.0.0.1: `status` is what /live answers (None: hang, as a frozen
    process whose socket still accepts)."""

    def __init__(self):
        self.status, self.calls = 200, 0
        state = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                state.calls += 1
                assert self.path == "/live"
                body = b'{"status":"live"}' if state.status == 200 else b'{"status":"notready"}'
                self.send_response(state.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def workers():
    made = []

    def make():
        made.append(Worker())
        return made[-1]

    yield make
    for worker in made:
        worker.close()


@pytest.fixture
def frozen():
    """A listening socket nobody accepts on: connect succeeds, no answer ever comes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


class Host:
    """The host as the round sees it: environment files, unit states (fake systemctl), restarts."""

    def __init__(self, tmp_path):
        self.env_dir = tmp_path / "workers"
        self.env_dir.mkdir()
        self.args = argparse.Namespace(env_dir=str(self.env_dir), state=str(tmp_path / "run" / "state.json"),
                                       failures=3, timeout=0.5, start_grace=300.0)
        self.units, self.restarted, self.shown = {}, [], []
        self.now_us = 1000 * 10 ** 6

    def add(self, name, port, state="active", invocation="inv1", entered_s_ago=600):
        (self.env_dir / (name + ".env")).write_text(
            "# Worker %s\nDYN_SYSTEM_PORT=%d\nDYN_SYSTEM_HOST=127.0.0.1\n" % (name, port))
        self.set(name, state, invocation, entered_s_ago)

    def set(self, name, state="active", invocation="inv1", entered_s_ago=600):
        self.units["dynamo-worker@%s.service" % name] = {
            "Id": "dynamo-worker@%s.service" % name, "ActiveState": state, "InvocationID": invocation,
            "ActiveEnterTimestampMonotonic": str(self.now_us - entered_s_ago * 10 ** 6)}

    def show(self, names):
        self.shown.append(list(names))
        return {name: self.units[name] for name in names if name in self.units}

    def round(self):
        return WH.round_once(self.args, show=self.show, restart_units=self.restarted.append, now_us=self.now_us)


def test_restarts_after_consecutive_failures_only(tmp_path, workers):
    host, w = Host(tmp_path), workers()
    host.add("a", w.port)
    assert host.round() == []  # live: nothing to say
    w.status = 503
    lines = host.round() + host.round()
    assert [line.split(":")[0] for line in lines] == ["dynamo-worker@a.service failed /live probe 1 of 3",
                                                      "dynamo-worker@a.service failed /live probe 2 of 3"]
    assert host.restarted == []
    w.status = 200  # one good answer resets the count
    host.round()
    w.status = 503
    host.round()
    host.round()
    assert host.restarted == []
    lines = host.round()
    assert host.restarted == [["dynamo-worker@a.service"]]
    assert "restarted: 3 failed /live probes in a row, last: HTTP 503" in lines[0]
    assert w.calls == 7
    # The count starts again from zero after the restart.
    host.round()
    assert host.restarted == [["dynamo-worker@a.service"]]


def test_a_frozen_worker_times_out_and_is_restarted(tmp_path, frozen):
    host = Host(tmp_path)
    host.add("frozen", frozen)
    host.round()
    # Never live in this invocation, but active for longer than the start grace: counted.
    host.round()
    lines = host.round()
    assert host.restarted == [["dynamo-worker@frozen.service"]], lines
    assert "timed out" in lines[0]


def test_inactive_and_activating_workers_are_not_probed(tmp_path, workers):
    host, w = Host(tmp_path), workers()
    w.status = 503
    host.add("a", w.port)
    host.round()
    host.round()
    assert WH.load_state(host.args.state)["dynamo-worker@a.service"]["failures"] == 2
    for state in ("inactive", "activating", "failed", "deactivating"):
        host.set("a", state)
        assert host.round() == []
    assert w.calls == 2
    assert host.restarted == []
    # Its count was dropped: active again (same invocation), it needs three failures anew.
    host.set("a", "active")
    host.round()
    host.round()
    assert host.restarted == []
    host.round()
    assert host.restarted == [["dynamo-worker@a.service"]]


def test_a_starting_worker_is_not_counted_until_live_or_past_the_grace(tmp_path, workers):
    host, w = Host(tmp_path), workers()
    w.status = 503  # vLLM loading its model: active (Type=simple), /live not ready
    host.add("a", w.port, entered_s_ago=10)
    for dummy in range(5):
        assert "starting" in host.round()[0]
    assert host.restarted == []
    w.status = 200  # live once: from now on failures count
    host.round()
    w.status = 503
    for dummy in range(3):
        host.round()
    assert host.restarted == [["dynamo-worker@a.service"]]
    # A new invocation (restarted) is starting again, not live.
    host.set("a", invocation="inv2", entered_s_ago=5)
    assert "starting" in host.round()[0]
    host.set("a", invocation="inv2", entered_s_ago=301)  # past the grace without ever answering
    host.round()
    host.round()
    host.round()
    assert host.restarted == [["dynamo-worker@a.service"], ["dynamo-worker@a.service"]]


def test_workers_due_together_are_restarted_in_one_call(tmp_path, workers):
    """One systemctl call: systemd then orders their starts by the units' After= (same GPU)."""
    host = Host(tmp_path)
    wa, wb, wc = workers(), workers(), workers()
    for name, w in (("a", wa), ("b", wb), ("c", wc)):
        host.add(name, w.port)
    host.round()
    wa.status = wb.status = 503
    for dummy in range(3):
        host.round()
    assert host.restarted == [["dynamo-worker@a.service", "dynamo-worker@b.service"]]
    # One systemctl show per round for all the units.
    assert all(len(names) == 3 for names in host.shown) and len(host.shown) == 4


def test_no_workers_no_systemctl(tmp_path):
    host = Host(tmp_path)
    (host.env_dir / ".secrets.env").write_text("HF_TOKEN=x\n")
    assert host.round() == []
    assert host.shown == [] and host.restarted == []


def test_read_targets(tmp_path):
    env_dir = tmp_path / "workers"
    env_dir.mkdir()
    (env_dir / "a.env").write_text("# Worker a\nDYN_SYSTEM_PORT=18081\nDYN_SYSTEM_HOST=127.0.10.3\nHOME=/x\n")
    (env_dir / "any.env").write_text("DYN_SYSTEM_PORT=18082\nDYN_SYSTEM_HOST=0.0.0.0\n")
    (env_dir / "later.env").write_text("DYN_SYSTEM_PORT=1\nDYN_SYSTEM_HOST=127.0.0.2\nDYN_SYSTEM_PORT=18083\n")
    (env_dir / "off.env").write_text("DYN_SYSTEM_PORT=-1\n")
    (env_dir / ".secrets.env").write_text("HF_TOKEN=x\n")
    (env_dir / "notes.txt").write_text("DYN_SYSTEM_PORT=1\n")
    assert WH.read_targets(str(env_dir)) == {
        "dynamo-worker@a.service": "http://127.0.10.3:18081/live",
        "dynamo-worker@any.service": "http://127.0.0.1:18082/live",
        "dynamo-worker@later.service": "http://127.0.0.2:18083/live"}
    assert WH.read_targets(str(tmp_path / "none")) == {}


def test_parse_units():
    text = ("Id=dynamo-worker@a.service\nActiveState=active\nInvocationID=abc\n\n"
            "Id=dynamo-worker@b.service\nActiveState=inactive\nInvocationID=\n")
    units = WH.parse_units(text)
    assert units["dynamo-worker@a.service"]["InvocationID"] == "abc"
    assert units["dynamo-worker@b.service"]["ActiveState"] == "inactive"


def test_state_survives_a_broken_file(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("{not json")
    assert WH.load_state(str(path)) == {}
    WH.save_state(str(path), {"u": {"failures": 1}})
    assert WH.load_state(str(path)) == {"u": {"failures": 1}}


def test_bad_usage(capsys):
    for argv, why in ((["--env-dir", "/x", "--state", "/y", "--failures", "0"], "--failures must be >= 1"),
                      (["--env-dir", "/x"], "required: --state"),
                      (["--env-dir", "/x", "--state", "/y", "--timeout", "soon"], "invalid float value: 'soon'"),
                      (["--env-dir", "/x", "--state", "/y", "--every", "5"], "unrecognized argument: --every"),
                      (["--env-dir", "/x", "--state"], "argument --state: expected one argument")):
        with pytest.raises(SystemExit) as exc:
            WH.main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: worker-health") and why in err, (argv, err)


def test_options_as_the_unit_writes_them():
    args = WH.parse_args(["--env-dir", "/etc/dynamo/workers", "--state", "/run/x/state.json", "--failures", "3",
                          "--timeout", "4", "--start-grace=310"])
    assert (args.env_dir, args.state, args.failures, args.timeout, args.start_grace) == \
        ("/etc/dynamo/workers", "/run/x/state.json", 3, 4.0, 310.0)
    args = WH.parse_args(["--state", "s", "--env-dir", "e"])
    assert (args.failures, args.timeout, args.start_grace) == (3, 4.0, 300.0)


def test_get_live_reads_the_status_line_over_a_plain_socket(workers, frozen):
    w = workers()
    url = "http://127.0.0.1:%d/live" % w.port
    assert WH.get_live(url, 1.0) == (True, "")
    w.status = 503
    assert WH.get_live(url, 1.0) == (False, "HTTP 503")
    assert w.calls == 2
    ok, reason = WH.get_live("http://127.0.0.1:%d/live" % frozen, 0.3)
    assert not ok and "timed out" in reason
    # A closed loopback port (bound, never listening): refused at once.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    try:
        ok, reason = WH.get_live("http://127.0.0.1:%d/live" % closed.getsockname()[1], 1.0)
    finally:
        closed.close()
    assert not ok and "refused" in reason.lower()


def test_get_live_refuses_an_answer_that_is_not_http():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def answer():
        conn, dummy = srv.accept()
        conn.recv(1024)
        conn.sendall(b"SSH-2.0-OpenSSH\r\n")
        conn.close()
    threading.Thread(target=answer, daemon=True).start()
    try:
        ok, reason = WH.get_live("http://127.0.0.1:%d/live" % srv.getsockname()[1], 1.0)
    finally:
        srv.close()
    assert not ok and reason.startswith("no HTTP status line"), reason


def test_split_url_takes_the_forms_read_targets_writes():
    assert WH.split_url("http://127.0.10.3:18081/live") == ("127.0.10.3", 18081, "/live")
    assert WH.split_url("http://[::1]:18082/live") == ("::1", 18082, "/live")
    assert WH.get_live("http://127.0.0.1/live", 1.0)[0] is False  # no port: refused before any connect


def test_a_round_imports_neither_urllib_nor_http_client(tmp_path):
    """Each round is a new interpreter (python3 -I -S, every few seconds on every worker host):
    its imports are most of its CPU."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", SCRIPT, "--env-dir", str(tmp_path / "none"),
                          "--state", str(tmp_path / "run" / "state.json")], capture_output=True, text=True, check=False)
    modules = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert out.returncode == 0 and {"socket", "subprocess", "json"} <= modules, out.stderr[-2000:]  # really listed
    assert not {"urllib.request", "http.client", "ssl", "email.parser", "argparse"} & modules
