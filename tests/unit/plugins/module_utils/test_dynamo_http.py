# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/module_utils/dynamo_http.py against a local http.server (no urllib mocks)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dynamo_fixture_server import (FakeSite, Reply, fixture_text, free_port,  # noqa: E402
                                   json_reply, sse_reply)

from ansible_collections.kvshare.dynamo.plugins.module_utils import dynamo_http as dh  # noqa: E402

A_ID = 3496660461086300990      # vLLM worker A, worker_id 3086a229cb33db3e
B_ID = 3496660461086300987      # vLLM worker B, worker_id 3086a229cb33db3b
M_ID = 3496660461086300939      # mocker, worker_id 3086a229cb33db0b
B_NEW_ID = 3496660461086301466  # B after restart, worker_id 3086a229cb33dd1a


@pytest.fixture
def site():
    sites = []

    def make(handler):
        s = FakeSite(handler)
        sites.append(s)
        return s
    yield make
    for s in sites:
        s.close()


# ---------------------------------------------------------------- instance ids

def test_parse_instances_real_health_generate_only_exact_ints():
    doc = json.loads(fixture_text("frontend_health_instances.json"))
    inst = dh.parse_instances(doc)
    assert sorted(i["instance_id"] for i in inst) == sorted([A_ID, B_ID, M_ID])
    for i in inst:
        assert isinstance(i["instance_id"], int) and not isinstance(i["instance_id"], bool) and i["instance_id"] > 2 ** 53
        assert i["endpoint"] == "generate"
        assert i["instance_id_str"] == str(i["instance_id"])
        assert int(i["lease_hex"], 16) == i["instance_id"]
    a = [i for i in inst if i["instance_id"] == A_ID][0]
    assert a["tcp_host"] == "127.0.20.1" and a["tcp_port"] == 28091
    assert a["component"] == "backend" and a["namespace"] == "dynamo"
    assert len(dh.parse_instances(doc, endpoint=None)) == 8
    assert [i["instance_id"] for i in dh.parse_instances(doc, component="mocker")] == [M_ID]
    assert dh.parse_instances(doc, namespace="other") == []


def test_parse_instances_rejects_floats_and_bad_shapes():
    with pytest.raises(ValueError, match="float"):
        dh.parse_instances({"instances": [{"endpoint": "generate",
                                           "instance_id": 3.496660461086301e18}]})
    with pytest.raises(ValueError):
        dh.parse_instances({"status": "healthy", "instances": "x"})
    with pytest.raises(ValueError):
        dh.parse_instances([])
    assert dh.parse_instances({"status": "healthy", "endpoints": [], "instances": []}) == []


@pytest.mark.parametrize("value,expected", [
    (A_ID, A_ID), (str(A_ID), A_ID), (" 42 ", 42), (0, 0), (2 ** 64 - 1, 2 ** 64 - 1)])
def test_as_instance_id_ok(value, expected):
    assert dh.as_instance_id(value) == expected


@pytest.mark.parametrize("value", [True, 1.0, "0x10", "-1", -1, 2 ** 64, None, [1]])
def test_as_instance_id_rejects(value):
    with pytest.raises(ValueError):
        dh.as_instance_id(value)


def test_hex_worker_id():
    assert dh.hex_to_instance_id("3086a229cb33db3e") == A_ID
    with pytest.raises(ValueError):
        dh.hex_to_instance_id("xyz")
    with pytest.raises(ValueError):
        dh.hex_to_instance_id("1" * 17)


@pytest.mark.parametrize("addr,host,port,lease", [
    ("127.0.20.1:28091/3086a229cb33db3e/dynamo/backend/generate", "127.0.20.1", 28091,
     "3086a229cb33db3e"),
    ("[::1]:4000/6a6ca22990221562/dynamo/backend/generate", "::1", 4000, "6a6ca22990221562"),
    ("host-only", None, None, None),
    (None, None, None, None),
])
def test_parse_transport_tcp(addr, host, port, lease):
    got = dh.parse_transport_tcp(addr)
    assert (got["host"], got["port"], got["lease_hex"]) == (host, port, lease)


def test_worker_ids_from_real_metrics():
    assert dh.worker_ids_from_metrics(fixture_text("vllm_worker_metrics_full.txt")) == [A_ID]
    assert dh.worker_ids_from_metrics(fixture_text("mocker_worker_metrics_full.txt")) == [M_ID]
    # before registration only dynamo_component_uptime_seconds carries the id
    assert dh.worker_ids_from_metrics(
        fixture_text("vllm_worker_metrics_preregistration.txt")) == [B_NEW_ID]
    assert dh.worker_ids_from_metrics("x 1\n") == []


