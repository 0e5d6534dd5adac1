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
module: dynamo_stack_info
short_description: Read-only status of one host of a Dynamo stack (units, workers, hit rates)
description:
  - Reads the state of the given systemd units (C(systemctl show)), and for every given worker
    its instance id (from the C(worker_id) label of its C(DYN_SYSTEM_PORT) C(/metrics), cross-checked
    with its pinned request-plane port), whether the frontend lists it among its generate
    instances (C(GET /health?instances=true)), its system server's C(/health), and its external
    prefix-cache hit rate so far (C(vllm:external_prefix_cache_hits_total) /
    C(vllm:external_prefix_cache_queries_total); none for mockers).
  - A worker is B(ready) when it is registered with the frontend and its system C(/health)
    answers HTTP 200. No request is sent to any engine; nothing changes.
  - For every worker that is not a mocker, the journal of its unit's current invocation is searched
    for the lines upstream Maru's vLLM connector logs when a KV store or load fails (C(Maru save
    error), C(Maru store failed), C(Maru load error)) or is skipped because its Maru handler could
    not be created (C(Failed to connect to MaruServer at), C(MaruHandler creation failed)). The
    connector catches those errors and the engine serves on without the shared cache, so they are
    counted and named as a problem.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  frontend_url:
    description: Base URL of the Dynamo frontend (empty string skips the registration check).
    type: str
    default: ""
  units:
    description: systemd units to report (e.g. C(etcd.service), C(dynamo-frontend.service)).
    type: list
    elements: str
    default: []
  workers:
    description:
      - This host's workers, as declared in C(dynamo_workers) (C(name), C(system_port), optional
        C(rpc_port), C(gpus) and C(engine) are read; other keys are ignored).
    type: list
    elements: dict
    default: []
  address:
    description: The address the workers' system servers listen on (C(kvshare_bind_address)).
    type: str
    default: 127.0.0.1
  timeout:
    description: Per-request timeout in seconds.
    type: float
    default: 5.0
"""

EXAMPLES = r"""
- name: Read this host's part of the stack
  kvshare.dynamo.dynamo_stack_info:
    frontend_url: http://10.1.0.10:8000
    units: [etcd.service, dynamo-worker@w0.service]
    address: 10.1.0.11
    workers: "{{ dynamo_workers }}"
  register: status
"""

RETURN = r"""
units:
  description: One entry per unit, C({unit, state, sub_state}); state is systemd's ActiveState.
  type: list
  returned: always
workers:
  description:
    - One entry per worker, C({name, gpu, unit, unit_state, instance_id (string), registered,
      health, ready, queries, hits, hit_rate, error, kv_errors}); C(kv_errors) counts the failed
      KV stores and loads of its current invocation (C({save, store, load, connect, handler, total,
      last}); null for
      a mocker or a unit that is not running).
  type: list
  returned: always
frontend_error:
  description: Why the frontend's instance list could not be read, or null.
  type: str
  returned: always
problems:
  description:
    - What is not healthy on this host, one sentence each, empty when all is well; a unit whose
      state is not C(active), a worker that is not ready (with the reason), a worker whose KV
      stores or loads failed (with the count and the last such line).
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import day2, dynamo_http


def unit_states(run_command, units):
    out = []
    for unit in units:
        rc, stdout, _err = run_command(["systemctl", "show", "--property=ActiveState,SubState,LoadState", unit])
        props = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line) if rc == 0 else {}
        state = props.get("ActiveState", "unknown")
        if props.get("LoadState") == "not-found":
            state = "not-found"
        out.append({"unit": unit, "state": state, "sub_state": props.get("SubState", "")})
    return out


def worker_targets(workers, address):
    """dynamo_workers entries -> {name, system_url, rpc_port, gpu, engine}."""
    out = []
    for worker in workers:
        gpus = worker.get("gpus") or []
        if isinstance(gpus, (str, int)):
            gpus = [gpus]
        out.append({"name": str(worker["name"]), "system_url": "http://%s:%d" % (address, int(worker["system_port"])),
                    "rpc_port": int(worker["rpc_port"]) if worker.get("rpc_port") else None,
                    "gpu": ",".join(str(g) for g in gpus), "engine": str(worker.get("engine") or "vllm")})
    return out


