# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Internal filters (kvshare.dynamo.internal.*) of the Dynamo roles and playbooks: worker start
waves, validation, systemd quoting, readiness and verify.yml's diagnosis."""

from __future__ import annotations

import json
import re
from ansible.errors import AnsibleFilterError


def worker_start_waves(workers):
    """Names of the workers to start together, wave by wave (same-GPU workers serialised)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    try:
        return _workers.start_waves(list(workers or []))
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError("worker_start_waves: malformed worker list: %s" % exc) from exc


def worker_model_stages(workers, host_env=None, engine_env=None):
    """The models a host's workers load, each once, with how to stage them (module_utils/workers.py)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    try:
        return _workers.model_stages(workers, host_env, engine_env)
    except (TypeError, AttributeError) as exc:
        raise AnsibleFilterError("worker_model_stages: malformed worker list: %s" % exc) from exc


def worker_ready_timeout(model_bytes, base, seconds_per_gib):
    """The readiness timeout for workers whose largest model has the given size (bytes)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    try:
        return _workers.ready_timeout(base, model_bytes, seconds_per_gib)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("worker_ready_timeout: %s" % exc) from exc


def worker_gpu_order(workers):
    """{name: {after, before}}: the neighbours of each worker in its GPU's start order."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    return _workers.gpu_order(list(workers or []))


def worker_errors(workers, host, frontend_hosts=None):
    """Validation messages for one host's dynamo_workers (empty list when valid)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    return _workers.worker_errors(workers, host, frontend_hosts)


def _kv_transfer_config(worker):
    """The worker's KV transfer config as a mapping, or None."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    try:
        return _workers.kv_transfer_config(worker)
    except ValueError as exc:
        raise AnsibleFilterError("kv_transfer_config of worker %s %s" % (worker.get("name"), exc)) from exc


def _systemd_quote(value):
    """Quote one argument for an ExecStart= line (specifiers and variables escaped)."""
    text = str(value)
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"%s"' % text


def systemd_command(argv):
    """Join argv into an ExecStart= command line; every argument after the program is quoted."""
    argv = [str(a) for a in argv]
    if not argv:
        raise AnsibleFilterError("systemd_command: empty command")
    program = argv[0]
    if not re.match(r"^/[A-Za-z0-9/._+-]+$", program):
        raise AnsibleFilterError("systemd_command: program must be an absolute plain path, got %r" % program)
    return " ".join([program] + [_systemd_quote(a) for a in argv[1:]])


def worker_argv(worker, python, discovery_backend="etcd"):
    """The command line of one worker (dynamo.vllm or dynamo.mocker)."""
    engine = worker.get("engine")
    model = str(worker["model"])
    served = worker.get("served_model_name")
    if engine == "vllm":
        argv = [python, "-m", "dynamo.vllm", "--model", model]
        if served:
            argv += ["--served-model-name", str(served)]
    elif engine == "mocker":
        argv = [python, "-m", "dynamo.mocker", "--model-path", model]
        if served:
            argv += ["--model-name", str(served)]
    else:
        raise AnsibleFilterError("worker_argv: unknown engine %r for worker %s" % (engine, worker.get("name")))
    argv += ["--discovery-backend", discovery_backend]
    if worker.get("endpoint"):
        argv += ["--endpoint", str(worker["endpoint"])]
    if engine == "vllm":
        if worker.get("gpu_memory_utilization") is not None:
            argv += ["--gpu-memory-utilization", str(worker["gpu_memory_utilization"])]
        # With the pool as the only cache, the external hit rate measures the pool alone.
        if worker.get("prefix_caching") is False:
            argv += ["--no-enable-prefix-caching"]
        cfg = _kv_transfer_config(worker)
        if cfg is not None:
            argv += ["--kv-transfer-config", json.dumps(cfg, sort_keys=True, separators=(",", ":"))]
    argv += [str(a) for a in worker.get("extra_args") or []]
    return argv


def worker_probe_targets(workers, bind_address, started=None):
    """What the readiness and verify modules need to find each worker through the frontend.

    With `started` (the names of the workers this run started or restarted: the unit watch's
    `started`), a worker not named there was already running and was left alone: its registration
    is the proof, it needs no completion."""
    started = None if started is None else set(started)
    targets = []
    for worker in workers or []:
        target = {
            "name": worker["name"],
            "model": str(worker.get("served_model_name") or worker["model"]),
            "system_url": "http://%s:%s" % (bind_address, worker["system_port"]),
        }
        if worker.get("rpc_port"):
            target["rpc_port"] = int(worker["rpc_port"])
        if started is not None:
            target["completion_probe"] = worker["name"] in started
        targets.append(target)
    return targets