def _instances(name):
    return dh.parse_instances(json.loads(fixture_text(name)))


def test_map_worker_by_metrics_and_rpc_port():
    inst = _instances("frontend_health_instances.json")
    m = dh.map_worker("http://unused", inst, metrics_text=fixture_text(
        "vllm_worker_metrics_full.txt"))
    assert (m.instance_id, m.method, m.registered) == (A_ID, "metrics_worker_id", True)
    m = dh.map_worker("http://unused", inst, rpc_port=28091,
                      metrics_text=fixture_text("vllm_worker_metrics_full.txt"))
    assert (m.instance_id, m.method) == (A_ID, "metrics_worker_id+rpc_port")
    m = dh.map_worker("http://unused", inst, rpc_port=9,
                      metrics_text=fixture_text("vllm_worker_metrics_full.txt"))
    assert m.instance_id is None and "conflict" in m.error
    # rpc_port alone when metrics carry no id: the port on the worker's own host
    m = dh.map_worker("http://127.0.20.1:18081", inst, rpc_port=28091, metrics_text="x 1\n")
    assert (m.instance_id, m.method) == (A_ID, "rpc_port")
    # a stopped worker (no /metrics) is never taken for another host's worker on the same rpc_port
    m = dh.map_worker("http://127.0.20.2:18081", inst, rpc_port=28091, metrics_text="x 1\n")
    assert m.instance_id is None and "no worker_id label" in m.error
    m = dh.map_worker("http://unused", inst, metrics_text="x 1\n")
    assert m.instance_id is None and "no worker_id label" in m.error


def test_map_worker_before_registration_and_ambiguous():
    inst = _instances("frontend_health_b_not_registered.json")
    m = dh.map_worker("http://unused", inst,
                      metrics_text=fixture_text("vllm_worker_metrics_preregistration.txt"))
    assert m.instance_id == B_NEW_ID and m.registered is False
    two = ('u{worker_id="3086a229cb33db3e"} 1\n'
           'u{worker_id="3086a229cb33dd1a"} 1\n')
    m = dh.map_worker("http://unused", inst, metrics_text=two)
    assert m.instance_id == A_ID  # only one of the two is registered
    m = dh.map_worker("http://unused", [], metrics_text=two)
    assert m.instance_id is None and "2 instance ids" in m.error


def test_map_worker_fetches_metrics_over_http(site):
    w = site(lambda m, p, b: Reply(200, fixture_text("vllm_worker_metrics_full.txt"),
                                   "text/plain; version=0.0.4"))
    m = dh.map_worker(w.url, _instances("frontend_health_instances.json"), timeout=5)
    assert m.instance_id == A_ID and m.as_dict()["instance_id_str"] == str(A_ID)
    dead = dh.map_worker("http://127.0.0.1:%d" % free_port(), [], timeout=2)
    assert dead.instance_id is None and "connection error" in dead.error


def test_fetch_instances(site):
    fe = site(lambda m, p, b: json_reply(fixture_text("frontend_health_instances.json")))
    res, inst, err = dh.fetch_instances(fe.url, timeout=5)
    assert err is None and len(inst) == 3
    assert fe.requests[0][1] == "/health?instances=true"
    bad = site(lambda m, p, b: json_reply("not json"))
    _res, inst, err = dh.fetch_instances(bad.url, timeout=5)
    assert inst is None and "frontend /health" in err


# ---------------------------------------------------------------- plain HTTP

def test_request_ok_and_error_bodies(site):
    def handler(method, path, body):
        if path == "/ok":
            return json_reply({"id": A_ID})
        if path == "/400":
            return json_reply(fixture_text("error_400_no_target.json"), 400)
        return json_reply(fixture_text("error_503_dead_worker.json"), 503)
    s = site(handler)
    res, doc = dh.get_json(s.url + "/ok", timeout=5)
    assert res.ok and doc == {"id": A_ID} and isinstance(doc["id"], int) and not isinstance(doc["id"], bool)
    res = dh.post_json(s.url + "/400", {"model": "tiny"}, timeout=5)
    assert res.status == 400 and not res.ok
    assert res.json() == {"message": "Invalid request", "type": "Bad Request", "code": 400}
    assert json.loads(s.requests[-1][2]) == {"model": "tiny"}
    res = dh.post_json(s.url + "/503", {}, timeout=5)
    assert res.status == 503 and "Service temporarily unavailable" in res.describe()
    assert res.summary()["status"] == 503


def test_request_connection_refused_and_timeout(site):
    res = dh.get("http://127.0.0.1:%d/x" % free_port(), timeout=2)
    assert res.status is None and "connection error" in res.error
    assert res.summary()["body"] == res.error
    slow = site(lambda m, p, b: Reply(200, "{}", delay=1.5))
    res = dh.get(slow.url, timeout=0.3)
    assert res.status is None and "timeout" in res.error


