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
module: kvcr_guard_check
short_description: The HTTP side of the KVCR Guard-recovery check (seed, wait-gone, recover)
description:
  - Talks to a running Dynamo 1.6.1 frontend (C(--router-mode kv)) and to the system servers
    (C(DYN_SYSTEM_PORT) C(/metrics)) of exactly two KVCR workers. Used by C(playbooks/guard_recovery.yml);
    the host side (holding the restart, killing the engine, RDMA counters) is done by other tasks.
  - V(seed) snapshots both workers' metrics, sends a long chat request through the frontend and polls
    until exactly one worker shows Δ C(vllm:kvcr_transfer_blocks_total{operation="local_fill"}) > 0 and
    Δ C(vllm:kv_offload_tiering_write_bytes_total{tier="1:kvcr"}) > 0. That worker is the B(source)
    (its Guard holds the prefix); the other, untouched one is the B(target).
  - V(gone) waits until the frontend's C(/health?instances=true) no longer lists O(instance_id).
  - V(recover) sends the same request again and requires the same answer, then polls the target until
    Δ C(remote_deliver) blocks, Δ C(vllm:kv_offload_tiering_read_bytes_total{tier="1:kvcr"}) and
    Δ C(vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}) are all > 0.
  - Stdlib only; environment proxies are ignored.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  phase:
    description: Which step to run.
    type: str
    required: true
    choices: [seed, gone, recover]
  frontend_url:
    description: Base URL of the frontend, e.g. C(http://10.0.1.11:8000).
    type: str
    required: true
  model:
    description: Served model name (V(seed), V(recover)).
    type: str
  workers:
    description: The two KVCR workers (V(seed)) or the target alone (V(recover)).
    type: list
    elements: dict
    suboptions:
      name:
        description: Label (the inventory host).
        type: str
        required: true
      system_url:
        description: C(http://<DYN_SYSTEM_HOST>:<DYN_SYSTEM_PORT>).
        type: str
        required: true
      rpc_port:
        description: Pinned request-plane port, cross-checks the instance id mapping.
        type: int
  prompt:
    description: The user message; V(seed) builds one when omitted (a nonce, then O(prompt_repeat) sentences).
    type: str
  prompt_repeat:
    description: Repetitions of the filler sentence in a built prompt (the seed uses 600).
    type: int
    default: 600
  max_tokens:
    description: Tokens to generate (temperature 0).
    type: int
    default: 32
  baseline:
    description: The answer of the seed request (V(recover) requires the same).
    type: str
  instance_id:
    description: Instance id that must leave discovery (V(gone)); decimal string or int.
    type: str
  timeout:
    description: Seconds to wait for the metrics (V(seed), V(recover)) or the departure (V(gone)).
    type: float
    default: 60
  interval:
    description: Seconds between polls.
    type: float
    default: 1
  request_timeout:
    description: Timeout of the chat request, seconds.
    type: float
    default: 120
"""

EXAMPLES = r"""
- name: Seed the prefix and find source and target
  kvshare.dynamo.kvcr_guard_check:
    phase: seed
    frontend_url: http://10.0.1.11:8000
    model: Qwen/Qwen3-0.6B
    workers:
      - {name: gpu-a, system_url: "http://10.0.1.11:9090"}
      - {name: gpu-b, system_url: "http://10.0.1.12:9090"}
  register: seed
"""

RETURN = r"""
source:
  description: The worker the first request seeded (V(seed)).
  type: str
  returned: success
target:
  description: The other worker (V(seed)).
  type: str
  returned: success
prompt:
  description: The prompt sent (V(seed)).
  type: str
  returned: success
baseline:
  description: The seed answer (V(seed)).
  type: str
  returned: success
answer:
  description: The answer after the engine kill (V(recover)).
  type: str
  returned: success
deltas:
  description: Per-worker counter deltas (V(seed)) or the target's (V(recover)).
  type: dict
  returned: success
instances:
  description: Instance id (string) of each worker at seed time (V(seed)).
  type: dict
  returned: success
errors:
  description: Why the step failed.
  type: list
  returned: failure
"""

import time
import uuid

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import dynamo_http
from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_guard

FILLER = "KVCR resiliency validation preserves this numbered cache prefix. "
QUESTION = "Reply with one short sentence confirming that the prefix was received."


def build_prompt(repeat, nonce=None):
    """A long prompt; the nonce first, so earlier runs cannot have seeded any cache with it."""
    nonce = nonce or uuid.uuid4().hex[:16]
    return "[%s] " % nonce + FILLER * int(repeat) + QUESTION


def chat(frontend_url, model, prompt, max_tokens, timeout, post=dynamo_http.post_json):
    """One non-streamed chat completion. Returns (content or None, error or None)."""
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}],
               "max_tokens": int(max_tokens), "temperature": 0.0, "stream": False}
    res = post(dynamo_http.join_url(frontend_url, "/v1/chat/completions"), payload, timeout)
    if not res.ok:
        return None, "chat request: %s" % res.describe()
    doc = res.json_or_none()
    try:
        content = doc["choices"][0]["message"]["content"]
    except (TypeError, KeyError, IndexError):
        return None, "chat request: answer has no choices[0].message.content: %s" % res.excerpt()
    if not content:
        return None, "chat request: empty answer"
    return content, None


def _metrics(worker, fetch):
    res, expo = fetch(worker["system_url"])
    if expo is None:
        return None, "%s /metrics: %s" % (worker["name"], res.describe())
    return expo, None


def poll(check, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Call check() -> (done, value) until done or timeout; returns the last value."""
    deadline = clock() + timeout
    while True:
        done, value = check()
        if done or clock() >= deadline:
            return done, value
        sleep(interval)


def run_seed(p, fetch=dynamo_http.fetch_metrics, post=dynamo_http.post_json, clock=time.monotonic, sleep=time.sleep):
    workers = p["workers"]
    out = {"errors": []}
    before, instances = {}, {}
    for w in workers:
        expo, err = _metrics(w, fetch)
        if err:
            out["errors"].append(err)
            continue
        before[w["name"]] = expo
        ids = dynamo_http.worker_ids_from_metrics(expo)
        if len(ids) != 1:
            # The gone phase waits for one instance id to leave discovery: guessing one is no proof.
            out["errors"].append("%s /metrics at %s names %d instance ids (%s): the check needs exactly one "
                                 "worker behind each system port" % (w["name"], w["system_url"], len(ids),
                                                                     ", ".join("%x" % i for i in sorted(ids)) or "none"))
            continue
        instances[w["name"]] = str(ids[0])
    out["instances"] = instances
    if out["errors"]:
        return out
    prompt = p.get("prompt") or build_prompt(p["prompt_repeat"])
    out["prompt"] = prompt
    content, err = chat(p["frontend_url"], p["model"], prompt, p["max_tokens"], p["request_timeout"], post)
    if err:
        out["errors"].append(err)
        return out
    out["baseline"] = content
    state = {}

    def check():
        seed = {}
        for w in workers:
            expo, err = _metrics(w, fetch)
            if err:
                return False, [err]
            seed[w["name"]] = kvcr_guard.deltas(before[w["name"]], expo)
        state["deltas"] = seed
        source, target, errors = kvcr_guard.identify_source(seed)
        state.update(source=source, target=target)
        # A seeded target is final; "not exactly one yet" may still settle.
        final = any("seeded by the first request too" in e for e in errors)
        return source is not None or final, errors

    _done, errors = poll(check, p["timeout"], p["interval"], clock, sleep)
    out["deltas"] = state.get("deltas", {})
    out["source"], out["target"] = state.get("source"), state.get("target")
    out["errors"].extend(errors)
    return out


def run_gone(p, get=dynamo_http.fetch_instances, clock=time.monotonic, sleep=time.sleep):
    want = dynamo_http.as_instance_id(p["instance_id"])
    state = {}

    def check():
        _res, instances, err = get(p["frontend_url"])
        if err:
            state["last"] = err
            return False, err
        ids = [i["instance_id"] for i in instances]
        state["listed"] = [str(i) for i in ids]
        return want not in ids, None

    done, dummy = poll(check, p["timeout"], p["interval"], clock, sleep)
    out = {"errors": [], "listed": state.get("listed", [])}
    if not done:
        out["errors"].append("instance %s is still listed by the frontend after %.0f s%s"
                             % (want, p["timeout"], (": " + state["last"]) if state.get("last") else ""))
    return out


def run_recover(p, fetch=dynamo_http.fetch_metrics, post=dynamo_http.post_json, clock=time.monotonic, sleep=time.sleep):
    target = p["workers"][0]
    out = {"errors": []}
    before, err = _metrics(target, fetch)
    if err:
        out["errors"].append(err)
        return out
    content, err = chat(p["frontend_url"], p["model"], p["prompt"], p["max_tokens"], p["request_timeout"], post)
    if err:
        out["errors"].append(err)
        return out
    out["answer"] = content
    if content != p["baseline"]:
        out["errors"] = kvcr_guard.recovery_errors(p["baseline"], content, {})[:1]
        return out
    state = {}

    def check():
        expo, err = _metrics(target, fetch)
        if err:
            return False, [err]
        state["deltas"] = kvcr_guard.deltas(before, expo)
        errors = kvcr_guard.recovery_errors(p["baseline"], content, state["deltas"])
        return not errors or state["deltas"].get("reset"), errors

    _done, errors = poll(check, p["timeout"], p["interval"], clock, sleep)
    out["deltas"] = state.get("deltas", {})
    out["errors"].extend(errors)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            phase=dict(type="str", required=True, choices=["seed", "gone", "recover"]),
            frontend_url=dict(type="str", required=True),
            model=dict(type="str"),
            workers=dict(type="list", elements="dict", options=dict(
                name=dict(type="str", required=True),
                system_url=dict(type="str", required=True),
                rpc_port=dict(type="int"),
            )),
            prompt=dict(type="str"),
            prompt_repeat=dict(type="int", default=600),
            max_tokens=dict(type="int", default=32, no_log=False),
            baseline=dict(type="str"),
            instance_id=dict(type="str"),
            timeout=dict(type="float", default=60.0),
            interval=dict(type="float", default=1.0),
            request_timeout=dict(type="float", default=120.0),
        ),
        required_if=[
            ("phase", "seed", ("model", "workers")),
            ("phase", "gone", ("instance_id",)),
            ("phase", "recover", ("model", "workers", "prompt", "baseline")),
        ],
        supports_check_mode=False,
    )
    p = module.params
    if p["phase"] == "seed":
        if len(p["workers"]) != 2:
            module.fail_json(msg="seed needs exactly two workers (got %d)" % len(p["workers"]))
        out = run_seed(p)
    elif p["phase"] == "gone":
        out = run_gone(p)
    else:
        if len(p["workers"]) != 1:
            module.fail_json(msg="recover takes the target worker alone (got %d)" % len(p["workers"]))
        out = run_recover(p)
    if out["errors"]:
        module.fail_json(msg="kvcr_guard_check %s: %s" % (p["phase"], "; ".join(out["errors"])), **out)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
