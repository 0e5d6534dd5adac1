# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/dynamo_worker/files/worker-wait-ready (the ExecStartPost= gate of same-GPU workers) against a
local HTTP server that answers like a worker's system port: 503 notready, then 200 ready."""
import http.server
import io
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from lib.unit import load_script

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "roles", "dynamo_worker", "files", "worker-wait-ready")


def load():
    return load_script(SCRIPT, "worker_wait_ready")


@pytest.fixture
def worker():
    state = {"ready_after": 3, "calls": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            state["calls"] += 1
            ready = state["calls"] > state["ready_after"]
            body = json.dumps({"status": "ready" if ready else "notready", "endpoints": []}).encode()
            self.send_response(200 if ready else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield state, "http://127.0.0.1:%d/health" % srv.server_address[1]
    srv.shutdown()


def test_waits_for_ready(worker):
    state, url = worker
    out = io.StringIO()
    assert load().wait(url, timeout=30, interval=0.05, out=out) is True
    assert state["calls"] == 4
    assert "ready after" in out.getvalue()


def test_timeout_releases_without_failing(worker):
    state, url = worker
    state["ready_after"] = 10 ** 6
    proc = subprocess.run([sys.executable, SCRIPT, url, "--timeout", "0.3", "--interval", "0.05"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0
    assert "not ready after" in proc.stdout and "HTTP 503" in proc.stdout


def test_nothing_listening():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # closed once the block ends: a closed loopback port
    out = io.StringIO()
    assert load().wait("http://127.0.0.1:%d/health" % port, timeout=0.2, interval=0.05, out=out) is False
    assert "not ready after" in out.getvalue()
