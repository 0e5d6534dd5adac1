# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/kvcr/files/kvcr_ready.py (the units' readiness gate) against real local sockets and HTTP servers."""
import base64
import http.server
import importlib.util
import json
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


# ---------------------------------------------------------------- attach (state-agent re-attach)

with open(os.path.join(REPO, "tests", "fixtures", "kvcr", "state_agent_etcd.json")) as _handle:
    ETCD = json.load(_handle)
WORKERS = dict((k, int(v, 16)) for k, v in ETCD["workers"].items())


def values(snapshot):
    return [base64.b64decode(kv["value"]).decode() for kv in ETCD[snapshot]["kvs"]]


def test_split_records_reads_the_real_agent_records():
    hosts, intents = ready.split_records(values("two_hosts"))
    assert len(hosts) == 2 and len(intents) == 1
    hosts, intents = ready.split_records(values("attached"))
    assert len(hosts) == 1 and len(intents) == 2
    assert all(i["target_host"]["instance_id"] == hosts[0] for i in intents)
    # anything else under the prefix, or not JSON, is ignored
    assert ready.split_records(["not json", json.dumps({"topic": "other", "metadata": {}})]) == ([], [])


def test_attach_verdict_on_the_captured_restart():
    def verdict(worker, snapshot):
        hosts, intents = ready.split_records(values(snapshot))
        return ready.attach_verdict({WORKERS[worker]}, hosts, intents)

    # the old advertisement lingers: two live hosts, nothing is decided yet
    assert verdict("kvh2_stale", "two_hosts") == (False, "2 live state-agent hosts")
    # one live host and kvh2's only intent targets the old incarnation: stale
    stale, reason = verdict("kvh2_stale", "stale")
    assert stale and reason.startswith("worker %x attached to state-agent host " % WORKERS["kvh2_stale"])
    # kvh1 (restarted with the agent, PartOf=) attached to the live one
    assert verdict("kvh1", "stale")[0] is False
    assert verdict("kvh1", "stale")[1].startswith("attached to state-agent host")
    # after the re-attach: both attached
    assert verdict("kvh2_reattached", "attached")[0] is False and verdict("kvh1", "attached")[0] is False
    # a worker with no intent (a mocker, or not attached yet) is not stale
    assert ready.attach_verdict({12345}, *ready.split_records(values("stale")))[0] is False
    assert ready.attach_verdict(set(), *ready.split_records(values("stale")))[0] is False


def test_attach_verdict_an_old_intent_beside_a_live_one_is_fine():
    hosts, intents = ready.split_records(values("attached"))
    old = dict(intents[0], target_host={"instance_id": 1})
    assert ready.attach_verdict({int(intents[0]["worker"]["worker_id"])}, hosts, intents + [old])[0] is False
    assert ready.attach_verdict({int(intents[0]["worker"]["worker_id"])}, hosts, [old])[0] is True


def test_attach_verdict_a_registered_engine_without_intent():
    # dynamo.vllm serves on without KV routing when its attachment failed at start (no agent within
    # 30 s, or two advertised): registered in discovery, no intent. Only for engines that must attach.
    hosts, intents = ready.split_records(values("stale"))
    kvh2 = WORKERS["kvh2_stale"]
    others = [i for i in intents if int(i["worker"]["worker_id"]) != kvh2]
    stale, reason = ready.attach_verdict({kvh2}, hosts, others, registered={kvh2, 7})
    assert stale and reason == ("worker %x serves without a state-agent attachment (registered, no intent), "
                                "the live host is %x" % (kvh2, hosts[0]))
    # not registered yet (still starting): nothing
    assert ready.attach_verdict({kvh2}, hosts, others, registered={7})[0] is False
    # not an engine that must attach (a mocker): nothing
    assert ready.attach_verdict({kvh2}, hosts, others)[0] is False
    # no live agent, or two: nothing yet
    assert ready.attach_verdict({kvh2}, [], others, registered={kvh2}) == (False, "0 live state-agent hosts")
    two, dummy = ready.split_records(values("two_hosts"))
    assert ready.attach_verdict({kvh2}, two, [], registered={kvh2}) == (False, "2 live state-agent hosts")


def test_registered_ids_from_discovery_keys():
    assert ready.registered_ids(["v1/instances/dynamo/backend/generate/1ff6a23f800f4d27",
                                 "v1/instances/dynamo/kv_state_agent/control/1ff6a23f800f4cc4", "v1/instances/x/bad/zz"]) == {
        WORKERS["kvh2_reattached"], int("1ff6a23f800f4cc4", 16)}


def test_worker_ids_from_metrics():
    text = ('dynamo_component_requests_total{dynamo_component="backend",worker_id="1ff6a23f800f4d27"} 3\n'
            'dynamo_component_uptime_seconds{worker_id="1ff6a23f800f4d27"} 9\n')
    assert ready.worker_ids(text) == {WORKERS["kvh2_reattached"]}
    assert ready.worker_ids("up 1\n") == set()


def reply(handler, payload):
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


