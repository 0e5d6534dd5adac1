# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Day-2 logic shared by the filters and modules: rolling-restart groups, Prometheus file_sd
targets, per-worker hit rates and the stack status table.

Stdlib only (imported on managed hosts by the dynamo_stack_info module).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
from ansible_collections.kvshare.dynamo.plugins.module_utils import prometheus_text
from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
from ansible_collections.kvshare.dynamo.plugins.module_utils.workers import gpu_groups, gpu_key, pool_id, start_waves

RESTART_UNITS = ("worker", "gpu")


# ---------------------------------------------------------------------------
# rolling restart
# ---------------------------------------------------------------------------

def restart_groups(workers, unit="worker", names=None):
    """The steps of a rolling restart of `workers` (restricted to `names` when given).

    unit=worker: one step per worker, restarted in place.
    unit=gpu: one step per GPU group: the group is stopped together (the GPU is free), then its
    workers start one after another (start_waves), each proven ready.
    Returns [{"names": [...], "waves": [[...], ...], "stop_first": bool, "gpus": [...]}].
    """
    if unit not in RESTART_UNITS:
        raise ValueError("restart unit %r is not one of %s" % (unit, ", ".join(RESTART_UNITS)))
    selected = [w for w in workers or [] if names is None or w["name"] in names]
    if names is not None:
        unknown = sorted(set(names) - set(w["name"] for w in workers or []))
        if unknown:
            raise ValueError("unknown workers: %s" % ", ".join(unknown))
    steps = []
    if unit == "worker":
        for worker in selected:
            steps.append({"names": [worker["name"]], "waves": [[worker["name"]]], "stop_first": False,
                          "gpus": list(gpu_key(worker))})
        return steps
    for group in gpu_groups(selected):
        gpus = sorted(set(g for w in group for g in gpu_key(w)))
        steps.append({"names": [w["name"] for w in group], "waves": start_waves(group),
                      "stop_first": len(group) > 1, "gpus": gpus})
    return steps


# ---------------------------------------------------------------------------
# Prometheus file_sd
# ---------------------------------------------------------------------------

def _addr(hostvars, host):
    return _stack.host_address(hostvars, host)


def prometheus_targets(hostvars, groups, service_defaults, maru_metrics_port=0, cluster="kvshare"):
    """file_sd target groups per job: {"dynamo-frontend": [...], "dynamo-worker": [...], "etcd": [...], "maru": [...]}.

    ``service_defaults``: the stack contract (kvshare_service_defaults), whose frontend HTTP and
    etcd client ports apply where a host does not set its own, and whose etcd_group_name names the
    members (the caller merges the run's own group names in: lookup kvshare.dynamo.play_group_names).

    Every target group carries the labels host, worker, gpu and pool ("" where not applicable), so
    one relabelling works for all jobs. Workers: their DYN_SYSTEM_PORT /metrics. etcd: its client
    port (/metrics over TLS with a client certificate). Maru: only when maru_metrics_port > 0 (the
    Maru resource manager and metadata server expose no Prometheus endpoint that this collection
    knows of).
    """
    def group(target, host, job, worker="", gpu="", pool="", extra=None):
        labels = {"host": host, "worker": worker, "gpu": gpu, "pool": pool, "cluster": cluster,
                  "kvshare_job": job}
        labels.update(extra or {})
        return {"targets": [target], "labels": labels}

    out = {"dynamo-frontend": [], "dynamo-worker": [], "etcd": [], "maru": []}
    for host in groups.get("dynamo_frontend", []):
        hv = hostvars.get(host, {})
        port = hv.get("dynamo_frontend_http_port", service_defaults["dynamo_frontend_http_port"])
        addr = hv.get("dynamo_frontend_http_host") or _addr(hostvars, host)
        out["dynamo-frontend"].append(group("%s:%s" % (addr, port), host, "dynamo-frontend"))
    for host in groups.get("dynamo_workers", []):
        for worker in _kv_pools.host_workers(host, hostvars, groups, service_defaults):
            out["dynamo-worker"].append(group(
                "%s:%s" % (_addr(hostvars, host), worker["system_port"]), host, "dynamo-worker",
                worker=worker["name"], gpu=",".join(gpu_key(worker)), pool=pool_id(host, worker) or "",
                extra={"engine": str(worker.get("engine", "")),
                       "model": str(worker.get("served_model_name") or worker.get("model", ""))}))
    for host in groups.get(service_defaults["etcd_group_name"], []):
        hv = hostvars.get(host, {})
        port = hv.get("etcd_client_port", service_defaults["etcd_client_port"])
        out["etcd"].append(group("%s:%s" % (hv.get("etcd_address") or _addr(hostvars, host), port), host, "etcd"))
    if int(maru_metrics_port or 0) > 0:
        for host in groups.get("maru_pool", []):
            out["maru"].append(group("%s:%s" % (_addr(hostvars, host), maru_metrics_port), host, "maru",
                                     pool="maru:%s" % host))
    return out


# ---------------------------------------------------------------------------
# hit rate and status
# ---------------------------------------------------------------------------

