#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to kvshare.dynamo
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

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
  - With O(unit_template), the module also watches each worker's systemd unit on the host it runs on
    (NRestarts, ActiveState/SubState and the main process's exit, read with C(systemctl show)) in
    every round, and stops waiting as soon as a worker has crashed O(max_crashes) times or its unit
    has failed. With C(Restart=always) a crash-looping worker would otherwise be polled until O(timeout).
    The failure names the worker, the unit, its state and last exit, and carries the unit's journal.
  - Stdlib only (urllib); environment proxies are ignored for these requests.
version_added: "0.1.0"
author:
  - kvshare.dynamo contributors
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
      unit:
        description:
          - The worker's systemd unit on the host the module runs on (overrides O(unit_template)).
        type: str
  unit_template:
    description:
      - The systemd unit of each worker, C({name}) replaced by the worker's name, e.g.
        C(dynamo-worker@{name}.service). Units are read on the host the module runs on; a unit
        systemd does not know there is not watched.
      - Unset (and no O(workers[].unit)), no unit is watched.
    type: str
  max_crashes:
    description:
      - Stop waiting and fail as soon as a watched worker has crashed this many times (restarts
        systemd made since the module started, plus a crash it has not restarted yet).
    type: int
    default: 2
  journal_lines:
    description: Journal lines of each watched worker that is not ready, returned and shown in the failure.
    type: int
    default: 40
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
      description: Why the worker is not ready yet (mapping, registration, probe or a crashed unit), or null.
      type: str
    unit:
      description: The watched systemd unit, or null.
      type: str
    unit_state:
      description:
        - The unit's last state (active_state, sub_state, n_restarts, crashes, last_exit, main_pid),
          or null when no unit is watched or systemd does not know it.
      type: dict
    crashed:
      description: Whether the unit crashed O(max_crashes) times or failed while the module waited.
      type: bool
    journal:
      description: The last O(journal_lines) journal lines of a watched worker that is not ready, else null.
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
  description: Names of workers that were not ready at the deadline (or when the module stopped early).
  returned: always
  type: list
  elements: str
crashed:
  description: Names of workers whose unit crashed O(max_crashes) times or failed; the module stopped waiting.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import dynamo_http
from ansible_collections.kvshare.dynamo.plugins.module_utils import units as unit_utils

PROBE_PROMPT = "hi"


def _probe_payload(model, instance_id):
    return dynamo_http.completion_payload(model, PROBE_PROMPT, 1, instance_id=instance_id,
                                          temperature=0)


def watch_units(states, read_unit, watches, max_crashes):
    """Read the unit of every pending worker; mark those that crashed max_crashes times or failed."""
    for st in states:
        if st["ready"] or not st["unit"]:
            continue
        state = read_unit(st["unit"])
        if state is None:
            continue
        crashes = watches.setdefault(st["name"], unit_utils.CrashWatch()).update(state)
        st["unit_state"] = unit_utils.summary(state, crashes)
        if crashes >= max_crashes or state["active_state"] == "failed":
            st["crashed"] = True
            st["last_error"] = unit_utils.describe(st["unit"], state, crashes)
    return [s["name"] for s in states if s["crashed"]]


def wait_for_workers(frontend_url, workers, timeout=300.0, interval=0.5, request_timeout=10.0,
                     completion_probe=True, clock=time.monotonic, sleep=time.sleep,
                     read_unit=None, max_crashes=2):
    """Poll until every worker is ready, one crashed (its unit watched), or the deadline passes.

    workers: list of dicts with name, model, system_url and optional rpc_port and unit.
    read_unit: unit -> state (units.parse_show) or None; None: no unit is watched.
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
            "unit": w.get("unit") if read_unit else None,
            "unit_state": None,
            "crashed": False,
            "journal": None,
        })
    rounds = 0
    watches = {}
    crashed = []
    frontend_error = None
    completions_url = dynamo_http.join_url(frontend_url, "/v1/completions")
    while True:
        rounds += 1
        if read_unit is not None:
            crashed = watch_units(states, read_unit, watches, max_crashes)
            if crashed:
                break
        pending = [s for s in states if not s["ready"]]
        remaining = max(deadline - clock(), 0.0)
        rt = max(min(float(request_timeout), remaining), 0.5)
        _res, instances, frontend_error = dynamo_http.fetch_instances(frontend_url, rt)
        for st in pending:
            rt = max(min(float(request_timeout), deadline - clock()), 0.5)
            mapping = dynamo_http.map_worker(st["system_url"], instances or [], rt,
                                             rpc_port=st["rpc_port"])
            if mapping.instance_id is None:
                st["last_error"] = mapping.error
                continue
            if st["instance_id"] is not None and st["instance_id"] != mapping.instance_id:
                # the worker restarted (new lease): forget the old registration
                st["registered"] = False
                st["registered_after_s"] = None
            st["instance_id"] = mapping.instance_id
            st["instance_id_str"] = str(mapping.instance_id)
            st["mapping_method"] = mapping.method
            if instances is None:
                st["last_error"] = frontend_error
                continue
            if not mapping.registered:
                st["registered"] = False
                st["last_error"] = ("instance %d is not (yet) among the frontend's generate "
                                    "instances" % mapping.instance_id)
                continue
            if not st["registered"]:
                st["registered"] = True
                if st["registered_after_s"] is None:
                    st["registered_after_s"] = round(clock() - start, 3)
            if not completion_probe:
                st["ready"] = True
                st["ready_after_s"] = round(clock() - start, 3)
                st["last_error"] = None
                continue
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
        "crashed": crashed,
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
        part = ("%s (instance %s, registered=%s): %s; last probe answer: %s"
                % (st["name"], st["instance_id_str"], st["registered"], st["last_error"], answer))
        if st.get("unit_state") and not st.get("crashed"):
            part += "; unit %s %s/%s, NRestarts %d" % (st["unit"], st["unit_state"]["active_state"],
                                                      st["unit_state"]["sub_state"], st["unit_state"]["n_restarts"])
        if st.get("journal"):
            part += "\nlast journal lines of %s:\n%s" % (st["unit"], st["journal"].rstrip())
        parts.append(part)
    if result.get("crashed"):
        return ("Dynamo worker(s) %s crash-looping: stopped waiting after %.1fs of %ss: %s"
                % (", ".join(result["crashed"]), result["elapsed_s"], timeout, " | ".join(parts)))
    return ("%d of %d Dynamo worker(s) not ready after %ss: %s"
            % (len(parts), len(result["workers"]), timeout, " | ".join(parts)))


def unit_reader(module):
    """unit -> state through systemctl on this host; None when systemd cannot be asked."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return None

    def read(unit):
        rc, out, _err = module.run_command(unit_utils.show_argv(systemctl, unit))
        return unit_utils.parse_show(out) if rc == 0 else None
    return read


def add_journals(module, result, lines):
    """The last journal lines of every watched worker that is not ready."""
    journalctl = module.get_bin_path("journalctl")
    if not journalctl or lines <= 0:
        return
    for st in result["workers"]:
        if st["ready"] or not st["unit"]:
            continue
        rc, out, err = module.run_command(unit_utils.journal_argv(journalctl, st["unit"], lines))
        st["journal"] = out if rc == 0 else "journalctl failed (rc %d): %s" % (rc, err.strip())


def main():
    module = AnsibleModule(
        argument_spec=dict(
            frontend_url=dict(type="str", required=True),
            workers=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                model=dict(type="str", required=True),
                system_url=dict(type="str", required=True),
                rpc_port=dict(type="int"),
                unit=dict(type="str"),
            )),
            unit_template=dict(type="str"),
            max_crashes=dict(type="int", default=2),
            journal_lines=dict(type="int", default=40),
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

    if p["max_crashes"] < 1:
        module.fail_json(msg="max_crashes must be >= 1, got %s" % p["max_crashes"])
    read_unit = None
    if p["unit_template"] or any(w.get("unit") for w in p["workers"]):
        for w in p["workers"]:
            if not w.get("unit") and p["unit_template"]:
                w["unit"] = p["unit_template"].replace("{name}", w["name"])
        read_unit = unit_reader(module)

    result = wait_for_workers(p["frontend_url"], p["workers"], p["timeout"], p["interval"],
                              p["request_timeout"], p["completion_probe"], read_unit=read_unit,
                              max_crashes=p["max_crashes"])
    if result["not_ready"]:
        add_journals(module, result, p["journal_lines"])
        module.fail_json(msg=failure_message(result, p["timeout"]), changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