def worker_watch_units(workers, bind_address, start=False, restart=None, waves=None):
    """What dynamo_worker_unit_watch needs for each worker: its unit and its own /health; with
    `start`, the module starts the unit first (`started`), or restarts it when its name is in
    `restart` (its configuration changed, or it was late). With `waves` (lists of names), each
    unit carries the index of the wave that names it."""
    restart = set(restart or [])
    wave_of = {}
    for index, names in enumerate(waves or []):
        for name in names:
            wave_of[name] = index
    units = []
    for target in worker_probe_targets(workers, bind_address):
        unit = {"name": target["name"], "unit": "dynamo-worker@%s.service" % target["name"],
                "health_url": target["system_url"] + "/health"}
        if start:
            unit["start"] = "restarted" if target["name"] in restart else "started"
        if target["name"] in wave_of:
            unit["wave"] = wave_of[target["name"]]
        units.append(unit)
    return units


def unit_watch_line(report):
    """One line on a unit from dynamo_worker_unit_watch's result, for messages."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import unit_watch as _unit_watch
    return _unit_watch.describe(report)


def verify_check_runs(pairs, hostvars, contract, default_host):
    """kv_share_check runs for verify.yml's pairs, one per host (module_utils.workers.check_runs);
    ``contract``: kvshare_service_defaults (the Dynamo venv's default root)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers

    def python(host):
        root = hostvars[host].get("dynamo_runtime_venv_root") or dict(contract)["dynamo_runtime_venv_root"]
        return "%s/current/bin/python" % root
    return _workers.check_runs(pairs, lambda host: _stack.host_address(hostvars, host), python, default_host)


def verify_outcomes(results):
    """Each pair's verdict from the looped kv_share_check results (module_utils.workers.check_outcomes)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    return _workers.check_outcomes(results)


def verify_summary(outcomes):
    """verify.yml's report lines from verify_outcomes (module_utils.workers.check_summary)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    return _workers.check_summary(outcomes)


def verify_diagnosis_units(host, hostvars, groups):
    """Pool units and workers verify.yml watches on a host when sharing is not proven."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    from ansible_collections.kvshare.dynamo.plugins.module_utils import unit_watch as _unit_watch
    hv = hostvars[host]
    host_groups = [g for g, members in (groups or {}).items() if host in members]
    return _unit_watch.diagnosis_units(host, host_groups, hv.get("dynamo_workers") or [],
                                       _stack.bind_address_of(hv))


def verify_diagnosis(results):
    """Lines on what is wrong, from the looped dynamo_worker_unit_watch results (item = host)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import unit_watch as _unit_watch
    lines = []
    for res in results or []:
        lines.extend(_unit_watch.diagnosis_lines(res.get("item"), res.get("units") or []))
    return lines


def verify_pool_space(results):
    """Lines naming a full Maru pool, from the looped `kvshare_maru_connector usage` results.

    Each result's item is a failed kv_share_check result, whose own item is the pair.
    """
    from ansible_collections.kvshare.dynamo.plugins.module_utils import maru as _maru
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    lines = []
    for res in results or []:
        pair = (res.get("item") or {}).get("item") or {}
        if res.get("skipped") or res.get("rc") != 0 or not pair.get("maru_server"):
            continue  # an unreachable maru-server is reported by the reachability check
        try:
            usage = json.loads(res.get("stdout") or "")
        except ValueError:
            continue
        need = _workers.maru_pool_size(pair["a"]["worker"])
        line = _maru.pool_space_problem(pair["maru_server"], usage if isinstance(usage, dict) else {}, need or 0,
                                        "worker A %s/%s" % (pair["a"]["host"], pair["a"]["worker"]["name"]))
        if line and line not in lines:
            lines.append(line)
    return lines


def verify_pool_paths(hosts, hostvars):
    """[host, path] for every pool path (dynamo_worker_requires `path`, not a device) of the hosts."""
    out = []
    for host in hosts or []:
        for req in hostvars[host].get("dynamo_worker_requires") or []:
            path = req.get("path") if isinstance(req, dict) else None
            if path and not str(path).startswith("/dev/"):
                out.append([host, str(path)])
    return out


def format_text(value, template):
    """str.format of a template with a mapping's keys or a list's items."""
    if isinstance(value, dict):
        return template.format(**value)
    return template.format(*value)


def worker_maru_servers(workers):
    """Sorted maru-server URLs the host's MaruKVConnector workers use."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    return sorted({url for url in (_workers.maru_server_url(w) for w in workers or []) if url})


def worker_pool_probe(requires, maru_servers, python, local_maru=False):
    """preflight_info's paths, units and commands for the pool a host's workers require."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    try:
        return _workers.pool_probe(requires, maru_servers, python, bool(local_maru))
    except (AttributeError, KeyError, TypeError) as exc:
        raise AnsibleFilterError("worker_pool_probe: malformed dynamo_worker_requires: %s" % exc) from exc


def worker_pool_problems(probe):
    """Why the pool the workers require is down, from preflight_info's result (empty when up)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    return _workers.pool_problems(probe)


def _fmt(value, spec="%s", none="-"):
    return none if value is None else spec % value


def kv_share_table(reports):
    """Render kv_share_check reports as a fixed-width table (one line per pair)."""
    head = ("pair", "hosts", "tokens", "B hit rate", "A hits", "TTFT A", "TTFT B", "speedup", "verdict")
    rows = [head]
    for rep in reports or []:
        report = rep.get("report") or {}
        a, b = report.get("worker_a") or {}, report.get("worker_b") or {}
        deltas_a = report.get("a") or {}
        rows.append((
            str(report.get("pair") or "%s -> %s" % (a.get("name"), b.get("name"))),
            "%s -> %s" % (rep.get("host_a", "?"), rep.get("host_b", "?")),
            _fmt(report.get("prompt_tokens"), "%d"),
            _fmt(report.get("b_hit_rate"), "%.3f"),
            _fmt(deltas_a.get("hits"), "%d"),
            _fmt(report.get("ttft_a_s"), "%.3fs"),
            _fmt(report.get("ttft_b_s"), "%.3fs"),
            _fmt(report.get("speedup"), "%.2fx"),
            str(rep.get("verdict") or report.get("verdict") or "?"),
        ))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    return ["  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]


def ready_summary(results):
    """One line per worker from dynamo_workers_ready's `workers` result."""
    lines = []
    for res in results or []:
        if res.get("ready") and res.get("completion_probe") is False:
            lines.append("%s: left running, registered as instance %s (no completion needed)" % (
                res.get("name"), res.get("instance_id_str")))
        elif res.get("ready"):
            lines.append("%s: registered after %.1f s, ready after %.1f s, instance %s" % (
                res.get("name"), res.get("registered_after_s") or 0.0, res.get("ready_after_s") or 0.0,
                res.get("instance_id_str")))
        else:
            lines.append("%s: NOT READY (%s)" % (res.get("name"), res.get("last_error") or res.get("last_probe")))
    return lines


class FilterModule:
    """kvshare.dynamo internal filters (dynamo)."""

    def filters(self):
        return {
            "format_text": format_text,
            "kv_share_table": kv_share_table,
            "ready_summary": ready_summary,
            "systemd_command": systemd_command,
            "unit_watch_line": unit_watch_line,
            "verify_check_runs": verify_check_runs,
            "verify_diagnosis": verify_diagnosis,
            "verify_diagnosis_units": verify_diagnosis_units,
            "verify_outcomes": verify_outcomes,
            "verify_pool_paths": verify_pool_paths,
            "verify_pool_space": verify_pool_space,
            "verify_summary": verify_summary,
            "worker_argv": worker_argv,
            "worker_errors": worker_errors,
            "worker_gpu_order": worker_gpu_order,
            "worker_maru_servers": worker_maru_servers,
            "worker_model_stages": worker_model_stages,
            "worker_pool_probe": worker_pool_probe,
            "worker_pool_problems": worker_pool_problems,
            "worker_probe_targets": worker_probe_targets,
            "worker_ready_timeout": worker_ready_timeout,
            "worker_start_waves": worker_start_waves,
            "worker_watch_units": worker_watch_units,
        }
