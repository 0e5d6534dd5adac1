#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kv_share_check
short_description: Prove that one Dynamo vLLM worker reuses KV cache computed by another through the shared pool
description:
  - Cross-instance KV sharing proof for one pair of workers behind a Dynamo 1.6.1 frontend in
    C(--router-mode direct).
  - Instance ids of both workers are re-read at the start, from the worker's C(/metrics)
    C(worker_id="<hex>") label and the frontend's C(/health?instances=true) (see
    M(kvshare.dynamo.dynamo_workers_ready)).
  - Builds a prompt of O(prompt_words) words that starts with O(nonce), so that no earlier run
    (and no other pair) can have stored this prompt's KV in the pool already.
  - For worker A, then worker B, snapshot both workers' C(/metrics), send the prompt as a
    streaming completion through the frontend with C(nvext.backend_instance_id) and
    C(stream_options.include_usage) (the 1.6.1 frontend honours it; a final chunk with
    C(choices=[]) carries C(usage) incl. C(prompt_tokens_details.cached_tokens)), measure time to
    first token and total time, then snapshot both workers again.
  - The proof (verdict V(passed)) requires all of these on vLLM workers; each failed one adds a
    precise reason.
  - B's C(vllm:external_prefix_cache_hits_total) delta divided by its
    C(vllm:external_prefix_cache_queries_total) delta is at least O(hit_rate_threshold).
  - B's C(vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}) delta is greater than 0.
  - A's external hits delta is 0 (A computed the prompt; it did not find it in the pool).
  - The two completion texts are identical (greedy decoding, C(temperature=0)).
  - B's C(usage.prompt_tokens_details.cached_tokens) is greater than 0, where the engine reports it.
  - The prompt had at least O(min_prompt_tokens) tokens.
  - Each request reached the targeted worker, i.e. C(dynamo_component_requests_total{dynamo_endpoint="generate"})
    rose on the target and not on the other worker (skipped when that metric is absent).
  - If either worker's O(worker_a.engine)/O(worker_b.engine) is V(mocker), the verdict is
    V(not_applicable), never V(passed), because the mocker has no KV connector. Routing and answers are
    still checked and reported; if they fail, the verdict is V(failed).
  - Read-only apart from the two completions (plus nothing else); never reports C(changed).
    Concurrent traffic to the same workers can disturb the deltas, so run it on a quiet pair.
  - With O(pairs), one run checks several pairs. Pairs that share a worker or a pool run one after
    another; the others run side by side (a thread each), so one module run on one host replaces
    a run per pair.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  frontend_url:
    description: Base URL of the Dynamo frontend, e.g. C(http://10.0.0.5:8000).
    type: str
    required: true
  model:
    description: Served model name both workers registered. Required without O(pairs).
    type: str
  worker_a:
    description:
      - The worker that computes the prompt first (and stores its KV into the pool). Required
        without O(pairs).
    type: dict
    suboptions: &worker_suboptions
      name:
        description: Label used in the report.
        type: str
        required: true
      system_url:
        description: The worker's system server, C(http://<DYN_SYSTEM_HOST>:<DYN_SYSTEM_PORT>).
        type: str
        required: true
      engine:
        description: The worker's engine. V(mocker) makes the verdict V(not_applicable).
        type: str
        choices: [vllm, mocker]
        default: vllm
      rpc_port:
        description: Pinned request-plane port (C(DYN_TCP_RPC_PORT)); optional cross-check of the id mapping.
        type: int
  worker_b:
    description: The worker that must take the prompt's KV from the pool. Required without O(pairs).
    type: dict
    # The same suboptions as worker_a (a YAML alias of its anchor).
    suboptions: *worker_suboptions
  pairs:
    description:
      - Several pairs in one run, instead of O(model), O(worker_a), O(worker_b) and the store
        options. The other options apply to every pair; a given O(nonce) gets the pair's
        position appended, so that no pair finds another's prompt.
    type: list
    elements: dict
    suboptions:
      pool:
        description: The pool the pair shares; pairs naming the same pool run one after another.
        type: str
        required: true
      model:
        description: As O(model).
        type: str
        required: true
      worker_a:
        description: As O(worker_a).
        type: dict
        required: true
        suboptions: *worker_suboptions
      worker_b:
        description: As O(worker_b).
        type: dict
        required: true
        suboptions: *worker_suboptions
      store_probe:
        description: As O(store_probe).
        type: list
        elements: str
      store_probe_follow:
        description: As O(store_probe_follow).
        type: bool
        default: false
      store_instance_id:
        description: As O(store_instance_id).
        type: str
      store_metric:
        description: As O(store_metric).
        type: dict
        suboptions: &store_metric_suboptions
          name:
            description: Metric name, e.g. C(vllm:kv_offload_tiering_write_bytes_total).
            type: str
            required: true
          labels:
            description: Labels a sample must have, e.g. C(tier=1:kvcr).
            type: dict
            default: {}
  min_prompt_tokens:
    description: The prompt must have at least this many tokens (from C(usage.prompt_tokens)).
    type: int
    default: 1500
  prompt_words:
    description:
      - Number of words after the nonce.
      - Default O(min_prompt_tokens). The words are common English words, each at least one
        token in byte-level BPE and SentencePiece vocabularies (words are not merged across
        spaces), so this yields at least O(min_prompt_tokens) tokens; usually 1.0 to 1.3 times
        that. Raise O(min_prompt_tokens) or lower this if the model's context is small.
    type: int
  max_tokens:
    description: Tokens to generate per request.
    type: int
    default: 8
  nonce:
    description:
      - Text put at the START of the prompt so that earlier runs cannot have pre-seeded the pool
        with this prompt. Default a random 16-hex-digit string per run.
      - A fixed nonce makes runs reproducible, but a second run then finds the prompt in the pool
        on worker A (A's hits > 0) and fails, as it should.
    type: str
  hit_rate_threshold:
    description:
      - Minimum B hit rate (Δhits / Δqueries, in tokens).
      - Connectors hit whole blocks or chunks only. vLLM's ExampleConnector hits
        C(floor((n-2)/block)*block) of n tokens (block 128, n=1500 -> 1408/1500 = 0.94; 600 tokens
        -> 0.85); a chunked pool such as Maru with 256-token chunks reaches about 0.85 at 1500
        tokens, and even 512-token chunks still give 0.68. The default 0.5 leaves that margin
        and still means that most of the prompt came from the pool rather than being recomputed.
    type: float
    default: 0.5
  request_timeout:
    description: Timeout in seconds for each HTTP request (and each read of the stream).
    type: float
    default: 60
  settle_s:
    description:
      - Seconds to wait after A's answer before B's request, for connectors that store KV
        asynchronously, when no O(store_probe) says when A's KV has landed. ExampleConnector
        stores synchronously. Not waited for a mocker pair (it stores nothing).
    type: float
    default: 1.0
  store_probe:
    description:
      - Command (argv) that prints the pool's usage as JSON (C(python -m kvshare_maru_connector
        usage <maru_server_url>)). With it, B's request waits, polling every 0.1 s, until A's
        stored bytes grew and stopped growing (instead of O(settle_s)); the wait is a check.
    type: list
    elements: str
  store_probe_follow:
    description:
      - O(store_probe) keeps running and answers each line written to its stdin with one JSON line
        (C(usage --follow)). It is started once per module run and shared by the pairs that name
        the same command, so a reading costs a round trip to the pool instead of a process start.
    type: bool
    default: false
  store_instance_id:
    description: Pool instance id of worker A (its C(maru_instance_id)); its bytes are watched.
    type: str
  store_metric:
    description:
      - For pools whose store shows only in the engine's metrics (a KVCR tier), the counter of
        worker A (on its O(worker_a.system_url)/metrics, summed over the samples with these labels)
        that grows when A has written KV to the pool. B's request waits, polling every 0.1 s, until
        it grew and stopped growing, as with O(store_probe) (which wins when both are given).
    type: dict
    suboptions: *store_metric_suboptions
  store_timeout:
    description: Seconds to wait for A's KV to land in the pool.
    type: float
    default: 30
  metrics_wait_s:
    description:
      - After each answer, poll the target worker's C(/metrics) for up to this many seconds until
        its prompt-token counters reflect the request.
    type: float
    default: 10.0
  warmup:
    description:
      - Before the measured requests, send each worker one throw-away completion of the same
        length whose prompt starts with a different nonce (so it cannot seed the measured
        prompt). The first long prompt a freshly started worker sees is much slower (seen on
        the CPU stack, 0.25 s vs 0.02 s), which would make the TTFT comparison meaningless.
      - Warm-up answers are reported in RV(report.warmup) but do not decide the verdict.
    type: bool
    default: true
  fail_on_unproven:
    description: Set C(failed) unless the verdict is V(passed) (so also for V(not_applicable)).
    type: bool
    default: true