class Gateway(http.server.BaseHTTPRequestHandler):
    """Test double of etcd's v3 JSON gateway (/v3/kv/range only), serving one captured snapshot."""
    snapshot = "stale"
    seen = []

    registered = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = base64.b64decode(body["key"]).decode()
        Gateway.seen.append((self.path, key, base64.b64decode(body["range_end"]).decode(), body.get("keys_only", False)))
        if key.startswith("v1/instances/"):
            payload = json.dumps({"kvs": [{"key": base64.b64encode(("%sbackend/generate/%x" % (key, i)).encode()).decode()}
                                          for i in Gateway.registered]}).encode()
        else:
            payload = json.dumps(ETCD[Gateway.snapshot]).encode()
        reply(self, payload)

    def log_message(self, *args):
        pass


class Metrics(http.server.BaseHTTPRequestHandler):
    worker = "kvh2_stale"

    def do_GET(self):  # noqa: N802
        reply(self, ('dynamo_component_uptime_seconds{worker_id="%x"} 9\n' % WORKERS[Metrics.worker]).encode())

    def log_message(self, *args):
        pass


def serve(handler):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_attach_probe_and_watch_over_http(tmp_path):
    etcd, metrics = serve(Gateway), serve(Metrics)
    try:
        env = {"ETCD_ENDPOINTS": "http://127.0.0.1:1,http://127.0.0.1:%d" % etcd.server_port}
        url = "http://127.0.0.1:%d/metrics" % metrics.server_port
        Gateway.snapshot, Metrics.worker = "stale", "kvh2_stale"
        ok, reason = ready.attach_probe(url, "dynamo", env, 2)
        assert not ok and "the live host is" in reason
        # the agent's prefix, range_end its successor (a prefix range); the closed first endpoint was skipped
        path, key, end, keys_only = Gateway.seen[-1]
        assert path == "/v3/kv/range" and key == "v1/event_sources/namespace/dynamo/component/kv_state_agent/topic/"
        assert not keys_only and len([q for q in Gateway.seen if q[1].startswith("v1/instances/")]) == 0
        assert end == key[:-1] + "0"
        units = Units()
        state = str(tmp_path)

        def probe():
            return ready.attach_probe(url, "dynamo", env, 2)
        assert ready.watch("w", state, 3, probe, units.is_active, units.restart, label="attach")[1] == 1
        # the attach count is kept apart from the liveness count of the same unit
        assert ready.watch("w", state, 3, lambda: (True, ""), units.is_active, units.restart) == ("ok", 0)
        assert ready.watch("w", state, 3, probe, units.is_active, units.restart, label="attach")[1] == 2
        action, dummy = ready.watch("w", state, 3, probe, units.is_active, units.restart, label="attach")
        assert action.startswith("restarted after 3 failed probes") and units.restarts == ["w"]
        Gateway.snapshot, Metrics.worker = "attached", "kvh2_reattached"
        assert ready.attach_probe(url, "dynamo", env, 2)[0] is True
        # an engine that must attach, registered without an intent: the registrations are read too
        Gateway.snapshot, Metrics.worker, Gateway.registered = "stale", "kvh1", []
        expect = dict(env, KVCR_ATTACH_EXPECT_INTENT="1")
        assert ready.attach_probe(url, "dynamo", expect, 2)[0] is True
        Gateway.snapshot = "two_hosts"
        Gateway.registered = [WORKERS["kvh1"]]
        assert ready.attach_probe(url, "dynamo", expect, 2) == (True, "2 live state-agent hosts")
        # kvh2's worker before its re-attach has no intent in the final capture: registered, it is missing
        Gateway.snapshot, Metrics.worker, Gateway.registered = "attached", "kvh2_stale", [WORKERS["kvh2_stale"]]
        ok, reason = ready.attach_probe(url, "dynamo", expect, 2)
        assert not ok and "serves without a state-agent attachment" in reason
        assert Gateway.seen[-1][1:] == ("v1/instances/dynamo/", "v1/instances/dynamo0", True)
        assert ready.attach_probe(url, "dynamo", env, 2)[0] is True
        # etcd or the worker unreachable: not this probe's business (never a restart)
        Gateway.snapshot, Metrics.worker = "stale", "kvh2_stale"
        assert ready.attach_probe("http://127.0.0.1:1/metrics", "dynamo", env, 1) == (
            True, "worker /metrics: GET http://127.0.0.1:1/metrics: [Errno 111] Connection refused")
        ok, reason = ready.attach_probe(url, "dynamo", {"ETCD_ENDPOINTS": "http://127.0.0.1:1"}, 1)
        assert ok and reason.startswith("etcd range v1/event_sources/namespace/dynamo/component/kv_state_agent/topic/: http://127.0.0.1:1")
    finally:
        etcd.shutdown()
        metrics.shutdown()


def test_attach_usage():
    assert run("attach", "--unit", "u").returncode == 2
    assert run("attach", "--unit", "u", "--state-dir", "/tmp", "--metrics-url", "http://127.0.0.1:1/m", "--namespace", "d",
               "--failures", "0").returncode == 2


def test_the_socket_watch_imports_neither_urllib_nor_ssl(tmp_path):
    """The health unit starts this script up to three times a round on every KVCR host: the socket
    watch (the memory service) loads no HTTP or TLS code; the probes that need it import it."""
    out = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", SCRIPT, "watch", "--unit", "kvcr-none.service",
                          "--state-dir", str(tmp_path / "state"), "unix", str(tmp_path / "no.sock")],
                         capture_output=True, text=True, check=False)
    modules = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert out.returncode == 0 and {"socket", "subprocess", "argparse"} <= modules, out.stderr[-2000:]
    assert not {"urllib.request", "http.client", "ssl", "tempfile", "base64"} & modules