def hit_rate(metrics_text):
    """External prefix-cache hit rate so far from a worker's /metrics text (vLLM counters).

    Returns {"queries", "hits", "hit_rate"}; all None when the worker exports no such counters
    (mocker, no KV connector); hit_rate None while queries is 0.
    """
    if not metrics_text:
        return {"queries": None, "hits": None, "hit_rate": None}
    counters = prometheus_text.vllm_kv_counters(metrics_text)
    queries, hits = counters.get("queries"), counters.get("hits")
    rate = (hits / queries) if (queries and hits is not None) else None
    return {"queries": queries, "hits": hits, "hit_rate": rate}


# What upstream Maru's vLLM connector (maru_vllm/connector.py at the pin) logs when it cannot store
# or load KV: it catches the error and the engine serves on without the shared cache. "Failed to
# connect" is logged on every store and load while its handler cannot be created (a full pool
# refuses the handler's initial allocation: the fault suite's case 12); a failed creation that
# raised logs "MaruHandler creation failed" and backs off 5 s.
MARU_KV_ERRORS = (("save", "Maru save error: "), ("store", "Maru store failed: "), ("load", "Maru load error: "),
                  ("connect", "Failed to connect to MaruServer at "), ("handler", "MaruHandler creation failed"))
# journalctl --grep pattern (PCRE2) for the same lines, from the same markers (the count below
# re-checks each line).
MARU_KV_ERROR_PATTERN = "|".join(re.escape(marker) for dummy, marker in MARU_KV_ERRORS)


def kv_store_errors(lines):
    """Failed KV stores and loads in a worker's journal lines (MARU_KV_ERRORS): {"save", "store",
    "load", "connect", "handler": counts, "total", "last": the last such line (stripped) or None}."""
    out = dict((kind, 0) for kind, dummy in MARU_KV_ERRORS)
    last = None
    for line in lines or []:
        for kind, marker in MARU_KV_ERRORS:
            if marker in line:
                out[kind] += 1
                last = line.strip()
                break
    out["total"] = sum(out[kind] for kind, dummy in MARU_KV_ERRORS)
    out["last"] = last
    return out


def kv_store_problem(name, errors):
    """The status problem for a worker with failed KV stores or loads, or None."""
    if not errors or not errors.get("total"):
        return None
    counts = ", ".join("'%s' x%d" % (marker.rstrip(": "), errors[kind]) for kind, marker in MARU_KV_ERRORS if errors.get(kind))
    return ("worker %s cannot use its KV pool: %s in its journal since it started (last: %s)"
            % (name, counts, (errors["last"] or "")[-300:]))


def _fmt_rate(worker):
    if worker.get("hit_rate") is not None:
        return "%.3f (%d/%d)" % (worker["hit_rate"], int(worker.get("hits") or 0), int(worker.get("queries") or 0))
    if worker.get("queries") is not None:
        return "- (0 queries)"
    return "-"


def status_rows(hosts):
    """Flatten a status document into table rows (lists of strings).

    hosts: [{"host", "units": [{"unit", "state"}], "workers": [{"name", "gpu", "instance_id",
    "ready", "registered", "health", "hit_rate", "hits", "queries", "error"}]}]
    """
    rows = []
    for host in hosts:
        workers = dict(("dynamo-worker@%s.service" % w["name"], w) for w in host.get("workers") or [])
        listed = set()

        def worker_row(unit, state, worker):
            ready = "ready" if worker.get("ready") else ("registered" if worker.get("registered") else "NOT READY")
            return [host["host"], unit, state, worker["name"], worker.get("gpu") or "-",
                    str(worker.get("instance_id") or "-"), ready, _fmt_rate(worker)]

        for unit in host.get("units") or []:
            listed.add(unit["unit"])
            if unit["unit"] in workers:
                rows.append(worker_row(unit["unit"], unit.get("state", "?"), workers[unit["unit"]]))
            else:
                rows.append([host["host"], unit["unit"], unit.get("state", "?"), "-", "-", "-", "-", "-"])
        for unit, worker in workers.items():
            if unit not in listed:
                rows.append(worker_row(unit, worker.get("unit_state") or "?", worker))
    return rows


STATUS_HEADER = ["host", "unit", "state", "worker", "gpu", "instance id", "ready", "external hit rate"]


def status_table(hosts):
    """The whole stack as one fixed-width text table (header + one line per unit)."""
    rows = [STATUS_HEADER] + status_rows(hosts)
    widths = [max(len(r[i]) for r in rows) for i in range(len(STATUS_HEADER))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    return "\n".join(lines)


def status_summary(hosts):
    """Counts for the JSON form: units active/total, workers ready/total."""
    units = [u for h in hosts for u in h.get("units") or []]
    workers = [w for h in hosts for w in h.get("workers") or []]
    return {
        "units_total": len(units),
        "units_active": sum(1 for u in units if u.get("state") == "active"),
        "workers_total": len(workers),
        "workers_ready": sum(1 for w in workers if w.get("ready")),
        "healthy": all(u.get("state") == "active" for u in units) and all(w.get("ready") for w in workers),
    }


def status_json(hosts):
    return json.dumps({"summary": status_summary(hosts), "hosts": hosts}, indent=2, sort_keys=True, default=str)