notes:
  - Check mode is supported; the module runs normally (it only reads and sends two completions).
"""

EXAMPLES = r"""
- name: Prove cross-instance KV sharing w0 -> w1
  kvshare.dynamo.kv_share_check:
    frontend_url: "http://{{ kvshare_bind_address }}:8000"
    model: Qwen/Qwen3-0.6B
    worker_a: {name: w0, system_url: "http://{{ kvshare_bind_address }}:8081"}
    worker_b: {name: w1, system_url: "http://{{ kvshare_bind_address }}:8082"}
  register: kv_share

- name: CI with the mocker (no connector), routing only, never "passed"
  kvshare.dynamo.kv_share_check:
    frontend_url: http://127.0.10.1:8000
    model: tiny
    worker_a: {name: m0, system_url: "http://127.0.10.1:18081", engine: mocker}
    worker_b: {name: m1, system_url: "http://127.0.10.1:18082", engine: mocker}
    min_prompt_tokens: 200
    fail_on_unproven: false
  register: kv_share_mocker
"""

RETURN = r"""
verdict:
  description:
    - V(passed), V(failed), V(not_applicable) (a mocker is involved) or V(error) (could not run).
    - With O(pairs), the worst of the pairs' verdicts (V(error), V(failed), V(not_applicable), V(passed)).
  returned: always
  type: str
pairs:
  description: With O(pairs), one item per pair in their order, each with verdict, reasons and report as below.
  returned: when O(pairs) is given
  type: list
  elements: dict
reasons:
  description: Why the verdict is not V(passed); empty when it is.
  returned: always
  type: list
  elements: str
