# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters for the KVCR variant: identity, rendered config, cross-host validation."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def kvcr_kv_transfer_config(variant, slot, slot_count, advertise_host, options):
    """The KVCR worker's --kv-transfer-config mapping for the variant."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config as _kvcr_config
    try:
        return _kvcr_config.kv_transfer_config(variant, slot, slot_count, advertise_host, dict(options or {}))
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError("kvcr_kv_transfer_config: %s" % exc) from exc


def kvcr_service_argv(python, options):
    """argv of ``python -m kvcr.kvcr_service``."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config as _kvcr_config
    try:
        return _kvcr_config.service_argv(python, dict(options or {}))
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError("kvcr_service_argv: %s" % exc) from exc


def _hostvar(hostvars, host, name, default=None):
    try:
        value = hostvars[host][name]
    except KeyError:
        return default
    return default if value is None else value


def kvcr_members(hosts, hostvars, default_worker_name):
    """The KVCR hosts as plain data for kvcr_deployment_errors (node, slot, KVCR worker names)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    members = []
    for host in hosts or []:
        node = _hostvar(hostvars, host, "kvcr_node_id") or _stack.host_address(hostvars, host)
        worker = _hostvar(hostvars, host, "kvcr_worker_name", default_worker_name)
        members.append({
            "host": host,
            "address": str(node),
            "slot": _hostvar(hostvars, host, "kvcr_cache_slot"),
            "kvcr_workers": [worker] if worker else [],
        })
    return members


def kvcr_agreement_errors(hosts, hostvars, contract, worker_name, group):
    """Settings that differ between the KVCR hosts (module_utils.kvcr_checks.AGREED_SETTINGS: kvcr_* values,
    the stack contract's (kvshare_service_defaults) for unset ones, and the vLLM --block-size of each
    host's KVCR worker: ``worker_name`` unless the host sets kvcr_worker_name)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_checks as _kvcr_checks
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config as _kvcr_config
    from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as _workers
    host_settings = []
    for host in hosts or []:
        settings = {}
        for key, dummy in _kvcr_checks.AGREED_SETTINGS:
            if key in _kvcr_config.HOST_KEYS:
                settings[key] = _hostvar(hostvars, host, key, contract[key])
        name = _hostvar(hostvars, host, "kvcr_worker_name", worker_name)
        workers = _hostvar(hostvars, host, "dynamo_workers", [])
        for worker in workers if isinstance(workers, list) else []:
            if isinstance(worker, dict) and worker.get("name") == name:
                try:
                    settings["--block-size"] = _workers.block_size(worker)
                except ValueError:
                    settings["--block-size"] = _workers.arg_value(worker.get("extra_args"), "--block-size")
        host_settings.append((str(host), settings))
    return _kvcr_checks.agreement_errors(host_settings, group)


def kvcr_router_modes(hosts, hostvars):
    """{frontend host: dynamo_frontend_router_mode} (the role default 'direct' when unset)."""
    return dict((h, _hostvar(hostvars, h, "dynamo_frontend_router_mode", "direct")) for h in hosts or [])


def kvcr_deployment_errors(members, settings):
    """Cross-host messages (empty list when the KVCR variant is consistent)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_checks as _kvcr_checks
    return _kvcr_checks.deployment_errors(list(members or []), dict(settings or {}))


def kvcr_worker_errors(worker, expected_config, variant, require_hardware=True):
    """Messages about the one KVCR worker of a host."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_checks as _kvcr_checks
    return _kvcr_checks.worker_errors(dict(worker or {}), expected_config, variant, require_hardware)


def kvcr_ucx_envs(gpus, plan=None, overrides=None, tls="", extra_env=None, files=None):
    """{gpu: UCX environment or None} of the KVCR worker's GPUs (plan, override, else the installed file)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_transport as _kvcr_transport
    return _kvcr_transport.ucx_envs(list(gpus or []), plan, overrides, tls, extra_env, files)


def kvcr_rdma_transport_errors(envs, host, gpus, required_tls=None):
    """Why the KVCR worker's GPUs on host would not use RDMA (each message names the GPU and the host).

    ``required_tls`` defaults to the module_utils' REQUIRED_UCX_TLS (read at the call: filter files
    import their module_utils inside the filter, docs/development.md)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_transport as _kvcr_transport
    if required_tls is None:
        required_tls = _kvcr_transport.REQUIRED_UCX_TLS
    return _kvcr_transport.rdma_transport_errors(host, [str(g) for g in gpus or []], dict(envs or {}), required_tls)


