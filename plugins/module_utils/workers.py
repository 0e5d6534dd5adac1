# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Worker inventory logic shared by the filters and modules: validation and start order."""

from __future__ import annotations

import json
import re

# What Ansible's bool type accepts.
from ansible.module_utils.parsing.convert_bool import BOOLEANS
from ansible_collections.kvshare.dynamo.plugins.module_utils import maru as _maru

ENGINES = ("vllm", "mocker")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")


def gpu_key(worker):
    """The GPUs a worker uses, as a tuple of strings (empty for none)."""
    gpus = worker.get("gpus")
    if gpus is None or gpus == "":
        return ()
    if isinstance(gpus, (str, int)):
        gpus = [gpus]
    return tuple(str(g) for g in gpus)


def linked_groups(items, keys_of):
    """Positions of ``items`` grouped by shared keys (``keys_of(item)``: hashables), directly or
    through a chain of shared keys, each group in order and the groups by their first member. An
    item without keys forms its own group."""
    parent = list(range(len(items)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for idx, item in enumerate(items):
        for key in keys_of(item):
            if key in owner:
                parent[find(idx)] = find(owner[key])
            else:
                owner[key] = idx
    groups = {}
    for idx in range(len(items)):
        groups.setdefault(find(idx), []).append(idx)
    return sorted(groups.values(), key=lambda group: group[0])


def gpu_groups(workers):
    """Workers grouped by shared GPUs (directly or through a chain of shared GPUs), in inventory
    order. Workers without GPUs each form their own group. Returns lists of worker mappings."""
    return [[workers[idx] for idx in group] for group in linked_groups(workers, gpu_key)]


def start_waves(workers):
    """Group workers into start waves.

    Workers that share a GPU (directly or through a chain of shared GPUs) must start one after
    another: concurrent vLLM memory profiling on one GPU races to a negative KV budget. Workers
    on disjoint GPUs start together. Wave k holds the k-th worker of every GPU group, in
    inventory order. Workers without GPUs each form their own group.
    """
    groups = [[w["name"] for w in group] for group in gpu_groups(workers)]
    depth = max((len(g) for g in groups), default=0)
    return [[g[k] for g in groups if k < len(g)] for k in range(depth)]


def gpu_order(workers):
    """For each worker name, the worker that starts right before it on its GPU(s) (`after`) and
    the one right after it (`before`), None where there is none: the start waves' order within
    each GPU group, which the worker units encode for boot (After= plus a readiness gate)."""
    order = {}
    for group in gpu_groups(workers):
        names = [w["name"] for w in group]
        for pos, name in enumerate(names):
            order[name] = {
                "after": names[pos - 1] if pos > 0 else None,
                "before": names[pos + 1] if pos + 1 < len(names) else None,
            }
    return order


def kv_transfer_config(worker, require_connector=True):
    """Return the worker's KV transfer config as a dict (None when absent).

    Raises ValueError when a string config is not a JSON object, or (``require_connector``) has no
    kv_connector: a worker that names its pool (kv_pool) writes only what it adds to the pool's.
    """
    cfg = worker.get("kv_transfer_config")
    if cfg in (None, "", {}):
        return None
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError as exc:
            raise ValueError("is not valid JSON: %s" % exc) from exc
    if not isinstance(cfg, dict):
        raise ValueError("must be a mapping (or a JSON object string)")
    if require_connector and "kv_connector" not in cfg:
        raise ValueError("has no 'kv_connector'")
    json.dumps(cfg)
    return cfg


def key_label(host, worker, pos, key):
    """A worker's key as the inventory writes it: dynamo_workers[<worker name, else index>].<key> on <host>."""
    name = worker.get("name") if isinstance(worker, dict) else None
    return "dynamo_workers[%s].%s on %s" % (name if isinstance(name, str) and name else pos, key, host)


def _port(value):
    if isinstance(value, bool):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        return None
    return port if 1 <= port <= 65535 else None


# The keys of one dynamo_workers entry and their types, as the dynamo_worker role's argument spec
# declares them (tests/unit/plugins/module_utils/test_workers_validation.py keeps the two in
# step). validate.yml checks them here first, so that a wrong type is named as the inventory
# writes it (dynamo_workers[<worker>].<key>) instead of through the role's internal variable.
WORKER_KEYS = {
    "name": "str", "engine": "str", "model": "str", "served_model_name": "str", "endpoint": "str",
    "system_port": "int", "rpc_port": "int", "gpus": "list", "gpu_memory_utilization": "float",
    "prefix_caching": "bool", "kv_transfer_config": "raw", "kv_pool": "raw", "extra_args": "list", "env": "dict",
}


def _type_error(key, value):
    """Why ``value`` is not of WORKER_KEYS[key]'s type (as the argument spec would convert it), or ''."""
    kind = WORKER_KEYS[key]
    if kind == "str" and isinstance(value, (dict, list)):
        return "must be a string"
    if kind == "bool" and not isinstance(value, bool) and str(value).strip().lower() not in BOOLEANS:
        return "must be true or false"
    if kind == "list" and isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "must be a list of strings"
    return ""


def worker_errors(workers, host, frontend_hosts=None):
    """Validate one host's worker list. Returns a list of messages naming worker and variable."""
    errors = []
    if workers in (None, ""):
        return errors
    if not isinstance(workers, list):
        return ["dynamo_workers on %s: must be a list of workers" % host]
    if workers and not frontend_hosts:
        errors.append("dynamo_workers on %s: no frontend in the inventory (group dynamo_frontend is empty), "
                      "so no worker here can register anywhere" % host)
    seen_names, seen_ports, gpu_share = {}, {}, {}
    for pos, worker in enumerate(workers):
        if not isinstance(worker, dict):
            errors.append("dynamo_workers[%d] on %s: must be a mapping" % (pos, host))
            continue
        name = worker.get("name")
        label = "worker '%s' on %s" % (name, host) if name else "dynamo_workers[%d] on %s" % (pos, host)

        def where(key, worker=worker, pos=pos):
            return key_label(host, worker, pos, key)

        for key in sorted(worker):
            if key not in WORKER_KEYS:
                errors.append("%s: unknown key (known: %s)" % (where(key), ", ".join(sorted(WORKER_KEYS))))
            elif worker[key] is not None and _type_error(key, worker[key]):
                errors.append("%s: %s (got %r)" % (where(key), _type_error(key, worker[key]), worker[key]))
        if not isinstance(name, str) or not NAME_RE.match(name):
            errors.append("%s: name must match %s" % (label, NAME_RE.pattern))
        elif name in seen_names:
            errors.append("%s: duplicate worker name (dynamo_workers[%d] and [%d])" % (label, seen_names[name], pos))
        else:
            seen_names[name] = pos
        engine = worker.get("engine")
        if engine not in ENGINES:
            errors.append("%s: engine '%s' is unknown (choose one of %s)" % (label, engine, ", ".join(ENGINES)))
        if not worker.get("model"):
            errors.append("%s: model is required (local path or model id)" % label)
        for key in ("system_port", "rpc_port"):
            if key not in worker and key == "rpc_port":
                continue
            port = _port(worker.get(key))
            if port is None:
                errors.append("%s: must be an integer in 1-65535 (got %r)" % (where(key), worker.get(key)))
            elif port in seen_ports:
                errors.append("%s: %s %d is already used by %s" % (label, key, port, seen_ports[port]))
            else:
                seen_ports[port] = "worker '%s' (%s)" % (name, key)
        if "gpus" in worker and not isinstance(worker.get("gpus"), list):
            errors.append("%s: must be a list of GPU ids (got %r)" % (where("gpus"), worker.get("gpus")))
        elif engine == "vllm" and not gpu_key(worker):
            # Without it the worker gets no CUDA_VISIBLE_DEVICES: it lands on GPU 0 beside the others,
            # outside the start order and the per-GPU memory-fraction sum.
            errors.append("%s: a vLLM worker must list its GPUs, e.g. gpus: [\"0\"] (got %r)"
                          % (where("gpus"), worker.get("gpus")))
        fraction = worker.get("gpu_memory_utilization")
        if fraction is not None:
            try:
                fraction = float(fraction)
            except (TypeError, ValueError):
                fraction = -1.0
            if not 0.0 < fraction <= 1.0:
                errors.append("%s: gpu_memory_utilization must be in (0, 1] (got %r)"
                              % (label, worker.get("gpu_memory_utilization")))
            else:
                for gpu in gpu_key(worker):
                    gpu_share.setdefault(gpu, []).append((name, fraction))
        try:
            cfg = kv_transfer_config(worker, require_connector=worker.get("kv_pool") is None)
        except ValueError as exc:
            errors.append("%s: kv_transfer_config %s" % (label, exc))
            cfg = None
        if cfg is not None and engine == "mocker":
            errors.append("%s: kv_transfer_config is set but engine mocker has no KV connector" % label)
        if isinstance(worker.get("extra_args", []), str) or not isinstance(worker.get("extra_args", []), list):
            errors.append("%s: must be a list of arguments (got %r)" % (where("extra_args"), worker.get("extra_args")))
        env = worker.get("env", {})
        if not isinstance(env, dict):
            errors.append("%s: must be a mapping (got %r)" % (where("env"), env))
        elif "DYN_CONNECTOR" in env:
            errors.append("%s: env sets DYN_CONNECTOR, which dynamo.vllm 1.6.1 rejects; use kv_transfer_config" % label)
    for gpu, shares in sorted(gpu_share.items()):
        total = sum(f for dummy, f in shares)
        if total > 1.0 + 1e-9:
            errors.append("gpu_memory_utilization on %s: workers %s share GPU %s and ask for %.2f in total (> 1.0)"
                          % (host, ", ".join(n for n, dummy in shares), gpu, total))
    return errors


def pool_id(host, worker):
    """Identity of the KV pool a worker shares, or None (no connector / mocker).

    An explicit ``pool`` key wins. Otherwise: Maru -> its metadata server URL; LMCache with Maru
    -> maru_path; ExampleConnector / file-based -> the host and directory (a local directory is
    shared only on that host unless ``pool`` says otherwise); a KVCR tier -> its compatibility
    digest (the KVCR hosts' engines share it across hosts); anything else -> the host and the
    connector's JSON (workers configured identically on one host are assumed to share).
    """
    if worker.get("pool"):
        return str(worker["pool"])
    if worker.get("engine") == "mocker":
        return None
    cfg = kv_transfer_config(worker)
    if cfg is None:
        return None
    extra = cfg.get("kv_connector_extra_config") or {}
    connector = cfg.get("kv_connector")
    if connector == "MaruKVConnector" and extra.get("maru_server_url"):
        return "maru:%s" % extra["maru_server_url"]
    if extra.get("maru_path"):
        return "maru:%s" % extra["maru_path"]
    if extra.get("shared_storage_path"):
        return "dir:%s:%s" % (host, extra["shared_storage_path"])
    digest = kvcr_digest(cfg)
    if digest is not None:
        return "kvcr:%s" % digest
    return "cfg:%s:%s" % (host, json.dumps(cfg, sort_keys=True))


# What worker A's engine counts when it writes KV to the KVCR tier (the upstream KVCR test's proof
# that A's KV was offloaded); verify.yml waits for it to grow and settle before B's request.
KVCR_STORE_METRIC = {"name": "vllm:kv_offload_tiering_write_bytes_total", "labels": {"tier": "1:kvcr"}}


def kvcr_digest(cfg):
    """The compatibility digest of a kv_transfer_config's KVCR tier, or None (no KVCR tier). The
    memory service refuses claims with another digest, so the engines of one KVCR deployment that
    share a digest share its KV: the digest names the pool, whatever host a worker is on."""
    extra = (cfg or {}).get("kv_connector_extra_config") or {}
    tiers = extra.get("secondary_tiers") if isinstance(extra, dict) else None
    for tier in tiers if isinstance(tiers, list) else []:
        if isinstance(tier, dict) and tier.get("type") == "kvcr":
            return str(tier.get("compatibility_digest") or "")
    return None


def store_metric(worker):
    """The metric of ``worker`` that grows when it has stored KV in its pool, for pools whose
    store shows only in the engine's metrics (KVCR); None otherwise."""
    cfg = kv_transfer_config(worker) if worker.get("engine") != "mocker" else None
    return dict(KVCR_STORE_METRIC) if cfg is not None and kvcr_digest(cfg) is not None else None


def share_pairs(host_workers, named_pairs=None):
    """Pairs (A, B) for the cross-instance check.

    ``host_workers`` maps host -> its worker list. With ``named_pairs`` (items ``{a: host/name,
    b: host/name}``) exactly those are returned. Otherwise, per pool: a pair on one host (the
    first host with two of its workers) and, when the pool spans hosts, a pair across hosts (A
    on one host, B on another), so that both ways of sharing are proven; and one pair per mocker
    endpoint (for routing and answers; sharing is not applicable there). Each pair item carries
    host, name and the worker mapping for A and B, and the pool id.
    """
    index = {}
    for host in sorted(host_workers):
        for worker in host_workers[host] or []:
            index["%s/%s" % (host, worker["name"])] = (host, worker)
    pairs = []
    if named_pairs:
        for item in named_pairs:
            missing = [k for k in (item.get("a"), item.get("b")) if k not in index]
            if missing:
                raise ValueError("kvshare_verify_pairs names unknown workers %s (use host/name)" % missing)
            (ha, wa), (hb, wb) = index[item["a"]], index[item["b"]]
            pairs.append({"a": {"host": ha, "worker": wa}, "b": {"host": hb, "worker": wb},
                          "pool": pool_id(ha, wa) or "n/a", "store_metric": store_metric(wa),
                          "maru_server": maru_server_url(wa), "a_maru_instance_id": maru_instance_id(wa)})
        return pairs
    groups = {}
    for key, (host, worker) in index.items():
        pid = pool_id(host, worker)
        if pid is None and worker.get("engine") == "mocker":
            pid = "mocker:%s:%s" % (worker.get("endpoint") or "default", worker.get("served_model_name") or worker["model"])
        if pid is not None:
            groups.setdefault(pid, []).append((host, worker))
    for pid in sorted(groups):
        members = groups[pid]
        if len(members) < 2:
            continue
        found = []
        same = next(((m, n) for i, m in enumerate(members) for n in members[i + 1:] if m[0] == n[0]), None)
        if same:
            found.append(same)
        a = same[0] if same else members[0]
        cross = next((m for m in members if m[0] != a[0]), None)
        if cross:
            found.append((a, cross))
        for a, b in found:
            pairs.append({"a": {"host": a[0], "worker": a[1]}, "b": {"host": b[0], "worker": b[1]}, "pool": pid,
                          "store_metric": store_metric(a[1]),
                          "maru_server": maru_server_url(a[1]), "a_maru_instance_id": maru_instance_id(a[1])})
    return pairs


def _check_target(side, address):
    worker = side["worker"]
    target = {"name": "%s/%s" % (side["host"], worker["name"]), "engine": worker.get("engine") or "vllm",
              "system_url": "http://%s:%s" % (address(side["host"]), worker["system_port"])}
    if worker.get("rpc_port") is not None:
        target["rpc_port"] = worker["rpc_port"]
    return target


def pair_label(pair):
    return "%s/%s -> %s/%s (%s)" % (pair["a"]["host"], pair["a"]["worker"]["name"], pair["b"]["host"],
                                    pair["b"]["worker"]["name"], pair["pool"])


def check_runs(pairs, address, python, default_host):
    """verify.yml's kv_share_check runs, one per host, each ``{host, labels, pairs, args}`` (``pairs``
    the share_pairs items, ``args`` kv_share_check's ``pairs`` option for them).

    A Maru pair runs from A's host: its Dynamo venv (``python(host)``) has Maru's client, which
    reads the pool. The other pairs (mocker, KVCR: they read HTTP only, which the firewall opens to
    every cluster host) join the first of those runs, where they go side by side with the Maru
    pairs, or run from ``default_host`` (the frontend's) when there is none. ``address(host)`` is
    the host's address.
    """
    runs = []
    by_host = {}
    others = []
    for pair in pairs or []:
        if pair.get("maru_server"):
            host = pair["a"]["host"]
            if host not in by_host:
                by_host[host] = {"host": host, "labels": [], "pairs": [], "args": []}
                runs.append(by_host[host])
            by_host[host]["pairs"].append(pair)
        else:
            others.append(pair)
    if others:
        if not runs:
            runs.append({"host": default_host, "labels": [], "pairs": [], "args": []})
        runs[0]["pairs"].extend(others)
    for run in runs:
        for pair in run["pairs"]:
            wa = pair["a"]["worker"]
            arg = {"pool": str(pair["pool"]), "model": wa.get("served_model_name") or wa["model"],
                   "worker_a": _check_target(pair["a"], address), "worker_b": _check_target(pair["b"], address)}
            if pair.get("maru_server"):
                arg["store_probe"] = [python(pair["a"]["host"]), "-m", "kvshare_maru_connector", "usage",
                                      "--follow", pair["maru_server"]]
                arg["store_probe_follow"] = True
                if pair.get("a_maru_instance_id"):
                    arg["store_instance_id"] = pair["a_maru_instance_id"]
            elif pair.get("store_metric"):
                # A KVCR pair: B waits until A's engine counted its write to the KVCR tier.
                arg["store_metric"] = pair["store_metric"]
            run["args"].append(arg)
            run["labels"].append(pair_label(pair))
    return runs


def check_outcomes(results):
    """Each pair of the looped kv_share_check results (item = a check_runs run) as ``{item: the
    pair, verdict, reasons, report}``, in the runs' order. A run that failed as a whole (unreachable
    host, module crash) gives each of its pairs the verdict ``error`` with the run's message."""
    out = []
    for res in results or []:
        run = res.get("item") or {}
        found = res.get("pairs") or []
        for pos, pair in enumerate(run.get("pairs") or []):
            if pos < len(found) and isinstance(found[pos], dict) and found[pos].get("verdict"):
                item = found[pos]
                out.append({"item": pair, "verdict": item["verdict"], "reasons": list(item.get("reasons") or []),
                            "report": item.get("report") or {}})
            else:
                out.append({"item": pair, "verdict": "error", "report": {},
                            "reasons": ["%s: %s" % (pair_label(pair), res.get("msg") or "module failed")]})
    return out


def check_summary(outcomes):
    """verify.yml's report lines: host_a, host_b, pool, verdict, reasons and report per pair."""
    return [{"host_a": o["item"]["a"]["host"], "host_b": o["item"]["b"]["host"], "pool": o["item"]["pool"],
             "verdict": o["verdict"], "reasons": o["reasons"], "report": o["report"]} for o in outcomes or []]


def port_requests(workers, bind_address):
    """The ports one host's workers bind, as items for the port_clash_check module.

    Each worker's system_port and rpc_port (when set), on ``bind_address``, owned by the worker's
    own unit (dynamo-worker@<name>.service): a running worker holding its own port is no clash.
    """
    requests = []
    for worker in workers or []:
        if not isinstance(worker, dict):
            continue
        for key in ("system_port", "rpc_port"):
            port = _port(worker.get(key))
            if port is None:
                continue
            requests.append({
                "port": port,
                "address": str(bind_address or ""),
                "variable": "dynamo_workers[%s].%s" % (worker.get("name"), key),
                "units": ["dynamo-worker@%s.service" % worker.get("name")],
            })
    return requests


def cluster_worker_errors(host_workers):
    """Checks across every host's dynamo_workers (the per-host checks are worker_errors).

    ``host_workers`` maps host -> its worker list, as their pools configure them
    (module_utils.kv_pools). A maru_instance_id (MaruKVConnector's
    ``kv_connector_extra_config.maru_instance_id`` or LMCache's ``extra_config``) must be unique
    across the deployment: two workers with one id corrupt each other's pool entries.
    """
    errors, ids = [], {}
    for host in sorted(host_workers):
        workers = host_workers[host]
        if not isinstance(workers, list):
            continue
        for worker in workers:
            if not isinstance(worker, dict):
                continue
            try:
                cfg = kv_transfer_config(worker)
            except ValueError:
                continue  # reported per host by worker_errors
            if cfg is None or worker.get("engine") == "mocker":
                continue
            extra = cfg.get("kv_connector_extra_config") or {}
            if not isinstance(extra, dict):
                continue
            iid = extra.get("maru_instance_id") or (extra.get("extra_config") or {}).get("maru_instance_id")
            label = "worker '%s' on %s" % (worker.get("name"), host)
            if not iid:
                continue
            if str(iid) in ids:
                errors.append("%s: maru_instance_id '%s' is already used by %s (set kv_pool.instance_id)"
                              % (label, iid, ids[str(iid)]))
            else:
                ids[str(iid)] = label
    return errors


# Where a worker registers its model (ai-dynamo 1.6.1, dynamo.vllm and dynamo.mocker): --endpoint
# dyn://<namespace>.<component>.<endpoint>, by default the component `backend` (`prefill` with
# --disaggregation-mode prefill) and the endpoint `generate` in the worker's namespace (DYN_NAMESPACE,
# the dynamo_worker role's dynamo_worker_namespace).
DEFAULT_NAMESPACE = "dynamo"
DEFAULT_COMPONENT = "backend"
PREFILL_COMPONENT = "prefill"
DEFAULT_ENDPOINT_NAME = "generate"


def arg_value(args, flag):
    """The value of ``flag`` in an argument list (``--flag value`` or ``--flag=value``; the last one
    wins), else None."""
    value = None
    args = [str(a) for a in args or []] if isinstance(args, (list, tuple)) else []
    for pos, arg in enumerate(args):
        if arg == flag and pos + 1 < len(args):
            value = args[pos + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
    return value


def block_size(worker):
    """The vLLM block size of a worker: ``--block-size`` in its extra_args, else vLLM's default on GPUs
    (maru.DEFAULT_BLOCK_SIZE, 16). Raises ValueError when the value written is not a positive integer."""
    value = arg_value(worker.get("extra_args"), "--block-size")
    if value is None:
        return _maru.DEFAULT_BLOCK_SIZE
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if size <= 0:
        raise ValueError("--block-size must be a positive integer (got %r)" % (value,))
    return size


def served_model(worker):
    """(the model name a worker serves, the key it comes from): served_model_name, else its model."""
    if worker.get("served_model_name"):
        return str(worker["served_model_name"]), "served_model_name"
    return str(worker.get("model")), "model"


def worker_endpoint(worker, namespace=None, host_env=None):
    """(the Dynamo endpoint a worker registers its model on, as dyn://<ns>.<component>.<endpoint>,
    whether it is the default one). ``namespace``: the host's dynamo_worker_namespace; ``host_env``:
    the host's dynamo_worker_env (its DYN_NAMESPACE wins, as in the worker's environment file, and
    the worker's own env over both)."""
    args = worker.get("extra_args")
    written = worker.get("endpoint") or arg_value(args, "--endpoint")
    if written:
        return str(written), False
    env = worker.get("env") if isinstance(worker.get("env"), dict) else {}
    host_env = host_env if isinstance(host_env, dict) else {}
    ns = (arg_value(args, "--namespace") or env.get("DYN_NAMESPACE") or host_env.get("DYN_NAMESPACE")
          or namespace or DEFAULT_NAMESPACE)
    component = PREFILL_COMPONENT if arg_value(args, "--disaggregation-mode") == "prefill" else DEFAULT_COMPONENT
    return "dyn://%s.%s.%s" % (ns, component, DEFAULT_ENDPOINT_NAME), True


def _endpoint_key(endpoint):
    """dyn://ns.component.endpoint and ns/component/endpoint name one endpoint."""
    text = str(endpoint).strip()
    if text.startswith("dyn://"):
        text = text[len("dyn://"):].replace(".", "/")
    return text


def endpoint_model_errors(host_workers, namespaces=None, host_envs=None):
    """Workers that register different models on one Dynamo endpoint, across hosts or on one host.

    ``host_workers`` maps host -> its worker list (in inventory order); ``namespaces`` host -> its
    dynamo_worker_namespace, ``host_envs`` host -> its dynamo_worker_env. Dynamo keeps one model per
    endpoint path and refuses a second at registration ("Cannot register model 'b' on endpoint
    'dynamo/backend/generate': a different model 'a' is already registered there"): the worker that
    starts second exits (the mocker silently). The message names both workers, their hosts and the
    key each name comes from (served_model_name, else model).

    One name loaded from two sources (model: two paths, even of the same files, or a path and a
    Hugging Face id) is refused too: Dynamo 1.6.1 checksums the model card, the source included,
    and its frontend keeps the first card of an endpoint's worker set and rejects the other
    workers ("Rejected incompatible workers; the first accepted configuration retains the
    WorkerSet", seen in the sandbox): they run and serve no request (HTTP 400 when targeted).
    """
    namespaces, host_envs = dict(namespaces or {}), dict(host_envs or {})
    first, errors = {}, []
    for host, workers in host_workers.items():
        if not isinstance(workers, list):
            continue
        for pos, worker in enumerate(workers):
            if not isinstance(worker, dict) or not worker.get("model"):
                continue
            endpoint, default = worker_endpoint(worker, namespaces.get(host), host_envs.get(host))
            name, key = served_model(worker)
            where = key_label(host, worker, pos, key)
            source = str(worker["model"])
            seen = first.setdefault(_endpoint_key(endpoint), (name, where, source, key_label(host, worker, pos, "model")))
            if seen[0] == name and seen[2] != source:
                errors.append("%s: loads %r for %r on endpoint %s, where %s loads %r: Dynamo checksums the model card, "
                              "the model's path or id included, and its frontend rejects every worker of an endpoint "
                              "whose card differs from the first one's (they run but serve nothing). Give the workers "
                              "of one endpoint the same model (one path, present on every host, or one Hugging Face "
                              "id), or this one its own endpoint and served_model_name"
                              % (key_label(host, worker, pos, "model"), source, name, endpoint, seen[3], seen[2]))
            elif seen[0] != name:
                errors.append("%s: serves %r on endpoint %s (%s), where %s serves %r: Dynamo registers one model per "
                              "endpoint and refuses the second at start. Give one of them its own endpoint "
                              "(dynamo_workers[<worker>].endpoint, e.g. dyn://%s.<component>.generate) or one "
                              "served_model_name"
                              % (where, name, endpoint, "no endpoint set: the default" if default else "its endpoint",
                                 seen[1], seen[0], endpoint[len("dyn://"):].split(".")[0]
                                 if endpoint.startswith("dyn://") else DEFAULT_NAMESPACE))
    return errors


def _maru_extra(worker):
    """kv_connector_extra_config of a worker that uses MaruKVConnector, else None."""
    if not isinstance(worker, dict) or worker.get("engine") == "mocker":
        return None
    try:
        cfg = kv_transfer_config(worker)
    except ValueError:
        return None
    if not cfg or cfg.get("kv_connector") != "MaruKVConnector":
        return None
    extra = cfg.get("kv_connector_extra_config") or {}
    return extra if isinstance(extra, dict) else {}


def maru_server_url(worker):
    """The maru-server URL of a MaruKVConnector worker (upstream's default when unset), else None."""
    extra = _maru_extra(worker)
    if extra is None:
        return None
    return str(extra.get("maru_server_url") or "tcp://localhost:5555")


def maru_pool_size(worker):
    """Bytes a MaruKVConnector worker allocates from the pool (maru_pool_size, upstream's 1G when unset), else None."""
    extra = _maru_extra(worker)
    if extra is None:
        return None
    return _maru.parse_size(extra.get("maru_pool_size") or "1G", "maru_pool_size")


def maru_instance_id(worker):
    """The maru_instance_id a MaruKVConnector worker registers its KV under, else None."""
    extra = _maru_extra(worker)
    if extra is None or not extra.get("maru_instance_id"):
        return None
    return str(extra["maru_instance_id"])


def pool_probe(requires, maru_servers, python, local_maru=False):
    """What to read on a worker host before its workers start (preflight_info's paths, units,
    commands): dynamo_worker_requires' paths and units, maru-server.service where the host runs the
    Maru server its workers use, and one bounded `kvshare_maru_connector wait` per maru-server URL
    (the probe the units run as ExecStartPre)."""
    requires = list(requires or [])
    servers = list(maru_servers or [])
    units = [str(r["unit"]) for r in requires if r.get("unit")]
    if local_maru and servers and "maru-server.service" not in units:
        units.append("maru-server.service")
    return {
        "paths": [str(r["path"]) for r in requires if r.get("path")],
        "units": units,
        "commands": [{"name": url, "argv": [str(python), "-m", "kvshare_maru_connector", "wait", url, "--timeout", "5"]}
                     for url in servers],
    }


def pool_problems(probe):
    """Why the pool the workers require is down, from preflight_info's result (empty when up):
    missing paths, units not active, units systemctl could not read, then what each failing Maru
    server probe printed."""
    probe = probe or {}
    problems = ["path %s is missing" % path for path, info in (probe.get("paths") or {}).items()
                if not (info or {}).get("exists")]
    units = probe.get("units") or {}
    problems += ["unit %s is %s" % (unit, state["ActiveState"]) for unit, state in units.items()
                 if state and state.get("ActiveState") != "active"]
    problems += ["unit %s could not be read" % unit for unit, state in units.items() if not state]
    problems += [(result.get("stderr") or "").strip() or "%s: probe exited %s" % (name, result.get("rc"))
                 for name, result in (probe.get("commands") or {}).items() if result.get("rc") != 0]
    return problems


# Environment a model's staging shares with its workers: where the Hugging Face cache is, which
# hub it comes from. HF_TOKEN is not among them (it reaches the staging on stdin, never argv).
MODEL_ENV_KEYS = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT")
_OFFLINE_TRUE = ("1", "true", "yes", "on")


def model_stages(workers, host_env=None, engine_env=None):
    """The models a host's workers load, each once, in inventory order, to stage before they start.

    Each: ``model`` (as written), ``local`` (an absolute path: checked, never downloaded),
    ``offline`` (HF_HUB_OFFLINE is on in the environment of any of its workers: the engine only
    reads the cache, so the staging only checks it), ``workers`` (names) and ``env`` (the cache and
    hub settings of MODEL_ENV_KEYS its workers run with). ``host_env``: dynamo_worker_env;
    ``engine_env``: the role's per-engine environment; a worker's own ``env`` wins, as in its
    environment file. Workers of one model with different cache settings stage it once each.
    """
    host_env = host_env if isinstance(host_env, dict) else {}
    engine_env = engine_env if isinstance(engine_env, dict) else {}
    stages, index = [], {}
    for worker in workers or []:
        if not isinstance(worker, dict) or not worker.get("model"):
            continue
        env = dict(engine_env.get(worker.get("engine")) or {})
        env.update(host_env)
        env.update(worker.get("env") if isinstance(worker.get("env"), dict) else {})
        model = str(worker["model"])
        cache = dict((key, str(env[key])) for key in MODEL_ENV_KEYS if env.get(key) not in (None, ""))
        key = (model, json.dumps(cache, sort_keys=True))
        if key not in index:
            index[key] = len(stages)
            stages.append({"model": model, "local": model.startswith("/"), "offline": False, "workers": [], "env": cache})
        stage = stages[index[key]]
        stage["workers"].append(str(worker.get("name")))
        if str(env.get("HF_HUB_OFFLINE", "")).strip().lower() in _OFFLINE_TRUE:
            stage["offline"] = True
    return stages


def ready_timeout(base, model_bytes, seconds_per_gib):
    """A worker's readiness timeout: ``base`` seconds plus ``seconds_per_gib`` for each GiB (or
    part of one) of the largest model it may load (``model_bytes``: sizes in bytes)."""
    largest = max([int(size) for size in model_bytes or [] if size is not None] or [0])
    gib = -(-largest // (1 << 30))
    return int(float(base)) + int(gib * float(seconds_per_gib))