report:
  description: The full report.
  returned: always
  type: dict
  contains:
    pair:
      description: C("<A name> -> <B name>").
      type: str
    worker_a:
      description: name, system_url, engine, instance_id (int), instance_id_str, mapping_method.
      type: dict
    worker_b:
      description: Same as RV(report.worker_a) for B.
      type: dict
    model:
      description: The model.
      type: str
    nonce:
      description: The nonce at the start of the prompt.
      type: str
    prompt_words:
      description: Words after the nonce.
      type: int
    prompt_tokens:
      description: Prompt tokens of B's request (A's if B has none), from usage or metrics.
      type: int
    min_prompt_tokens:
      description: The required minimum.
      type: int
    request_a:
      description:
        - A's request, status, started_at (epoch seconds), ttft_s, total_s, prompt_tokens,
          completion_tokens, cached_tokens, text, finish_reason, error.
      type: dict
    request_b:
      description: Same as RV(report.request_a) for B.
      type: dict
    a:
      description:
        - Counter deltas on worker A during A's request. queries, hits, external_kv_transfer,
          local_compute, local_cache_hit, hit_rate, generate_requests, missing (metric names
          absent), reset.
      type: dict
    b:
      description: Counter deltas on worker B during B's request (same keys as RV(report.a)).
      type: dict
    cross:
      description: The other worker's deltas during each request (routing evidence), keys b_during_a, a_during_b.
      type: dict
    b_hit_rate:
      description: B's Δhits/Δqueries, null if not measurable.
      type: float
    hit_rate_threshold:
      description: The threshold used.
      type: float
    ttft_a_s:
      description: Time to first token of A's request.
      type: float
    ttft_b_s:
      description: Time to first token of B's request.
      type: float
    total_a_s:
      description: Total time of A's request.
      type: float
    total_b_s:
      description: Total time of B's request.
      type: float
    speedup:
      description: ttft_a_s / ttft_b_s.
      type: float
    b_token_split:
      description: B's prompt tokens by source, local_compute, external_kv_transfer, local_cache_hit.
      type: dict
    texts_identical:
      description: Whether A and B produced the same completion text.
      type: bool
    warmup:
      description: Status, started_at and time of the warm-up request per worker (empty when O(warmup=false)).
      type: dict
    store:
      description:
        - With O(store_probe) or O(store_metric), A's bytes in the pool (or its store counter)
          before its request and when they settled after it, the seconds waited, and the probe's
          error if any. Null without either.
      type: dict
    checks:
      description: Every check, name, ok (true/false/null for skipped), detail.
      type: list
      elements: dict
    verdict:
      description: Same as RV(verdict).
      type: str
    reasons:
      description: Same as RV(reasons).
      type: list
