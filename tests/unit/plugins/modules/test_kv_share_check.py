# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""kv_share_check against local http.servers replaying a real A->B run (no urllib mocks)."""
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dynamo_fixture_server import (FakeSite, Reply, fixture_text, free_port,  # noqa: E402
                                   json_reply, sse_reply)

from ansible.module_utils.testing import patch_module_args  # noqa: E402
from ansible_collections.kvshare.dynamo.plugins.modules import kv_share_check as ksc  # noqa: E402
from ansible_collections.kvshare.dynamo.plugins.module_utils import maru  # noqa: E402

A_ID = 3496660461086300990
B_ID = 3496660461086300987
M_ID = 3496660461086300939
M2_ID = 3496660461086301434


def set_value(text, name, value, source=None):
    """Replace the value of sample `name` (optionally source=...) in real exposition text."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") and (source is None or 'source="%s"' % source in line):
            line = line.rsplit(" ", 1)[0] + " %s" % value
        out.append(line)
    return "\n".join(out) + "\n"


class Stack:
    """Frontend + workers A and B replaying kv_<engine>/ fixtures; state advances per request."""

    def __init__(self, engine="vllm", health="frontend_health_instances.json", ids=(A_ID, B_ID),
                 overrides=None, sse_overrides=None, route_to=None):
        self.engine = engine
        self.state = 0
        self.ids = ids
        self.overrides = overrides or {}
        self.sse_overrides = sse_overrides or {}
        self.route_to = route_to or {}
        self.health = fixture_text(health)
        self.fe = FakeSite(self._frontend)
        self.a = FakeSite(lambda m, p, b: self._metrics("a"))
        self.b = FakeSite(lambda m, p, b: self._metrics("b"))

    def _metrics(self, who):
        key = "metrics_%s_%d.txt" % (who, self.state)
        text = self.overrides.get(key)
        if text is None:
            text = fixture_text("kv_%s/%s" % (self.engine, key))
        return Reply(200, text, "text/plain; version=0.0.4; charset=utf-8")

    def _frontend(self, method, path, body):
        if path.startswith("/health"):
            return json_reply(self.health)
        req = json.loads(body)
        if not req.get("stream"):
            return json_reply(fixture_text("completion_probe_%s_200.json" % self.engine))
        target = req["nvext"]["backend_instance_id"]
        if target not in self.ids:
            return json_reply(fixture_text("error_400_unknown_id.json"), 400)
        who = "a" if target == self.ids[0] else "b"
        who = self.route_to.get(who, who)
        self.state = 1 if who == "a" else 2
        text = self.sse_overrides.get(who) or fixture_text("kv_%s/sse_%s.txt" % (self.engine, who))
        return sse_reply(text, event_delay=0.01)

    def args(self, **kw):
        args = dict(frontend_url=self.fe.url, model="tiny" if self.engine == "vllm" else "tinym",
                    worker_a={"name": "w0", "system_url": self.a.url, "engine": self.engine},
                    worker_b={"name": "w1", "system_url": self.b.url, "engine": self.engine},
                    settle_s=0.0, metrics_wait_s=0.3, request_timeout=5.0)
        args.update(kw)
        return args

    def run(self, **kw):
        return ksc.run_check(**self.args(**kw))

    def close(self):
        for s in (self.fe, self.a, self.b):
            s.close()


@pytest.fixture
def stack():
    made = []

    def make(**kw):
        s = Stack(**kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def reasons(report):
    return " | ".join(report["reasons"])


def run_main(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            ksc.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- the real run

def test_real_run_passes_with_numbers(stack):
    s = stack()
    r = s.run()
    assert r["verdict"] == "passed", reasons(r)
    assert r["reasons"] == []
    assert r["pair"] == "w0 -> w1"
    assert r["worker_a"]["instance_id"] == A_ID and r["worker_b"]["instance_id"] == B_ID
    assert r["worker_b"]["instance_id_str"] == str(B_ID)
    assert r["prompt_tokens"] == 1515
    assert (r["a"]["queries"], r["a"]["hits"]) == (1515, 0)
    assert (r["b"]["queries"], r["b"]["hits"]) == (1515, 1408)
    assert r["b_hit_rate"] == pytest.approx(0.9294, abs=1e-4)
    assert r["b_token_split"] == {"external_kv_transfer": 1408, "local_compute": 107,
                                  "local_cache_hit": 0}
    assert r["request_b"]["cached_tokens"] == 1408 and r["request_a"]["cached_tokens"] == 0
    assert r["texts_identical"] is True
    assert r["cross"]["b_during_a"]["queries"] == 0 and r["cross"]["a_during_b"]["queries"] == 0
    assert r["ttft_a_s"] > 0 and r["ttft_b_s"] > 0 and r["speedup"] is not None
    assert {c["name"]: c["ok"] for c in r["checks"]} == {
        "map_a": True, "map_b": True, "answer_a": True, "answer_b": True, "routed_a": True,
        "routed_b": True, "prompt_tokens": True, "a_no_hits": True, "b_hit_rate": True,
        "b_external_kv_transfer": True, "texts_identical": True, "b_cached_tokens": True}
    assert r["warmup"]["a"]["status"] == 200 and r["warmup"]["b"]["status"] == 200


def test_requests_sent_nonce_first_streaming_targeted(stack):
    s = stack()
    r = s.run(nonce="n0nce-xyz", max_tokens=8)
    posts = s.fe.posts()
    warm, measured = posts[:2], posts[2:]
    # The two warm-ups go out together (either may arrive first), then A's measured prompt, then B's.
    assert sorted(p["nvext"]["backend_instance_id"] for p in warm) == sorted([A_ID, B_ID])
    assert [p["nvext"]["backend_instance_id"] for p in measured] == [A_ID, B_ID]
    assert all(p["prompt"].startswith("warmup-") for p in warm)
    assert all(p["max_tokens"] == 1 for p in warm)
    assert measured[0]["prompt"] == measured[1]["prompt"]
    assert measured[0]["prompt"].startswith("n0nce-xyz ")
    assert len(measured[0]["prompt"].split()) == 1 + 1500
    assert measured[0]["stream"] is True
    assert measured[0]["stream_options"] == {"include_usage": True}
    assert measured[0]["temperature"] == 0 and measured[0]["max_tokens"] == 8
    # exact u64 on the wire
    raw = [b for m, p, b in s.fe.requests if m == "POST"][2]
    assert b'"backend_instance_id": 3496660461086300990' in raw
    assert r["nonce"] == "n0nce-xyz"


def test_random_nonce_differs_per_run(stack):
    s1, s2 = stack(), stack()
    assert s1.run(warmup=False)["nonce"] != s2.run(warmup=False)["nonce"]
    assert len(s1.fe.posts()) == 2


# ---------------------------------------------------------------- failures

def test_b_took_nothing_from_pool(stack):
    b1 = fixture_text("kv_vllm/metrics_b_1.txt")
    b2 = set_value(fixture_text("kv_vllm/metrics_b_2.txt"),
                   "vllm:external_prefix_cache_hits_total", "1408.0")
    b2 = set_value(b2, "vllm:prompt_tokens_by_source_total", "1408.0", "external_kv_transfer")
    b2 = set_value(b2, "vllm:prompt_tokens_by_source_total", "2245.0", "local_compute")
    s = stack(overrides={"metrics_b_1.txt": b1, "metrics_b_2.txt": b2})
    r = s.run()
    assert r["verdict"] == "failed"
    assert ("worker B took 0 of 1,515 tokens from the pool: check that both workers use the "
            "same pool") in reasons(r)
    assert "worker B loaded 0 prompt tokens by external_kv_transfer" in reasons(r)


def test_a_already_had_the_prompt(stack):
    a1 = set_value(fixture_text("kv_vllm/metrics_a_1.txt"),
                   "vllm:external_prefix_cache_hits_total", "1408.0")
    s = stack(overrides={"metrics_a_1.txt": a1, "metrics_a_2.txt": a1})
    r = s.run()
    assert r["verdict"] == "failed"
    assert "worker A already found 1,408 tokens of this prompt in the pool" in reasons(r)


def test_hit_rate_below_threshold(stack):
    r = stack().run(hit_rate_threshold=0.95)
    assert r["verdict"] == "failed"
    assert "worker B took only 1,408 of 1,515 tokens from the pool (hit rate 0.929 < " \
           "threshold 0.950)" in reasons(r)


def test_prompt_too_short(stack):
    r = stack().run(min_prompt_tokens=2000)
    assert r["verdict"] == "failed"
    assert "prompt had only 1,515 tokens, need >= 2,000" in reasons(r)


def test_different_texts(stack):
    sse_b = fixture_text("kv_vllm/sse_b.txt").replace('"text":"spo"', '"text":"xyz"')
    r = stack(sse_overrides={"b": sse_b}).run()
    assert r["verdict"] == "failed" and r["texts_identical"] is False
    assert "A and B produced different texts" in reasons(r)


def test_no_connector_metrics_on_vllm_worker(stack):
    mocker_page = fixture_text("kv_mocker/metrics_a_0.txt")
    # worker_id labels must still map to A and B
    pa = mocker_page.replace("3086a229cb33db0b", "3086a229cb33db3e")
    pb = mocker_page.replace("3086a229cb33db0b", "3086a229cb33db3b")
    ov = {"metrics_a_%d.txt" % i: pa for i in range(3)}
    ov.update({"metrics_b_%d.txt" % i: pb for i in range(3)})
    r = stack(overrides=ov).run()
    assert r["verdict"] == "failed"
    assert "worker w1 exposes no vllm:external_prefix_cache_* counters" in reasons(r)


def test_worker_restarted_during_check(stack):
    s = stack(overrides={"metrics_b_2.txt": fixture_text(
        "vllm_worker_metrics_after_restart.txt")})
    r = s.run()
    assert r["verdict"] == "failed"
    assert "worker w1 counters went backwards during the check" in reasons(r)


def test_request_routed_to_the_wrong_worker(stack):
    # the frontend answers A's request but only B's counters move (routing not direct)
    s = stack(route_to={"a": "b"},
              overrides={"metrics_a_2.txt": fixture_text("kv_vllm/metrics_a_0.txt")})
    r = s.run()
    assert r["verdict"] == "failed"
    assert "request for w0: generate requests rose by 0 on w0 and by 1 on w1" in reasons(r)


def test_unmappable_worker_is_an_error_and_sends_nothing(stack):
    s = stack()
    args = s.args()
    args["worker_b"] = {"name": "w1", "system_url": "http://127.0.0.1:%d" % free_port()}
    r = ksc.run_check(**args)
    assert r["verdict"] == "error"
    assert "worker w1: worker /metrics at" in reasons(r) and "connection error" in reasons(r)
    assert s.fe.posts() == []


def test_same_worker_twice_is_an_error(stack):
    s = stack()
    args = s.args()
    args["worker_b"] = dict(args["worker_a"], name="again")
    r = ksc.run_check(**args)
    assert r["verdict"] == "error" and "are the same instance" in reasons(r)


def test_frontend_down_is_an_error():
    r = ksc.run_check("http://127.0.0.1:%d" % free_port(), "tiny",
                      {"name": "a", "system_url": "http://x"},
                      {"name": "b", "system_url": "http://y"}, request_timeout=2)
    assert r["verdict"] == "error" and "frontend /health" in reasons(r)


# ---------------------------------------------------------------- mocker

def test_mocker_pair_is_not_applicable_but_checks_routing(stack):
    s = stack(engine="mocker", health="frontend_health_with_dead_mocker.json", ids=(M_ID, M2_ID))
    r = s.run(min_prompt_tokens=1500)
    assert r["verdict"] == "not_applicable"
    checks = {c["name"]: c["ok"] for c in r["checks"]}
    assert checks["routed_a"] is True and checks["routed_b"] is True
    assert checks["answer_a"] is True and checks["answer_b"] is True
    assert "engine mocker on w0 and w1" in reasons(r)
    assert r["a"]["queries"] is None and r["a"]["generate_requests"] == 1
    assert r["prompt_tokens"] == 1515


def test_mocker_with_broken_routing_fails(stack):
    s = stack(engine="mocker", health="frontend_health_with_dead_mocker.json", ids=(M_ID, M2_ID),
              route_to={"b": "a"})
    r = s.run()
    assert r["verdict"] == "failed"


# ---------------------------------------------------------------- module entry point

def test_main_passed(stack, capsys):
    rc, out = run_main(stack().args(), capsys)
    assert rc == 0 and out["changed"] is False and not out.get("failed")
    assert out["verdict"] == "passed" and out["report"]["worker_a"]["instance_id"] == A_ID


def test_main_fail_on_unproven(stack, capsys):
    s = stack(engine="mocker", health="frontend_health_with_dead_mocker.json", ids=(M_ID, M2_ID))
    rc, out = run_main(s.args(), capsys)
    assert rc == 1 and out["failed"] is True and out["verdict"] == "not_applicable"
    assert out["msg"].startswith("KV sharing not proven for w0 -> w1: ")
    s2 = stack(engine="mocker", health="frontend_health_with_dead_mocker.json", ids=(M_ID, M2_ID))
    rc, out = run_main(s2.args(fail_on_unproven=False), capsys)
    assert rc == 0 and not out.get("failed") and out["verdict"] == "not_applicable"


def test_main_failed_message(stack, capsys):
    rc, out = run_main(stack().args(min_prompt_tokens=5000), capsys)
    assert rc == 1 and "KV sharing check failed for w0 -> w1" in out["msg"]


def test_main_check_mode_runs(stack, capsys):
    s = stack()
    args = s.args()
    args["_ansible_check_mode"] = True
    rc, out = run_main(args, capsys)
    assert rc == 0 and out["verdict"] == "passed" and len(s.fe.posts()) == 4


@pytest.mark.parametrize("bad,msg", [
    ({"hit_rate_threshold": 1.5}, "hit_rate_threshold"),
    ({"min_prompt_tokens": 0}, "min_prompt_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"nonce": "  "}, "nonce"),
])
def test_main_validation(bad, msg, capsys):
    args = dict(frontend_url="http://127.0.0.1:1", model="tiny",
                worker_a={"name": "a", "system_url": "http://x"},
                worker_b={"name": "b", "system_url": "http://y"})
    args.update(bad)
    rc, out = run_main(args, capsys)
    assert rc == 1 and msg in out["msg"]


def test_build_prompt_deterministic():
    p = ksc.build_prompt("abc", 10)
    assert p == ksc.build_prompt("abc", 10) and p.startswith("abc ")
    assert len(p.split()) == 11 and p != ksc.build_prompt("abd", 10)
    assert re.match(r"^abc( [a-z]+){10}$", p)


# --- waiting for A's KV to land in the pool (store_probe) ----------------------------------------

def fake_time():
    """(clock, sleep): a clock that only moves when slept on."""
    now = [0.0]
    return (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))


def test_wait_stored_returns_once_the_bytes_grew_and_settled():
    readings = iter([100, 100, 300, 500, 500, 500])
    clock, sleep = fake_time()
    value, waited, err = ksc.wait_stored(lambda: next(readings), 100, 30, clock, sleep)
    assert (value, err) == (500, None)
    assert waited == pytest.approx(0.4)  # 5 readings 0.1 s apart


def test_wait_stored_times_out_when_nothing_lands():
    clock, sleep = fake_time()
    value, waited, err = ksc.wait_stored(lambda: 100, 100, 2, clock, sleep)
    assert value == 100 and waited >= 2
    assert err == "no new bytes after 2.0 s (100 before, 100 now)"


def test_wait_stored_reports_a_failing_probe():
    clock, sleep = fake_time()

    def broken():
        raise RuntimeError("rc=1 connection refused")
    dummy, dummy, err = ksc.wait_stored(broken, None, 1, clock, sleep)
    assert err == "pool probe failed: rc=1 connection refused"


def test_pool_bytes_of_one_instance_or_all():
    usage = {"kv_bytes": 900, "instances": {"sb2-vllm-a": {"used": 512}, "sb2-vllm-a-1": {"used": 8},
                                            "sb2-vllm-ab": {"used": 64}, "sb2-vllm-b": {"used": 100}}}
    assert ksc.pool_bytes(usage, "sb2-vllm-a") == 520
    assert ksc.pool_bytes(usage) == 900


def test_store_probe_orders_a_landing_between_then_b(stack):
    """With a pool probe, B is asked only once A's bytes grew and settled, after `between`."""
    s = stack()
    events = []

    def stored():
        # A's request moves the fixture to state 1: its KV "lands" in two steps.
        events.append(("read", s.state))
        return {0: 10, 1: 10 + 64 * min(len([e for e in events if e[1] == 1]), 2)}.get(s.state, 138)

    r = s.run(store_bytes=stored, store_timeout=5, between=lambda: events.append(("between", s.state)))
    assert r["verdict"] == "passed", reasons(r)
    assert r["store"]["before"] == 10 and r["store"]["after"] == 138 and r["store"]["error"] is None
    assert {c["name"]: c["ok"] for c in r["checks"]}["a_stored"] is True
    # The hook ran after A (state 1) and before B's request (which moves the state to 2).
    assert ("between", 1) in events and events.index(("between", 1)) == len(events) - 1


