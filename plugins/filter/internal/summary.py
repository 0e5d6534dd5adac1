# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The closing summary of site.yml, from what the inventory and the run already know (no probes)."""

from __future__ import annotations


def _table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _pool(worker):
    config = worker.get("kv_transfer_config") or {}
    if not isinstance(config, dict):
        return "custom"
    extra = config.get("kv_connector_extra_config") or {}
    if config.get("kv_connector") == "MaruKVConnector":
        return "maru %s" % extra.get("maru_server_url", "")
    return config.get("kv_connector") or "-"


def stack_summary(groups, hostvars, service_defaults, inventory=""):
    """Lines: the frontend URL, one row per worker (host, GPUs, name, engine, model, pool), next steps."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as _kv_pools
    from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
    groups = groups or {}
    url = _stack.frontend_url(hostvars, groups, dict(service_defaults))
    rows = [("host", "gpus", "worker", "engine", "model", "system port", "KV pool")]
    models = set()
    for host in groups.get("dynamo_workers") or []:
        workers = _kv_pools.host_workers(host, hostvars, groups, dict(service_defaults))
        for worker in sorted(workers, key=lambda w: (",".join(str(g) for g in w.get("gpus") or []), str(w.get("name")))):
            model = worker.get("model") or ("mocker" if worker.get("engine") == "mocker" else "")
            models.add(model)
            rows.append((host, ",".join(str(g) for g in worker.get("gpus") or []) or "-", worker.get("name", "?"),
                         worker.get("engine", "vllm"), model or "-", worker.get("system_port", "-"), _pool(worker)))
    inv = " -i %s" % inventory if inventory else ""
    frontend = "frontend: none in this inventory"
    if url:
        frontend = "frontend: %s  (OpenAI API: %s/v1/models, %s/v1/chat/completions)" % (url, url, url)
    named = ", ".join(sorted(m for m in models if m)) or "none"
    hosts = len(groups.get("dynamo_workers") or [])
    lines = ["kvshare.dynamo: stack rolled out", frontend,
             "workers: %d on %d host(s), models: %s" % (len(rows) - 1, hosts, named), ""]
    if len(rows) > 1:
        lines += _table(rows) + [""]
    lines += ["next:",
              "  ansible-playbook%s verify.yml               # prove that workers share KV through the pool" % inv,
              "  ansible-playbook%s playbooks/status.yml     # one table of units, workers and hit rates" % inv]
    if url:
        lines.append("  curl -s %s/v1/models                       # what the frontend serves" % url)
    return lines


class FilterModule:
    """kvshare.dynamo summary filter."""

    def filters(self):
        return {"stack_summary": stack_summary}