"""

import binascii
import json
import os
import random
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import dynamo_http
from ansible_collections.kvshare.dynamo.plugins.module_utils import maru
from ansible_collections.kvshare.dynamo.plugins.module_utils import prometheus_text as pt
from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers

# Common words; each is >= 1 token in BPE/SentencePiece vocabularies. The list is also the
# vocabulary of the CI tiny model, so there each word is about one token.
WORDS = ("the quick brown fox jumps over lazy dog alpha beta gamma delta epsilon cache "
         "prefix token model worker frontend router block shared memory pool vector "
         "hello world dynamo ansible deploy server client request response metric").split()

GENERATE_REQUESTS = "dynamo_component_requests_total"


def pool_bytes(usage, instance_id=None):
    """Bytes an instance holds in the pool (all KV bytes without an id), from ``usage`` JSON."""
    if usage.get("error"):
        raise RuntimeError(usage["error"])
    if not instance_id:
        return int(usage["kv_bytes"])
    return sum(int(v.get("used", 0)) for k, v in (usage.get("instances") or {}).items()
               if k == instance_id or k.startswith(instance_id + "-"))


def metric_reader(url, name, labels=None, timeout=10.0):
    """A callable returning the current sum of ``name`` (samples with ``labels``) on ``url``'s
    /metrics; it raises when the endpoint does not answer or has no such sample."""
    def read():
        expo, err = _snapshot(url, timeout)
        if expo is None:
            raise RuntimeError(err)
        value = pt.sum_samples(expo, name, dict(labels or {}))
        if value is None:
            raise RuntimeError("%s/metrics has no %s%s" % (url, name, json.dumps(labels or {}, sort_keys=True)))
        return value
    return read


def build_prompt(nonce, words):
    rng = random.Random(nonce)
    return nonce + " " + " ".join(rng.choice(WORDS) for dummy in range(words))


def _num(value):
    """Counter floats -> int when integral (token counts), keep None."""
    if value is None:
        return None
    if float(value).is_integer():
        return int(value)
    return value


def _fmt(n):
    return "{:,}".format(int(n)) if n is not None else "?"


def worker_deltas(before, after, model):
    """Deltas on one worker between two Expositions (either may be None)."""
    out = {"queries": None, "hits": None, "external_kv_transfer": None, "local_compute": None,
           "local_cache_hit": None, "hit_rate": None, "generate_requests": None,
           "missing": [], "reset": False, "metrics_available": before is not None
           and after is not None}
    if before is None or after is None:
        return out
    d = pt.vllm_kv_deltas(before, after, model_name=model)
    for key in ("queries", "hits") + pt.VLLM_PROMPT_SOURCES:
        out[key] = _num(d[key].delta)
    out["hit_rate"] = d["hit_rate"]
    out["missing"] = d["missing"]
    out["reset"] = d["reset"]
    req = pt.counter_delta(before, after, GENERATE_REQUESTS, {"dynamo_endpoint": "generate"})
    out["generate_requests"] = _num(req.delta)
    out["reset"] = out["reset"] or req.reset
    return out


def _snapshot(url, timeout):
    res, expo = dynamo_http.fetch_metrics(url, timeout)
    return expo, (None if expo is not None else res.describe())


def _together(calls):
    """Run the callables at once, one thread each (a vLLM worker's /metrics takes about 70 ms to
    answer; both workers are read around each request). Return their results in order; an
    exception in one is raised here."""
    results = [None] * len(calls)
    errors = []

    def run(pos, call):
        try:
            results[pos] = call()
        except BaseException as exc:  # handed to the caller below
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(pos, call)) for pos, call in enumerate(calls[1:], 1)]
    for thread in threads:
        thread.start()
    run(0, calls[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def _prompt_total(expo, model):
    vals = pt.vllm_kv_counters(expo, model_name=model)
    srcs = [vals[s] for s in pt.VLLM_PROMPT_SOURCES if vals[s] is not None]
    return sum(srcs) if srcs else None


def _generate_count(expo):
    return pt.sum_samples(expo, GENERATE_REQUESTS, {"dynamo_endpoint": "generate"})


def _wait_metrics(url, before, model, engine, prompt_tokens, timeout, wait_s,
                  clock=time.monotonic, sleep=time.sleep):
    """Poll url/metrics until the request shows up (bounded by wait_s). Return (expo, err)."""
    deadline = clock() + wait_s
    while True:
        expo, err = _snapshot(url, timeout)
        if expo is not None and before is not None:
            if engine == "vllm":
                b0, a0 = _prompt_total(before, model), _prompt_total(expo, model)
                if b0 is None or a0 is None:
                    settled = True  # metric absent: nothing to wait for
                elif prompt_tokens:
                    settled = a0 - b0 >= prompt_tokens or a0 < b0
                else:
                    settled = a0 > b0
            else:
                b0, a0 = _generate_count(before), _generate_count(expo)
                settled = b0 is None or a0 is None or a0 != b0
            if settled:
                return expo, None
        if clock() >= deadline:
            return expo, err
        sleep(0.1)


def _request_summary(sr, started_at=None):
    return {
        "status": sr.status,
        "started_at": None if started_at is None else round(started_at, 4),
        "ttft_s": None if sr.ttft_s is None else round(sr.ttft_s, 4),
        "total_s": None if sr.total_s is None else round(sr.total_s, 4),
        "prompt_tokens": sr.prompt_tokens,
        "completion_tokens": sr.completion_tokens,
        "cached_tokens": sr.cached_tokens,
        "usage": sr.usage,
        "text": sr.text,
        "finish_reason": sr.finish_reason,
        "error": sr.error,
        "error_body": (sr.error_body or "")[:300] or None,
        "error_events": sr.error_events[:3],
        "done": sr.done,
    }


class Check:
    def __init__(self):
        self.items = []

    def add(self, name, ok, detail, reason=None):
        self.items.append({"name": name, "ok": ok, "detail": detail,
                           "reason": reason if ok is False else None})

    @property
    def reasons(self):
        return [c["reason"] or c["detail"] for c in self.items if c["ok"] is False]


def wait_stored(read, before, timeout, clock=time.monotonic, sleep=time.sleep, interval=0.1):
    """Poll ``read()`` (bytes in the pool) until it has settled: two equal readings in a row,
    above ``before`` when that is given. Return (value, seconds waited, error or None)."""
    t0 = clock()
    last = None
    while True:
        try:
            value = int(read())
            err = None
        except Exception as exc:  # the probe command or its JSON: report, keep polling
            value, err = None, "pool probe failed: %s" % exc
        if value is not None and value == last and (before is None or value > before):
            return value, round(clock() - t0, 3), None
        last = value
        if clock() - t0 >= timeout:
            if err:
                return value, round(clock() - t0, 3), err
            return value, round(clock() - t0, 3), ("no new bytes after %.1f s (%s before, %s now)"
                                                   % (timeout, _fmt(before), _fmt(value))
                                                   if before is not None else "the reading never settled")
        sleep(interval)


def _new_report(model, wa, wb, nonce, prompt_words, min_prompt_tokens, hit_rate_threshold):
    """The report before anything was measured (every key the result documents)."""
    return {
        "pair": "%s -> %s" % (wa["name"], wb["name"]),
        "model": model,
        "nonce": nonce,
        "prompt_words": prompt_words,
        "min_prompt_tokens": min_prompt_tokens,
        "hit_rate_threshold": hit_rate_threshold,
        "worker_a": {"name": wa["name"], "system_url": wa["system_url"], "engine": wa["engine"]},
        "worker_b": {"name": wb["name"], "system_url": wb["system_url"], "engine": wb["engine"]},
        "prompt_tokens": None,
        "request_a": None, "request_b": None, "a": None, "b": None, "cross": {},
        "b_hit_rate": None, "ttft_a_s": None, "ttft_b_s": None, "total_a_s": None,
        "total_b_s": None, "speedup": None, "b_token_split": None, "texts_identical": None,
        "warmup": {}, "store": None, "checks": [], "verdict": None, "reasons": [],
    }


def _finish(report, checks, verdict, workers):
    """Record the checks and the verdict in the report (reasons only when it did not pass)."""
    report["checks"] = checks.items
    report["reasons"] = checks.reasons if verdict != "passed" else []
    if verdict == "not_applicable":
        report["reasons"] = checks.reasons + [
            "engine mocker on %s: the mocker has no KV connector, so cross-instance KV "
            "sharing cannot be proven (routing and answers were checked)"
            % " and ".join(w["name"] for w in workers if w["engine"] == "mocker")]
    report["verdict"] = verdict
    return report


def _map_workers(frontend_url, workers, report, checks, request_timeout):
    """Step 1: each worker's instance id, re-read now. Return {"a": id, "b": id}, or None (the
    reason is in ``checks``) when either is unknown or unregistered, or both are the same."""
    _res, instances, ferr = dynamo_http.fetch_instances(frontend_url, request_timeout)
    if instances is None:
        checks.add("frontend_instances", False, ferr)
        return None
    ids = {}
    for key, w in zip(("a", "b"), workers):
        m = dynamo_http.map_worker(w["system_url"], instances, request_timeout,
                                   rpc_port=w.get("rpc_port"))
        rep = report["worker_" + key]
        rep["instance_id"] = m.instance_id
        rep["instance_id_str"] = None if m.instance_id is None else str(m.instance_id)
        rep["mapping_method"] = m.method
        if m.instance_id is None:
            checks.add("map_" + key, False, "worker %s: %s" % (w["name"], m.error))
        elif not m.registered:
            checks.add("map_" + key, False, "worker %s (instance %d) is not registered with the "
                       "frontend (not among /health generate instances)"
                       % (w["name"], m.instance_id))
        else:
            checks.add("map_" + key, True, "worker %s is instance %d (%s)"
                       % (w["name"], m.instance_id, m.method))
            ids[key] = m.instance_id
    if len(ids) < 2:
        return None
    if ids["a"] == ids["b"]:
        checks.add("distinct_workers", False, "worker A and worker B are the same instance %d "
                   "(same system_url?)" % ids["a"])
        return None
    return ids


def _warm_up(completions, model, ids, nonce, prompt_words, request_timeout, report):
    """One 1-token request of another prompt to each worker (first-request costs out of the way)."""
    def warm(key):
        wprompt = build_prompt("warmup-%s-%s" % (key, nonce), prompt_words)
        started_at = time.time()
        return started_at, dynamo_http.post_json(completions, dynamo_http.completion_payload(
            model, wprompt, 1, instance_id=ids[key], temperature=0), request_timeout)
    # Both at once: two workers, two prompts (neither is the measured one).
    for key, (started_at, res) in zip(("a", "b"), _together([lambda k=k: warm(k) for k in ("a", "b")])):
        report["warmup"][key] = {"status": res.status, "started_at": round(started_at, 4),
                                 "elapsed_s": round(res.elapsed_s, 4),
                                 "error": None if res.ok else res.describe()}


def _wait_a_stored(store_bytes, report, checks, store_timeout, clock, sleep):
    """Between A and B: wait until A's KV has landed in the pool (more bytes, settled)."""
    store = report["store"]
    store["after"], store["wait_s"], err = wait_stored(store_bytes, store["before"], store_timeout,
                                                       clock, sleep)
    store["error"] = store["error"] or err
    if err:
        checks.add("a_stored", False, "worker A's KV did not land in the pool: %s" % err)
    else:
        checks.add("a_stored", True, "worker A's KV landed in the pool: %s more bytes after %.2f s"
                   % (_fmt(store["after"] - store["before"]), store["wait_s"]))