def test_store_probe_that_never_lands_fails_the_pair(stack):
    s = stack()
    r = s.run(store_bytes=lambda: 10, store_timeout=0.5)
    assert r["verdict"] == "failed"
    assert "worker A's KV did not land in the pool: no new bytes after 0.5 s (10 before, 10 now)" in reasons(r)


# --- waiting for A's KV to land in a KVCR tier (store_metric) ---------------------------------------

KVCR_WRITES = {"name": "vllm:kv_offload_tiering_write_bytes_total", "labels": {"tier": "1:kvcr"}}


def _with_kvcr_writes(state, value):
    """A's real kv_vllm page of that state plus the KVCR tier's write counter (tests/fixtures/kvcr)."""
    return fixture_text("kv_vllm/metrics_a_%d.txt" % state) + (
        'vllm:kv_offload_tiering_write_bytes_total{engine="0",model_name="tiny",tier="1:kvcr"} %s\n' % value)


def test_metric_reader_sums_the_kvcr_tier_writes_and_names_a_missing_counter():
    def kvcr_page(name):  # tests/fixtures/kvcr (its README says what is real there)
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "kvcr", name)) as handle:
            return handle.read()
    pages = {"/metrics": kvcr_page("metrics_a_1.txt")}
    site = FakeSite(lambda m, p, b: Reply(200, pages["/metrics"], "text/plain; version=0.0.4"))
    try:
        read = ksc.metric_reader(site.url, KVCR_WRITES["name"], KVCR_WRITES["labels"], 5)
        assert read() == 183500800
        pages["/metrics"] = kvcr_page("metrics_plain.txt")
        with pytest.raises(RuntimeError, match=r"/metrics has no vllm:kv_offload_tiering_write_bytes_total\{\"tier\": \"1:kvcr\"\}"):
            read()
    finally:
        site.close()