def kv_errors(run_command, unit):
    """Failed KV stores and loads in the journal of ``unit``'s current invocation (day2.kv_store_errors),
    or None when the unit has no invocation (not running)."""
    rc, stdout, _err = run_command(["systemctl", "show", "--property=InvocationID", "--value", unit])
    invocation = stdout.strip() if rc == 0 else ""
    if not invocation:
        return None
    # short-iso: the last such line says when (a count since the start may be old news).
    cmd = ["journalctl", "_SYSTEMD_INVOCATION_ID=%s" % invocation, "--output=short-iso", "--no-pager", "--quiet"]
    rc, stdout, err = run_command(cmd + ["--grep", day2.MARU_KV_ERROR_PATTERN])
    # journalctl exits 1 when --grep matched nothing; a build without pattern matching refuses
    # --grep: then every line of the invocation is read and filtered here.
    if rc not in (0, 1) or (rc == 1 and (err or "").strip()):
        rc, stdout, err = run_command(cmd)
        if rc != 0:
            return {"total": None, "error": "journalctl: %s" % (err or stdout).strip()[-300:]}
    return day2.kv_store_errors(stdout.splitlines())


def worker_status(worker, instances, frontend_error, timeout):
    system_url = worker["system_url"]
    entry = {"name": worker["name"], "gpu": worker.get("gpu") or "", "unit": "dynamo-worker@%s.service" % worker["name"],
             "instance_id": None, "registered": False, "health": None, "ready": False,
             "queries": None, "hits": None, "hit_rate": None, "error": None}
    res = dynamo_http.get(dynamo_http.join_url(system_url, "/metrics"), timeout)
    metrics_text = res.text if res.ok else None
    if metrics_text is None:
        entry["error"] = "worker /metrics at %s: %s" % (system_url, res.describe())
    else:
        entry.update(day2.hit_rate(metrics_text))
    mapping = dynamo_http.map_worker(system_url, instances or [], timeout, rpc_port=worker.get("rpc_port"),
                                     metrics_text=metrics_text) if metrics_text is not None else None
    if mapping is not None:
        if mapping.instance_id is not None:
            entry["instance_id"] = str(mapping.instance_id)
            entry["registered"] = bool(instances is not None and mapping.registered)
        else:
            entry["error"] = mapping.error
    health = dynamo_http.get(dynamo_http.join_url(system_url, "/health"), timeout)
    entry["health"] = health.status
    entry["ready"] = bool(entry["registered"] and health.status == 200)
    if entry["error"] is None and not entry["ready"]:
        entry["error"] = frontend_error if instances is None and frontend_error else (
            "not registered with the frontend" if not entry["registered"] else "system /health: %s" % health.describe())
    return entry


def problems(units, workers):
    """What is not healthy: units not active, workers not ready (a stopped worker is named by both),
    workers whose KV stores or loads failed."""
    out = ["%s is %s" % (u["unit"], u["state"]) for u in units if u["state"] != "active"]
    for w in workers:
        if not w["ready"]:
            out.append("worker %s is not ready%s" % (w["name"], ": %s" % w["error"] if w["error"] else ""))
        problem = day2.kv_store_problem(w["name"], w.get("kv_errors"))
        if problem:
            out.append(problem)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            frontend_url=dict(type="str", default=""),
            units=dict(type="list", elements="str", default=[]),
            workers=dict(type="list", elements="dict", default=[]),
            address=dict(type="str", default="127.0.0.1"),
            timeout=dict(type="float", default=5.0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    instances, frontend_error = None, None
    if p["frontend_url"] and p["workers"]:
        _res, instances, frontend_error = dynamo_http.fetch_instances(p["frontend_url"], p["timeout"])
    units = unit_states(module.run_command, p["units"])
    try:
        targets = worker_targets(p["workers"], p["address"])
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg="workers: each needs name and system_port: %s" % exc)
    workers = [worker_status(w, instances, frontend_error, p["timeout"]) for w in targets]
    state = dict((u["unit"], u["state"]) for u in units)
    for w, target in zip(workers, targets):
        w["unit_state"] = state.get(w["unit"], "")
        w["kv_errors"] = kv_errors(module.run_command, w["unit"]) if target["engine"] != "mocker" else None
    module.exit_json(changed=False, units=units, workers=workers, frontend_error=frontend_error,
                     problems=problems(units, workers))


if __name__ == "__main__":
    main()