def _request(target, completions, model, prompt, max_tokens, ids, urls, engines,
             request_timeout, metrics_wait_s, clock, sleep):
    """Send the prompt to ``target`` ("a" or "b") and measure both workers around it.
    Return (the streamed result, {worker key: its metric deltas during the request})."""
    before = {}
    snap_err = {}
    snaps = _together([lambda k=k: _snapshot(urls[k], request_timeout) for k in ("a", "b")])
    for k, snap in zip(("a", "b"), snaps):
        before[k], snap_err[k] = snap
    payload = dynamo_http.completion_payload(model, prompt, max_tokens,
                                             instance_id=ids[target], temperature=0,
                                             stream=True, include_usage=True)
    started_at = time.time()
    sr = dynamo_http.stream_completion(completions, payload, request_timeout)
    sr.started_at = started_at
    after = {}
    other = "b" if target == "a" else "a"
    after[target], err_t = _wait_metrics(urls[target], before[target], model,
                                         engines[target], sr.prompt_tokens,
                                         request_timeout, metrics_wait_s, clock, sleep)
    # Read after the target's counters settled: a request routed to the other worker by mistake
    # has had the same time to show there.
    after[other], err_o = _snapshot(urls[other], request_timeout)
    snap_err[target] = snap_err[target] or err_t
    snap_err[other] = snap_err[other] or err_o
    deltas = {k: worker_deltas(before[k], after[k], model) for k in ("a", "b")}
    for k in ("a", "b"):
        if snap_err[k]:
            deltas[k]["metrics_error"] = snap_err[k]
    return sr, deltas


def _summarise(report, results, deltas):
    """Requests, deltas and timings into the report. Return the prompt's token count (or None)."""
    ra, rb = results["a"], results["b"]
    report["request_a"] = _request_summary(ra, getattr(ra, "started_at", None))
    report["request_b"] = _request_summary(rb, getattr(rb, "started_at", None))
    report["a"] = deltas["a"]["a"]
    report["b"] = deltas["b"]["b"]
    report["cross"] = {"b_during_a": deltas["a"]["b"], "a_during_b": deltas["b"]["a"]}
    report["ttft_a_s"] = report["request_a"]["ttft_s"]
    report["ttft_b_s"] = report["request_b"]["ttft_s"]
    report["total_a_s"] = report["request_a"]["total_s"]
    report["total_b_s"] = report["request_b"]["total_s"]
    if report["ttft_a_s"] and report["ttft_b_s"]:
        report["speedup"] = round(report["ttft_a_s"] / report["ttft_b_s"], 3)
    ptoks = rb.prompt_tokens if rb.prompt_tokens is not None else ra.prompt_tokens
    if ptoks is None:
        ptoks = report["b"]["queries"] if report["b"]["queries"] else report["a"]["queries"]
    report["prompt_tokens"] = ptoks
    return ptoks


def _check_answers(checks, results, names, ids):
    """Step 2: both requests answered 200 with a complete stream."""
    for key in ("a", "b"):
        sr = results[key]
        if sr.ok and sr.status == 200:
            checks.add("answer_" + key, True, "worker %s answered 200 (%s chunks, [DONE])"
                       % (names[key], len(sr.chunks)))
        else:
            checks.add("answer_" + key, False, "request to worker %s (instance %d) failed: %s"
                       % (names[key], ids[key], sr.error or "error events %s" % sr.error_events)
                       + (" body: %s" % sr.error_body[:200] if sr.error_body else ""))