def test_main_store_metric_asks_b_once_a_wrote_to_the_kvcr_tier(stack, capsys):
    s = stack(overrides={"metrics_a_0.txt": _with_kvcr_writes(0, "0.0"), "metrics_a_1.txt": _with_kvcr_writes(1, "183500800.0")})
    rc, out = run_main(s.args(store_metric=KVCR_WRITES, store_timeout=5), capsys)
    report = out["report"]
    assert rc == 0 and out["verdict"] == "passed", out["reasons"]
    assert report["store"]["before"] == 0 and report["store"]["after"] == 183500800 and report["store"]["error"] is None
    assert {c["name"]: c["ok"] for c in report["checks"]}["a_stored"] is True


def test_main_store_metric_that_never_grows_fails_the_pair(stack, capsys):
    s = stack(overrides={"metrics_a_0.txt": _with_kvcr_writes(0, "0.0"), "metrics_a_1.txt": _with_kvcr_writes(1, "0.0")})
    rc, out = run_main(s.args(store_metric=KVCR_WRITES, store_timeout=0.5), capsys)
    assert out["verdict"] == "failed"
    assert "worker A's KV did not land in the pool: no new bytes after 0.5 s (0 before, 0 now)" in " | ".join(out["reasons"])


# --- a probe that keeps running (usage --follow) ------------------------------------------------------