def test_env_proxy_is_ignored(site, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:%d" % free_port())
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:%d" % free_port())
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    s = site(lambda m, p, b: json_reply({"ok": True}))
    res, doc = dh.get_json(s.url, timeout=5)
    assert doc == {"ok": True}


def test_completion_payload():
    p = dh.completion_payload("tiny", "hi", 1, instance_id=str(A_ID))
    assert p == {"model": "tiny", "prompt": "hi", "max_tokens": 1, "temperature": 0,
                 "nvext": {"backend_instance_id": A_ID}}
    assert json.dumps(p).endswith('"backend_instance_id": %d}}' % A_ID)
    s = dh.completion_payload("tiny", "hi", 4, stream=True, include_usage=True)
    assert s["stream"] is True and s["stream_options"] == {"include_usage": True}
    assert "nvext" not in s


# ---------------------------------------------------------------- SSE

def test_iter_sse_handles_comments_multiline_and_events():
    lines = [": keepalive\n", "event: error\n", "data: {\"a\":\n", "data: 1}\n", "\n",
             "data: [DONE]\r\n", "\r\n"]
    assert list(dh.iter_sse(lines)) == [("error", '{"a":\n1}'), ("message", "[DONE]")]


def test_stream_vllm_with_usage(site):
    fe = site(lambda m, p, b: sse_reply(fixture_text("kv_vllm/sse_b.txt"), event_delay=0.05))
    sr = dh.stream_completion(fe.url + "/v1/completions",
                              dh.completion_payload("tiny", "p", 8, instance_id=B_ID,
                                                    include_usage=True, stream=True), timeout=5)
    assert sr.ok and sr.status == 200 and sr.done
    assert sr.text == "spo\ufffdmodel\ufffdlien\ufffd<fi"
    assert sr.finish_reason == "length"
    assert sr.prompt_tokens == 1515 and sr.completion_tokens == 8 and sr.cached_tokens == 1408
    assert 0.04 <= sr.ttft_s <= sr.total_s
    assert len(sr.chunks) == 6  # 5 token chunks + the usage chunk (choices=[])
    sent = fe.posts()[0]
    assert sent["stream"] is True and sent["nvext"]["backend_instance_id"] == B_ID
    assert sr.summary()["usage"]["prompt_tokens_details"]["cached_tokens"] == 1408


def test_stream_without_usage_and_mocker_empty_text(site):
    fe = site(lambda m, p, b: sse_reply(fixture_text("sse_vllm_no_usage.txt")))
    sr = dh.stream_completion(fe.url, {"model": "tiny"}, timeout=5)
    assert sr.ok and sr.usage is None and sr.cached_tokens is None and sr.prompt_tokens is None
    fe2 = site(lambda m, p, b: sse_reply(fixture_text("sse_mocker_include_usage.txt")))
    sr = dh.stream_completion(fe2.url, {"model": "tinym"}, timeout=5)
    assert sr.ok and sr.text == "" and sr.ttft_s is not None  # first choice chunk
    assert sr.usage["completion_tokens"] == 8 and sr.cached_tokens == 0


def test_stream_error_answers(site):
    fe = site(lambda m, p, b: json_reply(fixture_text("error_400_stream_no_target.json"), 400))
    sr = dh.stream_completion(fe.url, {"model": "tiny"}, timeout=5)
    assert not sr.ok and sr.status == 400 and "Invalid request" in sr.error_body
    cut = site(lambda m, p, b: sse_reply(fixture_text("sse_vllm_include_usage.txt"),
                                         drop_done=True))
    sr = dh.stream_completion(cut.url, {"model": "tiny"}, timeout=5)
    assert not sr.ok and sr.error == "stream ended without [DONE]" and sr.text
    plain = site(lambda m, p, b: json_reply(fixture_text("completion_probe_vllm_200.json")))
    sr = dh.stream_completion(plain.url, {"model": "tiny"}, timeout=5)
    assert not sr.ok and "text/event-stream" in sr.error
    err_ev = site(lambda m, p, b: Reply(200, b"", "text/event-stream",
                                        ['event: error\ndata: {"message":"boom"}\n\n']))
    sr = dh.stream_completion(err_ev.url, {"model": "tiny"}, timeout=5)
    assert not sr.ok and sr.error_events == [{"message": "boom"}]
    sr = dh.stream_completion("http://127.0.0.1:%d" % free_port(), {}, timeout=2)
    assert sr.status is None and "connection error" in sr.error
