# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/kvcr/files/kvcr_ready.py (the units' readiness gate) against real local sockets and HTTP servers."""
import http.server
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "roles", "kvcr", "files", "kvcr_ready.py")
_spec = importlib.util.spec_from_file_location("kvcr_ready", SCRIPT)
ready = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ready)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + [str(a) for a in args], capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def sock_path(tmp_path):
    return str(tmp_path / "memory.sock")


def listen(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    return srv


def test_unix_ready_and_missing(sock_path):
    assert ready.unix_accepts(sock_path)[0] is False
    srv = listen(sock_path)
    try:
        assert ready.unix_accepts(sock_path) == (True, "")
        proc = run("unix", sock_path, "--timeout", 1)
        assert proc.returncode == 0 and "ready after 1 probe" in proc.stdout
    finally:
        srv.close()
    # a stale socket file (listener gone) refuses: not ready
    ok, reason = ready.unix_accepts(sock_path)
    assert ok is False and "Connection refused" in reason
    proc = run("unix", sock_path, "--timeout", 0.3, "--interval", 0.1)
    assert proc.returncode == 1 and "not ready after 0.3 s" in proc.stderr


def test_unix_waits_for_a_late_listener(sock_path):
    timer = threading.Timer(0.6, lambda: setattr(test_unix_waits_for_a_late_listener, "srv", listen(sock_path)))
    timer.start()
    try:
        start = time.monotonic()
        proc = run("unix", sock_path, "--timeout", 10, "--interval", 0.1)
        assert proc.returncode == 0 and 0.5 < time.monotonic() - start < 9
    finally:
        timer.join()
        test_unix_waits_for_a_late_listener.srv.close()


class Handler(http.server.BaseHTTPRequestHandler):
    status = {"/live": 200, "/notready": 503}

    def do_GET(self):  # noqa: N802 - http.server API
        code = self.status.get(self.path, 404)
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b'{"status":"ready"}' if code == 200 else b'{"status":"notready"}')

    def log_message(self, *args):
        pass


def test_http_ready_and_not_ready():
    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    base = "http://127.0.0.1:%d" % srv.server_address[1]
    try:
        assert ready.http_ok(base + "/live") == (True, "")
        assert ready.http_ok(base + "/notready") == (False, "GET %s/notready: HTTP 503" % base)
        assert run("http", base + "/live", "--timeout", 1).returncode == 0
        proc = run("http", base + "/notready", "--timeout", 0.3, "--interval", 0.1)
        assert proc.returncode == 1 and "HTTP 503" in proc.stderr
    finally:
        srv.shutdown()
    assert ready.http_ok(base + "/live")[0] is False


def test_wait_ready_counts_and_deadline():
    clock = {"t": 0.0}
    answers = [(False, "no"), (False, "no"), (True, "")]
    ok, reason, tries = ready.wait_ready(lambda: answers.pop(0), 5, 1, clock=lambda: clock["t"],
                                         sleep=lambda s: clock.__setitem__("t", clock["t"] + s))
    assert (ok, reason, tries, clock["t"]) == (True, "", 3, 2.0)
    ok, reason, tries = ready.wait_ready(lambda: (False, "down"), 2, 1, clock=lambda: clock["t"],
                                         sleep=lambda s: clock.__setitem__("t", clock["t"] + s))
    assert (ok, reason, tries) == (False, "down", 3)


def test_bad_usage():
    assert run("tcp", "x").returncode == 2
    assert run("unix", "/x", "--interval", 0).returncode == 2


# ---------------------------------------------------------------- env (RDMA-only units)

def test_env_requires_rdma_settings():
    env = dict(os.environ, UCX_NET_DEVICES="mlx5_3:1", UCX_TLS="rc_x,cuda")
    ok = subprocess.run([sys.executable, SCRIPT, "env", "--label", "GPU 0", "UCX_NET_DEVICES", "UCX_TLS=rc_x,cuda"],
                        capture_output=True, text=True, timeout=30, env=env, check=False)
    assert ok.returncode == 0, ok.stderr
    env.pop("UCX_NET_DEVICES")
    env["UCX_TLS"] = "tcp"
    bad = subprocess.run([sys.executable, SCRIPT, "env", "--label", "GPU 0 on gpu-b", "UCX_NET_DEVICES",
                          "UCX_TLS=rc_x,cuda"], capture_output=True, text=True, timeout=30, env=env, check=False)
    assert bad.returncode == 1
    assert "GPU 0 on gpu-b refuses to start without RDMA: UCX_NET_DEVICES is unset; UCX_TLS=tcp, must be rc_x,cuda" in bad.stderr


def test_env_errors_compares_lists_item_by_item():
    assert ready.env_errors(["UCX_TLS=rc_x,cuda"], {"UCX_TLS": " rc_x , cuda"}) == []
    assert ready.env_errors(["UCX_TLS=rc_x,cuda"], {"UCX_TLS": "cuda,rc_x"}) == ["UCX_TLS=cuda,rc_x, must be rc_x,cuda"]
    assert ready.env_errors(["A"], {"A": " "}) == ["A is unset"]


# ---------------------------------------------------------------- watch (timer-driven supervision)

class Units:
    def __init__(self, active=True):
        self.active = active
        self.restarts = []

    def is_active(self, unit):
        return self.active

    def restart(self, unit):
        self.restarts.append(unit)


def test_watch_restarts_after_consecutive_failures_only(tmp_path):
    units = Units()
    state = str(tmp_path / "state")

    def bad():
        return False, "connect /run/kvcr/memory.sock: Connection refused"

    def good():
        return True, ""

    assert ready.watch("kvcr-service.service", state, 3, bad, units.is_active, units.restart)[1] == 1
    assert ready.watch("kvcr-service.service", state, 3, bad, units.is_active, units.restart)[1] == 2
    # one good probe resets the count
    assert ready.watch("kvcr-service.service", state, 3, good, units.is_active, units.restart) == ("ok", 0)
    for expected in (1, 2):
        assert ready.watch("kvcr-service.service", state, 3, bad, units.is_active, units.restart)[1] == expected
    action, count = ready.watch("kvcr-service.service", state, 3, bad, units.is_active, units.restart)
    assert action.startswith("restarted after 3 failed probes") and units.restarts == ["kvcr-service.service"]
    # the count starts over after the restart
    assert ready.watch("kvcr-service.service", state, 3, bad, units.is_active, units.restart)[1] == 1


def test_watch_leaves_an_inactive_unit_alone(tmp_path):
    units = Units(active=False)
    probed = []
    action = ready.watch("kvcr-state-agent.service", str(tmp_path), 1, lambda: probed.append(1) or (False, "x"),
                         units.is_active, units.restart)
    assert action == ("inactive", 0) and probed == [] and units.restarts == []


def test_watch_probe_against_a_real_socket(tmp_path, sock_path):
    srv = listen(sock_path)
    try:
        units = Units()
        assert ready.watch("u", str(tmp_path), 1, lambda: ready.unix_accepts(sock_path, 1.0),
                           units.is_active, units.restart) == ("ok", 0)
    finally:
        srv.close()
    os.unlink(sock_path)
    units = Units()
    action, dummy = ready.watch("u", str(tmp_path), 1, lambda: ready.unix_accepts(sock_path, 1.0), units.is_active, units.restart)
    assert action.startswith("restarted after 1 failed probes") and units.restarts == ["u"]