# Stands in for `python -m kvshare_maru_connector usage --follow`: one JSON line per stdin line,
# A's bytes 10 for the first two readings, then 138 (A's KV landed).
FOLLOWER = r"""
import json, sys
n = 0
for line in iter(sys.stdin.readline, ""):
    n += 1
    sys.stdout.write(json.dumps({"kv_bytes": 10 if n <= 2 else 138, "instances": {}}) + "\n")
    sys.stdout.flush()
"""


def test_follow_probe_reads_one_line_per_reading():
    probe = maru.UsageFollower([sys.executable, "-c", FOLLOWER], 5)
    try:
        assert [ksc.pool_bytes(probe.read()) for dummy in range(3)] == [10, 10, 138]
    finally:
        probe.close()
    assert probe.proc.returncode == 0


def test_follow_probe_that_exits_names_its_error():
    probe = maru.UsageFollower([sys.executable, "-c", "import sys; sys.stderr.write('no maru_handler'); sys.exit(3)"], 5)
    try:
        with pytest.raises(RuntimeError, match=r"exited \(rc=3\): no maru_handler"):
            probe.read()
    finally:
        probe.close()


def test_pool_bytes_refuses_an_error_reading():
    with pytest.raises(RuntimeError, match="connection reset"):
        ksc.pool_bytes({"error": "maru-server tcp://127.0.0.1:1: connection reset"})


