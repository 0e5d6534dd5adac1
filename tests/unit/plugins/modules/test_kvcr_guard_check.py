# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""kvcr_guard_check phases on the KVCR metric fixtures (fake fetch/post; the clock never sleeps)."""
import json
import os

from ansible_collections.kvshare.dynamo.plugins.module_utils import prometheus_text
from ansible_collections.kvshare.dynamo.plugins.modules import kvcr_guard_check as kgc

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "kvcr")
WORKERS = [{"name": "gpu-a", "system_url": "http://10.0.1.11:9090"},
           {"name": "gpu-b", "system_url": "http://10.0.1.12:9090"}]


def page(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


class Res:
    def __init__(self, status=200, body=None):
        self.status = status
        self.body = body

    @property
    def ok(self):
        return self.status == 200

    def json_or_none(self):
        return self.body

    def describe(self):
        return "HTTP %s" % self.status

    def excerpt(self):
        return json.dumps(self.body)[:80]


class Stack:
    """Each worker serves a sequence of pages; the last one repeats. Posts answer `answers` in turn."""

    def __init__(self, pages, answers):
        self.pages = dict((k, list(v)) for k, v in pages.items())
        self.answers = list(answers)
        self.posts = []

    def fetch(self, url):
        seq = self.pages[url]
        text = seq.pop(0) if len(seq) > 1 else seq[0]
        if text is None:
            return Res(503), None
        return Res(), prometheus_text.parse(text)

    def post(self, url, payload, timeout):
        self.posts.append((url, payload))
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            return Res(answer, {"message": "x"})
        return Res(200, {"choices": [{"message": {"content": answer}}]})


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def params(**kw):
    p = {"frontend_url": "http://10.0.1.11:8000", "model": "Qwen/Qwen3-0.6B", "workers": WORKERS, "prompt": None,
         "prompt_repeat": 600, "max_tokens": 32, "timeout": 10.0, "interval": 1.0, "request_timeout": 5.0}
    p.update(kw)
    return p


def test_seed_identifies_source_after_the_metrics_settle():
    clock = Clock()
    stack = Stack({"http://10.0.1.11:9090": [page("metrics_a_0.txt"), page("metrics_a_0.txt"), page("metrics_a_1.txt")],
                   "http://10.0.1.12:9090": [page("metrics_b_0.txt"), page("metrics_b_1.txt")]}, ["Received."])
    out = kgc.run_seed(params(), fetch=stack.fetch, post=stack.post, clock=clock, sleep=clock.sleep)
    assert out["errors"] == [] and (out["source"], out["target"]) == ("gpu-a", "gpu-b")
    assert out["baseline"] == "Received."
    assert out["deltas"]["gpu-a"]["local_fill"] == 100.0
    assert out["instances"] == {"gpu-a": str(0x3086a229cb33db3e), "gpu-b": str(0x3086a229cb33dd1a)}
    url, payload = stack.posts[0]
    assert url == "http://10.0.1.11:8000/v1/chat/completions"
    assert payload["temperature"] == 0.0 and payload["stream"] is False and payload["max_tokens"] == 32
    prompt = payload["messages"][0]["content"]
    assert prompt.startswith("[") and prompt.count(kgc.FILLER) == 600 and out["prompt"] == prompt
    assert clock.t == 1.0


def test_seed_times_out_without_a_kvcr_tier():
    clock = Clock()
    stack = Stack({"http://10.0.1.11:9090": [page("metrics_plain.txt")],
                   "http://10.0.1.12:9090": [page("metrics_b_0.txt")]}, ["Received."])
    out = kgc.run_seed(params(), fetch=stack.fetch, post=stack.post, clock=clock, sleep=clock.sleep)
    assert out["source"] is None and "found 0 (none)" in out["errors"][0]
    assert clock.t >= 10.0


def test_seed_reports_a_failed_request_and_dead_metrics():
    stack = Stack({"http://10.0.1.11:9090": [page("metrics_a_0.txt")],
                   "http://10.0.1.12:9090": [page("metrics_b_0.txt")]}, [503])
    assert kgc.run_seed(params(), fetch=stack.fetch, post=stack.post)["errors"] == ["chat request: HTTP 503"]
    dead = Stack({"http://10.0.1.11:9090": [None], "http://10.0.1.12:9090": [page("metrics_b_0.txt")]}, [])
    assert kgc.run_seed(params(), fetch=dead.fetch, post=dead.post)["errors"] == ["gpu-a /metrics: HTTP 503"]


def recover_params(**kw):
    return params(workers=[WORKERS[1]], prompt="p", baseline="Received.", **kw)


def test_recover_passes_on_remote_delivery():
    clock = Clock()
    stack = Stack({"http://10.0.1.12:9090": [page("metrics_b_1.txt"), page("metrics_b_1.txt"), page("metrics_b_2.txt")]},
                  ["Received."])
    out = kgc.run_recover(recover_params(), fetch=stack.fetch, post=stack.post, clock=clock, sleep=clock.sleep)
    assert out["errors"] == [] and out["answer"] == "Received."
    assert (out["deltas"]["remote_deliver"], out["deltas"]["tier_read_bytes"], out["deltas"]["external_tokens"]) == (
        100.0, 183500800.0, 6400.0)


def test_recover_fails_on_a_different_answer_or_a_local_recompute():
    stack = Stack({"http://10.0.1.12:9090": [page("metrics_b_1.txt"), page("metrics_b_2.txt")]}, ["Something else."])
    out = kgc.run_recover(recover_params(), fetch=stack.fetch, post=stack.post)
    assert len(out["errors"]) == 1 and "differs from the baseline" in out["errors"][0]
    clock = Clock()
    recompute = Stack({"http://10.0.1.12:9090": [page("metrics_b_1.txt")]}, ["Received."])
    out = kgc.run_recover(recover_params(), fetch=recompute.fetch, post=recompute.post, clock=clock, sleep=clock.sleep)
    assert len(out["errors"]) == 3 and all("is 0 on the target" in e for e in out["errors"])


def test_gone_waits_for_the_instance_to_leave():
    answers = [[{"instance_id": 5}, {"instance_id": 7}], [{"instance_id": 7}]]

    def get(url):
        return None, answers.pop(0) if len(answers) > 1 else answers[0], None
    clock = Clock()
    out = kgc.run_gone({"frontend_url": "u", "instance_id": "5", "timeout": 5.0, "interval": 1.0}, get=get,
                       clock=clock, sleep=clock.sleep)
    assert out == {"errors": [], "listed": ["7"]}
    stuck = kgc.run_gone({"frontend_url": "u", "instance_id": "7", "timeout": 3.0, "interval": 1.0},
                         get=get, clock=clock, sleep=clock.sleep)
    assert "still listed" in stuck["errors"][0]


def test_seed_refuses_a_worker_whose_metrics_name_several_instances():
    # Two worker_id values behind one system port: no instance can be chosen for the gone phase.
    extra = page("metrics_a_0.txt").replace("3086a229cb33db3e", "00000000000000aa")
    stack = Stack({"http://10.0.1.11:9090": [page("metrics_a_0.txt") + extra],
                   "http://10.0.1.12:9090": [page("metrics_b_0.txt")]}, ["Received."])
    out = kgc.run_seed(params(), fetch=stack.fetch, post=stack.post)
    assert len(out["errors"]) == 1 and "gpu-a /metrics at http://10.0.1.11:9090 names 2 instance ids" in out["errors"][0]
    assert "aa" in out["errors"][0] and out["instances"] == {"gpu-b": str(0x3086a229cb33dd1a)}
    assert stack.posts == []