def _check_routing(checks, deltas, names):
    """Step 3: each request raised its target's generate counter, and not the other's."""
    for key in ("a", "b"):
        other = "b" if key == "a" else "a"
        t = deltas[key][key]["generate_requests"]
        o = deltas[key][other]["generate_requests"]
        if t is None or o is None:
            checks.add("routed_" + key, None, "routing not measurable: %s missing on a worker"
                       % GENERATE_REQUESTS)
        elif t >= 1 and o == 0:
            checks.add("routed_" + key, True, "request for %s reached %s only"
                       % (names[key], names[key]))
        else:
            checks.add("routed_" + key, False, "request for %s: generate requests rose by %s on "
                       "%s and by %s on %s (expected >=1 and 0; other traffic, or routing is not "
                       "direct)" % (names[key], t, names[key], o, names[other]))


def _check_prompt_size(checks, ptoks, min_prompt_tokens):
    """Step 4: the prompt was long enough for the hit rate to mean something."""
    if ptoks is None:
        checks.add("prompt_tokens", False, "prompt size unknown: no usage in the answers and no "
                   "vLLM prompt metrics")
    elif ptoks >= min_prompt_tokens:
        checks.add("prompt_tokens", True, "prompt had %s tokens (>= %s)"
                   % (_fmt(ptoks), _fmt(min_prompt_tokens)))
    else:
        checks.add("prompt_tokens", False, "prompt had only %s tokens, need >= %s: raise "
                   "prompt_words" % (_fmt(ptoks), _fmt(min_prompt_tokens)))


def _check_metrics(checks, per_worker, names):
    """Each worker's KV connector counters were readable and did not reset."""
    for key, d in per_worker:
        if not d["metrics_available"]:
            checks.add("metrics_" + key, False, "worker %s /metrics unreadable: %s"
                       % (names[key], d.get("metrics_error")))
        elif "queries" in d["missing"] or "hits" in d["missing"]:
            checks.add("metrics_" + key, False, "worker %s exposes no "
                       "vllm:external_prefix_cache_* counters: no KV connector configured "
                       "(--kv-transfer-config) or not a vLLM worker" % names[key])
        if d["reset"]:
            checks.add("counter_reset_" + key, False, "worker %s counters went backwards during "
                       "the check: the worker restarted" % names[key])


def _check_a_cold(checks, da):
    """Step 5: A computed the prompt itself (nothing of it was in the pool yet)."""
    if da["hits"] is None:
        return
    if da["hits"] == 0:
        checks.add("a_no_hits", True, "worker A took 0 tokens from the pool (cold prefill)")
    else:
        checks.add("a_no_hits", False, "worker A already found %s tokens of this prompt in "
                   "the pool: the prompt was not fresh (fixed nonce reused?), so B's hits "
                   "prove nothing" % _fmt(da["hits"]))


def _check_b_hit_rate(checks, report, db, hit_rate_threshold):
    """Step 6a: B's external prefix cache answered enough of the prompt."""
    rate = db["hit_rate"]
    report["b_hit_rate"] = None if rate is None else round(rate, 4)
    if db["queries"] is None or db["hits"] is None:
        return
    if not db["queries"]:
        checks.add("b_hit_rate", False, "worker B's external prefix cache queries did not "
                   "move: its connector was not consulted (wrong worker, or no connector)")
    elif db["hits"] == 0:
        checks.add("b_hit_rate", False, "worker B took 0 of %s tokens from the pool: check "
                   "that both workers use the same pool (kv_connector_extra_config) and "
                   "that worker A stored its KV" % _fmt(db["queries"]))
    elif rate < hit_rate_threshold:
        checks.add("b_hit_rate", False, "worker B took only %s of %s tokens from the pool "
                   "(hit rate %.3f < threshold %.3f)" % (_fmt(db["hits"]),
                                                         _fmt(db["queries"]), rate,
                                                         hit_rate_threshold))
    else:
        checks.add("b_hit_rate", True, "worker B took %s of %s tokens from the pool (hit "
                   "rate %.3f >= %.3f)" % (_fmt(db["hits"]), _fmt(db["queries"]), rate,
                                           hit_rate_threshold))


def _check_b_transfer(checks, report, db):
    """Step 6b: B loaded prompt tokens by external KV transfer (vLLM's own split of the prompt)."""
    ext = db["external_kv_transfer"]
    report["b_token_split"] = {s: db[s] for s in pt.VLLM_PROMPT_SOURCES}
    if ext is None:
        checks.add("b_external_kv_transfer", False, "worker B has no "
                   "vllm:prompt_tokens_by_source_total{source=\"external_kv_transfer\"}")
    elif ext > 0:
        checks.add("b_external_kv_transfer", True, "worker B: %s prompt tokens from "
                   "external_kv_transfer, %s computed locally" % (_fmt(ext),
                                                                  _fmt(db["local_compute"])))
    else:
        checks.add("b_external_kv_transfer", False, "worker B loaded 0 prompt tokens by "
                   "external_kv_transfer (%s computed locally)" % _fmt(db["local_compute"]))


def _check_texts(checks, texts_identical, ra, rb):
    """Step 7: A and B produced the same greedy answer."""
    if texts_identical is None:
        checks.add("texts_identical", False, "cannot compare texts: a request failed")
    elif texts_identical:
        checks.add("texts_identical", True, "A and B produced the same %d-character text"
                   % len(ra.text))
    else:
        checks.add("texts_identical", False, "A and B produced different texts (A %r, B %r): the "
                   "KV loaded by B does not match what B would compute" % (ra.text[:80],
                                                                           rb.text[:80]))


def _check_cached_tokens(checks, rb):
    """Step 8: B's usage reports cached prompt tokens (where the engine reports them)."""
    cached = rb.cached_tokens
    if cached is None:
        checks.add("b_cached_tokens", None, "engine did not report "
                   "usage.prompt_tokens_details.cached_tokens")
    elif cached > 0:
        checks.add("b_cached_tokens", True, "B's usage reports %s cached prompt tokens"
                   % _fmt(cached))
    else:
        checks.add("b_cached_tokens", False, "B's usage reports 0 cached prompt tokens")