def test_main_store_probe_follow_waits_for_a_landing(stack, capsys):
    rc, out = run_main(stack().args(store_probe=[sys.executable, "-c", FOLLOWER], store_probe_follow=True,
                                    store_timeout=5), capsys)
    store = out["report"]["store"]
    assert rc == 0 and out["verdict"] == "passed", out["reasons"]
    assert store["before"] == 10 and store["after"] == 138 and store["error"] is None


# --- several pairs in one run ----------------------------------------------------------------------

def _pair(a, b, pool):
    return {"pool": pool, "model": "tiny", "worker_a": {"name": a, "system_url": "http://x"},
            "worker_b": {"name": b, "system_url": "http://y"}}


def test_pairs_sharing_a_worker_or_a_pool_share_a_lane():
    pairs = [_pair("sb2/a", "sb2/b", "maru1"), _pair("sb2/a", "sb3/c", "maru1"), _pair("sb3/m", "sb3/n", "mock"),
             _pair("sb4/x", "sb4/y", "maru2"), _pair("sb4/y", "sb3/m", "maru3")]
    # 0-1 share A and the pool; 2, 3 and 4 are joined by 4 (it shares y with 3 and m with 2).
    assert ksc.pair_lanes(pairs) == [[0, 1], [2, 3, 4]]
    assert ksc.pair_lanes(pairs[:4]) == [[0, 1], [2], [3]]
    # Only the pool in common (named pairs may do that): one after the other, the pool's bytes
    # would otherwise grow with the other pair's stores.
    assert ksc.pair_lanes([_pair("sb2/a", "sb2/b", "maru1"), _pair("sb3/c", "sb3/d", "maru1")]) == [[0, 1]]
    assert ksc.pair_lanes([]) == []


