# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The pool is real upstream Maru (resource manager + maru-server at the pinned commit) on the fake
FS_DAX pool, its workers are bound to it (systemd), and B's answer really comes from the pool's data.
That the workers on the pool's host restart with maru-server is fault 12's recovery (tests/faults)."""
import base64
import importlib.util
import json
import os
import re
import sys

from conftest import HOSTVARS, REPO, address, group, wait_for, workers
from lib.sandbox import service_defaults

# The collection's module_utils by FQCN: collections/ links to this checkout.
if os.path.join(REPO, "collections") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "collections"))
from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools  # noqa: E402

POOL = group("maru_pool")[0]
SERVER = "tcp://%s:5555" % address(POOL)
MOUNT = "/mnt/maru-fsdax/pmem0"
VENV_PY = "/opt/dynamo/venvs/current/bin/python"


def _maru_workers():
    """(host, worker) of every MaruKVConnector worker, as its pool (kv_pool) configures it (from the raw
    inventory: the connector and maru_instance_id it gets need no templating)."""
    groups = dict((name, group(name)) for name in ("maru_pool", "dynamo_workers", "kvcr"))
    resolved = [(h, kv_pools.resolve_workers(h, [w], HOSTVARS, groups, service_defaults())[0]) for h, w in workers()]
    return [(h, w) for h, w in resolved if (w.get("kv_transfer_config") or {}).get("kv_connector") == "MaruKVConnector"]


def test_resource_manager_serves_one_fsdax_pool(hosts):
    out = hosts[POOL].check_output("maru_test_client -H %s -p 9850 stats" % address(POOL))
    assert re.search(r"Pools:\s*1\b", out), out
    assert "FS_DAX" in out and MOUNT in out, out


def test_liveness_probe_hears_both_pool_services(hosts):
    """maru-pool-health.timer runs, and its last rounds heard the resource manager (pool statistics)
    and maru-server (heartbeat) of their current invocations: both probes speak upstream Maru's own
    protocols and get answers (a frozen maru-server is fault 12's recovery)."""
    h = hosts[POOL]
    timer = h.service("maru-pool-health.timer")
    assert timer.is_running and timer.is_enabled

    # A round on a busy machine may miss one answer (1 failure of 3, by design): the check waits for
    # a round that heard both, and fails on a restart.
    def heard():
        state = json.loads(h.check_output("cat /run/maru-pool-health/state.json 2>/dev/null || echo {}"))
        current = dict((u, h.check_output("systemctl show -p InvocationID --value %s" % u).strip())
                       for u in ("maru-resource-manager.service", "maru-server.service"))
        return all(state.get(u, {}).get("live") and state[u].get("invocation") == inv and state[u].get("failures") == 0
                   for u, inv in current.items())
    wait_for(heard, timeout=30, interval=1, what="a round of the pool's liveness probe that heard both services")
    assert "restarted" not in h.check_output("journalctl --no-pager -o cat -u maru-pool-health.service"), "a pool service was restarted"


def test_pool_files_belong_to_the_workers_account(hosts):
    h = hosts[POOL]
    assert h.check_output("systemctl show -p User --value maru-resource-manager") == "dynamo"
    files = h.check_output("stat -c '%%U %%a %%n' %s/maru_*.dat" % MOUNT).splitlines()
    assert files and all(line.startswith("dynamo 600 ") for line in files), files


def test_connector_layout_against_vllm_in_the_worker_venv(hosts):
    """tests/unit/test_kvshare_maru_connector.py, run where vLLM 0.31 (CPU) and Maru are installed."""
    h = hosts[POOL]
    src = open(os.path.join(REPO, "tests", "unit", "test_kvshare_maru_connector.py"), "rb").read()
    h.check_output("echo %s | base64 -d > /root/test_kvshare_maru_connector.py" % base64.b64encode(src).decode())
    res = h.run("cd /root && %s test_kvshare_maru_connector.py" % VENV_PY)
    assert res.rc == 0 and "5 passed, 0 failed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]


def test_workers_wait_for_the_pool_and_local_ones_are_part_of_it(hosts):
    """Every Maru worker waits for maru-server before it starts; the ones on the pool's host are
    PartOf it (systemd restarts them with it, with or without Ansible)."""
    maru = _maru_workers()
    assert {h for h, dummy in maru} == {POOL, "sb3"}, maru
    for host, w in maru:
        unit = "dynamo-worker@%s" % w["name"]
        pre = hosts[host].check_output("systemctl show -p ExecStartPre --value %s" % unit)
        assert "kvshare_maru_connector wait %s" % SERVER in pre.replace(" ;", "").replace("argv[]=", ""), pre
        part_of = hosts[host].check_output("systemctl show -p PartOf --value %s" % unit).split()
        assert ("maru-server.service" in part_of) == (host == POOL), (host, part_of)


def _kv_share_check():
    # The module imports the collection by its FQCN: collections/ links to this checkout.
    if os.path.join(REPO, "collections") not in sys.path:
        sys.path.insert(0, os.path.join(REPO, "collections"))
    path = os.path.join(REPO, "plugins", "modules", "kv_share_check.py")
    spec = importlib.util.spec_from_file_location("kv_share_check_module", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_negative_control_zeroed_pool_changes_b(hosts):
    """A stores, the pool's files are zeroed, then B: B still loads from Maru (hits), but its answer
    changes, so B's KV really came from the pool's memory (shared/docs/maru_real.md's control)."""
    mod = _kv_share_check()
    h = hosts[POOL]
    (a_host, a), (b_host, b) = [(hh, w) for hh, w in _maru_workers() if hh == POOL][:2]

    def stored():
        usage = json.loads(h.check_output("%s -m kvshare_maru_connector usage %s" % (VENV_PY, SERVER)))
        return mod.pool_bytes(usage, a["kv_transfer_config"]["kv_connector_extra_config"]["maru_instance_id"])

    def zero_pool():
        h.check_output("for f in %s/maru_*.dat; do dd if=/dev/zero of=$f bs=1M count=$(( $(stat -c %%s $f) / 1048576 ))"
                       " conv=notrunc status=none; done" % MOUNT)

    def target(host, w):
        return {"name": "%s/%s" % (host, w["name"]), "engine": "vllm", "rpc_port": w["rpc_port"],
                "system_url": "http://%s:%s" % (address(host), w["system_port"])}

    report = mod.run_check("http://%s:8000" % address(group("dynamo_frontend")[0]), a["served_model_name"],
                           target(a_host, a), target(b_host, b), max_tokens=16, request_timeout=120,
                           store_bytes=stored, between=zero_pool)
    assert report["store"]["error"] is None, report["store"]
    assert report["b"]["hits"] >= report["prompt_tokens"] / 2, report["b"]
    assert report["texts_identical"] is False, (report["request_a"], report["request_b"])
    assert report["verdict"] == "failed"
    assert any(c["name"] == "texts_identical" and c["ok"] is False for c in report["checks"])