def run_check(frontend_url, model, worker_a, worker_b, min_prompt_tokens=1500,
              prompt_words=None, max_tokens=8, nonce=None, hit_rate_threshold=0.5,
              request_timeout=60.0, settle_s=1.0, metrics_wait_s=10.0, warmup=True,
              clock=time.monotonic, sleep=time.sleep, store_bytes=None, store_timeout=30.0,
              between=None):
    """Run the A -> B proof. Return the report dict (verdict + reasons inside).

    ``store_bytes``: a callable returning A's bytes in the pool (see :func:`wait_stored`).
    ``between``: a callable run after A's KV has landed and right before B's request (tests use it
    to corrupt the pool: the negative control).
    """
    if nonce is None:
        nonce = binascii.hexlify(os.urandom(8)).decode("ascii")
    if prompt_words is None:
        prompt_words = int(min_prompt_tokens)
    wa = dict(worker_a)
    wb = dict(worker_b)
    wa.setdefault("engine", "vllm")
    wb.setdefault("engine", "vllm")
    mocker = "mocker" in (wa["engine"], wb["engine"])
    report = _new_report(model, wa, wb, nonce, prompt_words, min_prompt_tokens, hit_rate_threshold)
    checks = Check()

    # 1. instance ids, re-read now
    ids = _map_workers(frontend_url, (wa, wb), report, checks, request_timeout)
    if ids is None:
        return _finish(report, checks, "error", (wa, wb))

    # The same fresh prompt to A, then (once A's KV has landed) to B.
    prompt = build_prompt(nonce, prompt_words)
    urls = {"a": wa["system_url"], "b": wb["system_url"]}
    engines = {"a": wa["engine"], "b": wb["engine"]}
    names = {"a": wa["name"], "b": wb["name"]}
    completions = dynamo_http.join_url(frontend_url, "/v1/completions")
    if warmup:
        _warm_up(completions, model, ids, nonce, prompt_words, request_timeout, report)
    if store_bytes is not None:
        stored_before, dummy, err = wait_stored(store_bytes, None, store_timeout, clock, sleep)
        report["store"] = {"before": stored_before, "after": None, "wait_s": None, "error": err}
    results = {}
    deltas = {}
    for target in ("a", "b"):
        if target == "b" and store_bytes is not None:
            _wait_a_stored(store_bytes, report, checks, store_timeout, clock, sleep)
        elif target == "b" and settle_s > 0 and not mocker:
            sleep(settle_s)  # a mocker stores nothing: nothing to settle
        if target == "b" and between is not None:
            between()
        results[target], deltas[target] = _request(target, completions, model, prompt, max_tokens,
                                                   ids, urls, engines, request_timeout,
                                                   metrics_wait_s, clock, sleep)
    ra, rb = results["a"], results["b"]
    ptoks = _summarise(report, results, deltas)

    # 2. answers, 3. routing
    _check_answers(checks, results, names, ids)
    _check_routing(checks, deltas, names)

    texts_identical = (ra.text == rb.text) if (ra.ok and rb.ok) else None
    report["texts_identical"] = texts_identical

    if mocker:
        checks.add("texts_identical", None, "not meaningful with the mocker (empty texts)")
        routing_failed = any(c["ok"] is False for c in checks.items)
        return _finish(report, checks, "failed" if routing_failed else "not_applicable", (wa, wb))

    # 4. prompt size, then the KV proof proper: 5. A cold, 6. B from the pool, 7. same answer,
    # 8. B's cached tokens.
    _check_prompt_size(checks, ptoks, min_prompt_tokens)
    da, db = report["a"], report["b"]
    _check_metrics(checks, (("a", da), ("b", db)), names)
    _check_a_cold(checks, da)
    _check_b_hit_rate(checks, report, db, hit_rate_threshold)
    _check_b_transfer(checks, report, db)
    _check_texts(checks, texts_identical, ra, rb)
    _check_cached_tokens(checks, rb)

    failed = any(c["ok"] is False for c in checks.items)
    return _finish(report, checks, "failed" if failed else "passed", (wa, wb))


def pair_lanes(pairs):
    """Lanes of pair positions: pairs that share a worker (by name) or a pool are in one lane, in
    their order; lanes share nothing, so they can run side by side."""
    return _workers.linked_groups(pairs, lambda pair: [("pool", pair.get("pool"))] + [
        ("worker", pair[w]["name"]) for w in ("worker_a", "worker_b")])


VERDICT_ORDER = ("error", "failed", "not_applicable", "passed")


def _error_report(pair, exc):
    name = "%s -> %s" % (pair["worker_a"]["name"], pair["worker_b"]["name"])
    return {"pair": name, "verdict": "error", "checks": [],
            "reasons": ["the check of %s stopped: %s: %s" % (name, type(exc).__name__, exc)]}


def run_pairs(frontend_url, pairs, store_reader, options):
    """Check every pair, lanes side by side (see pair_lanes). ``store_reader(pair)`` gives the
    pair's store_bytes callable (or None); ``options`` are run_check's other keyword arguments.
    Return the reports in the pairs' order."""
    reports = [None] * len(pairs)

    def lane(positions):
        for pos in positions:
            pair = pairs[pos]
            opts = dict(options)
            if opts.get("nonce") is not None and len(pairs) > 1:
                opts["nonce"] = "%s-%d" % (opts["nonce"], pos)
            try:
                reports[pos] = run_check(frontend_url, pair["model"], pair["worker_a"], pair["worker_b"],
                                         store_bytes=store_reader(pair), **opts)
            except Exception as exc:  # one pair's crash is that pair's error, not the run's
                reports[pos] = _error_report(pair, exc)
    _together([lambda lane_positions=positions: lane(lane_positions) for positions in pair_lanes(pairs)])
    return reports