def test_lanes_run_side_by_side_and_pairs_in_a_lane_in_order(monkeypatch):
    import threading
    lane2_started = threading.Event()
    order = []

    def fake_check(frontend_url, model, wa, wb, store_bytes=None, **opts):
        order.append(("start", wa["name"], opts["nonce"]))
        if wa["name"] == "sb2/a":
            # Returns only when the other lane has started meanwhile: side by side, not in turn.
            assert lane2_started.wait(5), "the lanes ran one after the other"
        else:
            lane2_started.set()
        if wb["name"] == "boom":
            raise ValueError("bad answer")
        order.append(("end", wa["name"], opts["nonce"]))
        return {"pair": "%s -> %s" % (wa["name"], wb["name"]), "verdict": "passed", "reasons": []}
    monkeypatch.setattr(ksc, "run_check", fake_check)
    pairs = [_pair("sb2/a", "sb2/b", "maru1"), _pair("sb2/a", "sb3/c", "maru1"), _pair("sb3/m", "boom", "mock")]
    reports = ksc.run_pairs("http://fe", pairs, lambda pair: None, {"nonce": "n"})
    assert [r["verdict"] for r in reports] == ["passed", "passed", "error"]
    assert reports[2]["reasons"] == ["the check of sb3/m -> boom stopped: ValueError: bad answer"]
    lane1 = [e for e in order if e[1] == "sb2/a"]
    assert lane1 == [("start", "sb2/a", "n-0"), ("end", "sb2/a", "n-0"), ("start", "sb2/a", "n-1"), ("end", "sb2/a", "n-1")]