def kvcr_hca_errors(plan, host, gpus):
    """Why the HCA port rdma_ucx chose for each of the KVCR worker's GPUs is not GPU-local (PIX/PXB) or not
    InfiniBand/RoCE (each message names the GPU, the host and the variable that chose the port)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_transport as _kvcr_transport
    return _kvcr_transport.hca_errors(host, [str(g) for g in gpus or []], list(plan or []))


def kvcr_memlock_errors(results, host, needs=None):
    """Why the KVCR units' LimitMEMLOCK is too small for what they pin.

    ``results``: the registered loop of ``systemctl show -p LoadState -p LimitMEMLOCK <unit>`` (item =
    unit, stdout), or [{unit, show or limit}]; ``needs``: {unit: {need, what}}."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_transport as _kvcr_transport
    units = []
    for result in results or []:
        unit = result.get("unit", result.get("item"))
        item = {"unit": unit}
        if "limit" in result:
            item["limit"] = result["limit"]
        else:
            item["show"] = result.get("show", result.get("stdout", ""))
        item.update((needs or {}).get(unit) or {})
        units.append(item)
    return _kvcr_transport.memlock_errors(host, units)


def kvcr_pool_limit_error(pool_sizes_gb, guard_count, limit_gb):
    """Why the memory service's pools exceed kvcr_service_pool_limit_gb ('' when they fit)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_transport as _kvcr_transport
    try:
        return _kvcr_transport.pool_limit_error(guard_count, pool_sizes_gb, limit_gb)
    except (TypeError, ValueError) as exc:
        return "kvcr_service_pool_sizes_gb / kvcr_service_pool_limit_gb: %s" % exc


def kvcr_transport_proof_errors(sides):
    """Why the UCX logs {side: [before, after]} do not prove an RDMA (rc_mlx5) resend ([] when they do)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_guard as _kvcr_guard
    return _kvcr_guard.transport_proof_errors(dict((k, tuple(v)) for k, v in (sides or {}).items()))


def kvcr_advertise_host_error(host):
    """Why host cannot be advertised to the state agent and peers ('' when it can)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_checks as _kvcr_checks
    return _kvcr_checks.advertise_host_error(host) or ""


def _delta(before, after, key):
    b, a = (before or {}).get(key), (after or {}).get(key)
    return None if a is None or b is None else int(a) - int(b)


def kvcr_rdma_errors(payload_bytes, source_before, source_after, target_before, target_after):
    """Why the source transmit / target receive deltas (kvcr_rdma_counters_info results) miss the payload."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_guard as _kvcr_guard
    return _kvcr_guard.rdma_errors(_delta(source_before, source_after, "xmit_bytes"),
                                   _delta(target_before, target_after, "rcv_bytes"), payload_bytes)


def kvcr_guard_workers(hosts, hostvars, worker_name="kvcr"):
    """[{name: host, system_url, rpc_port}] of each host's KVCR worker (for kvcr_guard_check)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    out = []
    for host in hosts or []:
        name = _hostvar(hostvars, host, "kvcr_worker_name", worker_name)
        workers = [w for w in _hostvar(hostvars, host, "dynamo_workers", []) or [] if w.get("name") == name]
        if len(workers) != 1:
            raise AnsibleFilterError("kvcr_guard_workers: %s has no worker named %s" % (host, name))
        spec = {"name": host, "system_url": _stack.worker_system_url(hostvars, host, workers[0]["system_port"])}
        if workers[0].get("rpc_port"):
            spec["rpc_port"] = int(workers[0]["rpc_port"])
        out.append(spec)
    return out


class FilterModule:
    """kvshare.dynamo KVCR filters."""

    def filters(self):
        return {
            "kvcr_kv_transfer_config": kvcr_kv_transfer_config,
            "kvcr_service_argv": kvcr_service_argv,
            "kvcr_members": kvcr_members,
            "kvcr_router_modes": kvcr_router_modes,
            "kvcr_deployment_errors": kvcr_deployment_errors,
            "kvcr_agreement_errors": kvcr_agreement_errors,
            "kvcr_worker_errors": kvcr_worker_errors,
            "kvcr_advertise_host_error": kvcr_advertise_host_error,
            "kvcr_ucx_envs": kvcr_ucx_envs,
            "kvcr_rdma_transport_errors": kvcr_rdma_transport_errors,
            "kvcr_pool_limit_error": kvcr_pool_limit_error,
            "kvcr_transport_proof_errors": kvcr_transport_proof_errors,
            "kvcr_rdma_errors": kvcr_rdma_errors,
            "kvcr_hca_errors": kvcr_hca_errors,
            "kvcr_memlock_errors": kvcr_memlock_errors,
            "kvcr_guard_workers": kvcr_guard_workers,
        }
