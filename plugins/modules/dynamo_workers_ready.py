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
module: dynamo_workers_ready
short_description: Wait until Dynamo workers are registered with the frontend and answer direct-routed requests
description:
  - Polls a running NVIDIA Dynamo 1.6.1 frontend (started with C(--router-mode direct)) and the
    system servers (C(DYN_SYSTEM_PORT)) of a list of workers until every worker is ready or the
    deadline passes. All workers are checked in every round, so one task waits for many workers.
  - A worker is B(registered) when its instance id appears in the frontend's
    C(GET /health?instances=true) with C(endpoint == "generate").
  - The instance id of a worker is read from the C(worker_id="<hex>") label on the worker's own
    C(/metrics) (hex of the instance id, i.e. the etcd lease id). It is there as soon as the
    worker's system server answers, before the worker registers, and needs no traffic.
    When C(rpc_port) is given (the worker pins its request-plane port with C(DYN_TCP_RPC_PORT)),
    the port in the instance's C(transport.tcp) address must agree, else the mapping is refused.
  - A worker is B(ready) when it is registered and, with O(completion_probe=true), a
    direct-routed 1-token completion C(POST /v1/completions) with the body
    C({"model":"<model>","prompt":"hi","max_tokens":1,"temperature":0,"nvext":{"backend_instance_id":<id>}})
    answers HTTP 200.
  - Instance ids exceed 2**53. They are returned as exact integers and as strings; do not pass
    them through tools that parse JSON numbers as doubles (jq 1.6).
  - Stdlib only (urllib); environment proxies are ignored for these requests.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  frontend_url:
    description: Base URL of the Dynamo frontend HTTP service, e.g. C(http://10.0.0.5:8000).
    type: str
    required: true
  workers:
    description: Workers to wait for.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: A label for the worker, used in results and messages.
        type: str
        required: true
      model:
        description: The served model name the worker registered (used for the probe).
        type: str
        required: true
      system_url:
        description: The worker's system server, C(http://<DYN_SYSTEM_HOST>:<DYN_SYSTEM_PORT>).
        type: str
        required: true
      rpc_port:
        description:
          - The worker's request-plane TCP port when pinned with C(DYN_TCP_RPC_PORT).
          - Optional cross-check of the metrics-based mapping (see description).
        type: int
      completion_probe:
        description:
          - This worker's own O(completion_probe), for a mixed list. A re-run passes V(false) for a
            worker that was already running and was not restarted; its registration under the
            instance id of its own C(/metrics) is then the proof, and no request is sent.
          - Unset, the module's O(completion_probe) applies.
        type: bool
  timeout:
    description: Overall deadline in seconds.
    type: float
    default: 300
  interval:
    description: Seconds between rounds. Must be greater than 0 and at most 1.
    type: float
    default: 0.5
  request_timeout:
    description: Timeout in seconds for each single HTTP request.
    type: float
    default: 10
  completion_probe:
    description:
      - Require a direct-routed 1-token completion to answer 200 (see description).
      - With V(false) a worker is ready as soon as it is registered. Registration alone does not
        prove the frontend can route to it yet.
    type: bool
    default: true
notes:
  - Check mode is supported and the module runs normally in it. It only reads, except that
    O(completion_probe) sends one 1-token completion per worker per round until that worker is
    ready. That request is harmless (no state is created that later requests depend on; with a
    KV connector the two-token prompt is far below one KV block, so nothing is stored).
  - Never reports C(changed).
"""

EXAMPLES = r"""
- name: Wait for both vLLM workers
  kvshare.dynamo.dynamo_workers_ready:
    frontend_url: "http://{{ kvshare_bind_address }}:8000"
    workers:
      - name: w0
        model: Qwen/Qwen3-0.6B
        system_url: "http://{{ kvshare_bind_address }}:8081"
      - name: w1
        model: Qwen/Qwen3-0.6B
        system_url: "http://{{ kvshare_bind_address }}:8082"
        rpc_port: 8092
    timeout: 600
  register: dynamo_ready

- name: Use the exact ids (as strings to be safe in templates)
  ansible.builtin.debug:
    msg: "{{ dynamo_ready.instance_ids_str }}"
"""

RETURN = r"""
workers:
  description: One entry per worker, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The worker name.
      type: str
    model:
      description: The model probed.
      type: str
    system_url:
      description: The worker's system server URL.
      type: str
    instance_id:
      description: The worker's instance id (exact integer), or null when unknown.
      type: int
    instance_id_str:
      description: The instance id as a decimal string, or null.
      type: str
    mapping_method:
      description: How the id was found (C(metrics_worker_id), C(metrics_worker_id+rpc_port), C(rpc_port)).
      type: str
    registered:
      description: Whether the id is listed among the frontend's generate instances.
      type: bool
    registered_after_s:
      description: Seconds from the start of the task until the worker was first seen registered.
      type: float
    ready:
      description: Whether the worker is ready.
      type: bool
    ready_after_s:
      description: Seconds from the start of the task until the worker was ready.
      type: float
    completion_probe:
      description: Whether a completion was required of this worker (else its registration was the proof).
      type: bool
    probes:
      description: Number of completion probes sent to this worker.
      type: int
    last_probe:
      description: The last completion probe answer (null if none was sent).
      type: dict
      contains:
        status:
          description: HTTP status, null when no HTTP answer arrived.
          type: int
        body:
          description: Body excerpt (or the transport error).
          type: str
        error:
          description: Transport error, if any.
          type: str
        elapsed_s:
          description: Request duration.
          type: float
    last_error:
      description: Why the worker is not ready yet (mapping, registration or probe), or null.
      type: str
instance_ids:
  description: Map worker name -> instance id (int) for ready workers.
  returned: always
  type: dict
instance_ids_str:
  description: Map worker name -> instance id as a decimal string, for ready workers.
  returned: always
  type: dict
elapsed_s:
  description: Total time spent.
  returned: always
  type: float
rounds:
  description: Number of polling rounds.
  returned: always
  type: int
frontend_error:
  description: The last error reading the frontend's C(/health?instances=true), or null.
  returned: always
  type: str
not_ready:
  description: Names of workers that were not ready at the deadline.
  returned: always
  type: list
  elements: str
"""

import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import dynamo_http

PROBE_PROMPT = "hi"


def _probe_payload(model, instance_id):
    return dynamo_http.completion_payload(model, PROBE_PROMPT, 1, instance_id=instance_id,
                                          temperature=0)


def _check_worker(st, instances, frontend_error, completions_url, start, deadline, request_timeout, clock):
    """One round for one worker: map it to its instance, check its registration, probe it."""
    rt = max(min(float(request_timeout), deadline - clock()), 0.5)
    mapping = dynamo_http.map_worker(st["system_url"], instances or [], rt,
                                     rpc_port=st["rpc_port"])
    if mapping.instance_id is None:
        st["last_error"] = mapping.error
        return
    if st["instance_id"] is not None and st["instance_id"] != mapping.instance_id:
        # the worker restarted (new lease): forget the old registration
        st["registered"] = False
        st["registered_after_s"] = None
    st["instance_id"] = mapping.instance_id
    st["instance_id_str"] = str(mapping.instance_id)
    st["mapping_method"] = mapping.method
    if instances is None:
        st["last_error"] = frontend_error
        return
    if not mapping.registered:
        st["registered"] = False
        st["last_error"] = ("instance %d is not (yet) among the frontend's generate "
                            "instances" % mapping.instance_id)
        return
    if not st["registered"]:
        st["registered"] = True
        if st["registered_after_s"] is None:
            st["registered_after_s"] = round(clock() - start, 3)
    if not st["completion_probe"]:
        st["ready"] = True
        st["ready_after_s"] = round(clock() - start, 3)
        st["last_error"] = None
        return
    res = dynamo_http.post_json(completions_url,
                                _probe_payload(st["model"], mapping.instance_id), rt)
    st["probes"] += 1
    st["last_probe"] = res.summary()
    if res.status == 200:
        st["ready"] = True
        st["ready_after_s"] = round(clock() - start, 3)
        st["last_error"] = None
    else:
        st["last_error"] = "completion probe: %s" % res.describe()


def wait_for_workers(frontend_url, workers, timeout=300.0, interval=0.5, request_timeout=10.0,
                     completion_probe=True, clock=time.monotonic, sleep=time.sleep):
    """Poll until every worker is ready or the deadline passes.

    workers: list of dicts with name, model, system_url and optional rpc_port.
    Returns a dict with the module's result keys (without 'changed'/'failed'/'msg').
    """
    start = clock()
    deadline = start + float(timeout)
    states = []
    for w in workers:
        states.append({
            "name": w["name"],
            "model": w["model"],
            "system_url": w["system_url"],
            "rpc_port": w.get("rpc_port"),
            "completion_probe": bool(completion_probe if w.get("completion_probe") is None
                                     else w["completion_probe"]),
            "instance_id": None,
            "instance_id_str": None,
            "mapping_method": None,
            "registered": False,
            "registered_after_s": None,
            "ready": False,
            "ready_after_s": None,
            "probes": 0,
            "last_probe": None,
            "last_error": "not checked yet",
        })
    rounds = 0
    frontend_error = None
    completions_url = dynamo_http.join_url(frontend_url, "/v1/completions")
    while True:
        rounds += 1
        pending = [s for s in states if not s["ready"]]
        remaining = max(deadline - clock(), 0.0)
        rt = max(min(float(request_timeout), remaining), 0.5)
        _res, instances, frontend_error = dynamo_http.fetch_instances(frontend_url, rt)
        # Side by side: each worker's completion is its own engine's work, and a freshly started
        # engine can take seconds to answer its first one.
        threads = [threading.Thread(target=_check_worker, args=(st, instances, frontend_error, completions_url, start,
                                                                deadline, request_timeout, clock))
                   for st in pending]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if all(s["ready"] for s in states):
            break
        now = clock()
        if now >= deadline:
            break
        sleep(min(float(interval), max(deadline - now, 0.0)))
    for st in states:
        st.pop("rpc_port", None)
    not_ready = [s["name"] for s in states if not s["ready"]]
    return {
        "workers": states,
        "instance_ids": dict((s["name"], s["instance_id"]) for s in states if s["ready"]),
        "instance_ids_str": dict((s["name"], s["instance_id_str"]) for s in states
                                 if s["ready"]),
        "elapsed_s": round(clock() - start, 3),
        "rounds": rounds,
        "not_ready": not_ready,
        "frontend_error": frontend_error,
    }


def failure_message(result, timeout):
    parts = []
    for st in result["workers"]:
        if st["ready"]:
            continue
        probe = st["last_probe"]
        if probe is not None:
            answer = ("HTTP %s %s" % (probe["status"], probe["body"])
                      if probe["status"] is not None else "no answer (%s)" % probe["error"])
        else:
            answer = "no probe sent"
        parts.append("%s (instance %s, registered=%s): %s; last probe answer: %s"
                     % (st["name"], st["instance_id_str"], st["registered"], st["last_error"],
                        answer))
    return ("%d of %d Dynamo worker(s) not ready after %ss: %s"
            % (len(parts), len(result["workers"]), timeout, " | ".join(parts)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            frontend_url=dict(type="str", required=True),
            workers=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                model=dict(type="str", required=True),
                system_url=dict(type="str", required=True),
                rpc_port=dict(type="int"),
                completion_probe=dict(type="bool"),
            )),
            timeout=dict(type="float", default=300.0),
            interval=dict(type="float", default=0.5),
            request_timeout=dict(type="float", default=10.0),
            completion_probe=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 0 < p["interval"] <= 1:
        module.fail_json(msg="interval must be > 0 and <= 1 second, got %s" % p["interval"])
    if p["timeout"] < 0:
        module.fail_json(msg="timeout must be >= 0, got %s" % p["timeout"])
    if p["request_timeout"] <= 0:
        module.fail_json(msg="request_timeout must be > 0, got %s" % p["request_timeout"])
    if not p["workers"]:
        module.fail_json(msg="workers must not be empty")
    names = [w["name"] for w in p["workers"]]
    if len(set(names)) != len(names):
        module.fail_json(msg="worker names must be unique: %s" % ", ".join(names))

    result = wait_for_workers(p["frontend_url"], p["workers"], p["timeout"], p["interval"],
                              p["request_timeout"], p["completion_probe"])
    if result["not_ready"]:
        module.fail_json(msg=failure_message(result, p["timeout"]), changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