def test_main_pairs_reports_each_pair_and_fails_on_the_unproven_one(stack, capsys):
    s = stack()
    good = {"pool": "p1", "model": "tiny", "worker_a": {"name": "w0", "system_url": s.a.url},
            "worker_b": {"name": "w1", "system_url": s.b.url}}
    closed = "http://127.0.0.1:%d" % free_port()
    gone = {"pool": "p2", "model": "tiny", "worker_a": {"name": "g0", "system_url": closed},
            "worker_b": {"name": "g1", "system_url": closed}}
    args = dict(frontend_url=s.fe.url, pairs=[good, gone], settle_s=0.0, metrics_wait_s=0.3, request_timeout=5.0)
    rc, out = run_main(args, capsys)
    assert rc == 1 and out["verdict"] == "error"
    assert [p["verdict"] for p in out["pairs"]] == ["passed", "error"]
    assert out["msg"].startswith("KV sharing not proven for g0 -> g1: worker g0: ")
    assert "w0 -> w1" not in out["msg"]
    args["pairs"] = [good]
    s.state = 0
    rc, out = run_main(dict(args, fail_on_unproven=False), capsys)
    assert rc == 0 and out["verdict"] == "passed" and out["pairs"][0]["report"]["request_a"]["started_at"] > 0


def test_main_pairs_excludes_the_single_pair_options(capsys):
    rc, out = run_main(dict(frontend_url="http://127.0.0.1:1", model="tiny", pairs=[_pair("a", "b", "p")]), capsys)
    assert rc == 1 and "mutually exclusive" in out["msg"]
    rc, out = run_main(dict(frontend_url="http://127.0.0.1:1"), capsys)
    assert rc == 1 and "pairs, worker_a" in out["msg"]