def main():
    worker_opts = dict(
        name=dict(type="str", required=True),
        system_url=dict(type="str", required=True),
        engine=dict(type="str", choices=["vllm", "mocker"], default="vllm"),
        rpc_port=dict(type="int"),
    )
    metric_opts = dict(name=dict(type="str", required=True), labels=dict(type="dict", default={}))
    # How B waits for A's KV to land: per pair, in O(pairs) items or beside a single pair.
    store_opts = dict(
        store_probe=dict(type="list", elements="str"),
        store_probe_follow=dict(type="bool", default=False),
        store_instance_id=dict(type="str"),
        store_metric=dict(type="dict", options=metric_opts),
    )
    module = AnsibleModule(
        argument_spec=dict(
            frontend_url=dict(type="str", required=True),
            model=dict(type="str"),
            worker_a=dict(type="dict", options=worker_opts),
            worker_b=dict(type="dict", options=worker_opts),
            pairs=dict(type="list", elements="dict", options=dict(
                pool=dict(type="str", required=True),
                model=dict(type="str", required=True),
                worker_a=dict(type="dict", required=True, options=worker_opts),
                worker_b=dict(type="dict", required=True, options=worker_opts),
                **store_opts
            )),
            min_prompt_tokens=dict(type="int", default=1500, no_log=False),
            prompt_words=dict(type="int"),
            max_tokens=dict(type="int", default=8, no_log=False),
            nonce=dict(type="str"),
            hit_rate_threshold=dict(type="float", default=0.5),
            request_timeout=dict(type="float", default=60.0),
            settle_s=dict(type="float", default=1.0),
            metrics_wait_s=dict(type="float", default=10.0),
            warmup=dict(type="bool", default=True),
            store_timeout=dict(type="float", default=30.0),
            fail_on_unproven=dict(type="bool", default=True),
            **store_opts
        ),
        # store_probe_follow has a default, so it is left out.
        mutually_exclusive=[("pairs", x) for x in ("model", "worker_a", "worker_b", "store_probe",
                                                   "store_instance_id", "store_metric")],
        required_one_of=[("pairs", "worker_a")],
        required_together=[("model", "worker_a", "worker_b")],
        supports_check_mode=True,
    )
    p = module.params
    if p["min_prompt_tokens"] < 1:
        module.fail_json(msg="min_prompt_tokens must be >= 1")
    if p["prompt_words"] is not None and p["prompt_words"] < 1:
        module.fail_json(msg="prompt_words must be >= 1")
    if p["max_tokens"] < 1:
        module.fail_json(msg="max_tokens must be >= 1")
    if not 0 < p["hit_rate_threshold"] <= 1:
        module.fail_json(msg="hit_rate_threshold must be in (0, 1]")
    if p["request_timeout"] <= 0:
        module.fail_json(msg="request_timeout must be > 0")
    if p["nonce"] is not None and not p["nonce"].strip():
        module.fail_json(msg="nonce must not be blank")

    single = not p["pairs"]
    pairs = p["pairs"] or [dict((k, p[k]) for k in ["model", "worker_a", "worker_b"] + list(store_opts))]
    followers = {}
    follow_lock = threading.Lock()

    def store_reader(pair):
        if pair["store_probe"]:
            argv = tuple(pair["store_probe"])

            def store_bytes():
                if pair["store_probe_follow"]:
                    with follow_lock:
                        if argv not in followers:
                            followers[argv] = maru.UsageFollower(argv, p["request_timeout"])
                    return pool_bytes(followers[argv].read(), pair["store_instance_id"])
                rc, out, err = module.run_command(list(argv))
                if rc != 0:
                    raise RuntimeError("rc=%d %s" % (rc, (err or out).strip()[-300:]))
                return pool_bytes(json.loads(out), pair["store_instance_id"])
            return store_bytes
        if pair["store_metric"]:
            return metric_reader(pair["worker_a"]["system_url"], pair["store_metric"]["name"],
                                 pair["store_metric"]["labels"], p["request_timeout"])
        return None

    options = dict(min_prompt_tokens=p["min_prompt_tokens"], prompt_words=p["prompt_words"],
                   max_tokens=p["max_tokens"], nonce=p["nonce"], hit_rate_threshold=p["hit_rate_threshold"],
                   request_timeout=p["request_timeout"], settle_s=max(p["settle_s"], 0.0),
                   metrics_wait_s=max(p["metrics_wait_s"], 0.0), warmup=p["warmup"],
                   store_timeout=p["store_timeout"])
    try:
        if single:
            reports = [run_check(p["frontend_url"], pairs[0]["model"], pairs[0]["worker_a"], pairs[0]["worker_b"],
                                 store_bytes=store_reader(pairs[0]), **options)]
        else:
            reports = run_pairs(p["frontend_url"], pairs, store_reader, options)
    finally:
        for follower in followers.values():
            follower.close()
    verdict = min((r["verdict"] for r in reports), key=VERDICT_ORDER.index)
    if single:
        report = reports[0]
        out = dict(changed=False, verdict=report["verdict"], reasons=report["reasons"], report=report)
    else:
        out = dict(changed=False, verdict=verdict, reasons=[x for r in reports for x in r["reasons"]],
                   pairs=[dict(verdict=r["verdict"], reasons=r["reasons"], report=r) for r in reports])
    unproven = [r for r in reports if r["verdict"] != "passed"]
    if p["fail_on_unproven"] and unproven:
        module.fail_json(msg="; ".join("KV sharing %s for %s: %s" % (
            "not proven" if r["verdict"] != "failed" else "check failed",
            r["pair"], "; ".join(r["reasons"])) for r in unproven), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
