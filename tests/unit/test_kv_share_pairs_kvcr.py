# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""verify.yml's pairs on KVCR: engines with one compatibility digest share one pool across hosts.

The workers of inventories/two_node_kvcr are resolved as every playbook resolves them
(kv_pools.host_workers over the inventory's own variables, read by Ansible's inventory and
variable managers), then paired by workers.share_pairs, which verify.yml calls through the
kv_share_pairs filter. Before, each KVCR host's engine was its own pool ("cfg:<host>:...") and
verify.yml found no pair unless the operator named one.
"""
import os

import pytest

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools, workers
from lib.sandbox import service_defaults

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def no_fact_cache(monkeypatch):
    """The inventory's own variables only (ansible.cfg's cache plugin needs a collection loader)."""
    from ansible import constants
    monkeypatch.setattr(constants, "CACHE_PLUGIN", "memory")


def resolved(inventory):
    """({host: resolved workers}, groups) of an example inventory."""
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[os.path.join(REPO, "inventories", inventory)])
    hostvars = HostVars(inventory=inv, variable_manager=VariableManager(loader=loader, inventory=inv), loader=loader)
    groups = inv.get_groups_dict()
    return dict((h, kv_pools.host_workers(h, hostvars, groups, service_defaults())) for h in groups.get("dynamo_workers", [])), groups


def test_two_node_kvcr_gets_its_cross_host_pair_without_kvshare_verify_pairs():
    host_workers, dummy = resolved("two_node_kvcr")
    assert sorted(host_workers) == ["gpu-a", "gpu-b"]
    ids = set(workers.pool_id(h, w) for h, ws in host_workers.items() for w in ws)
    assert ids == {"kvcr:qwen3-0.6b-example-v1"}
    pairs = workers.share_pairs(host_workers)
    assert [(p["a"]["host"], p["a"]["worker"]["name"], p["b"]["host"], p["b"]["worker"]["name"]) for p in pairs] \
        == [("gpu-a", "kvcr", "gpu-b", "kvcr")]
    # B waits on A's own count of KV written to the KVCR tier; there is no Maru server to ask.
    assert pairs[0]["store_metric"] == {"name": "vllm:kv_offload_tiering_write_bytes_total",
                                        "labels": {"tier": "1:kvcr"}}
    assert pairs[0]["maru_server"] is None


def _kvcr_worker(name, digest, slot):
    return {"name": name, "engine": "vllm", "model": "m", "kv_transfer_config": {
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "secondary_tiers": [
            {"type": "kvcr", "compatibility_digest": digest, "control_host": "127.0.30.%d" % slot}]}}}


def test_kvcr_engines_with_another_digest_do_not_pair():
    host_workers = {"a": [_kvcr_worker("w", "model-x", 1)], "b": [_kvcr_worker("w", "model-y", 2)]}
    assert workers.share_pairs(host_workers) == []
    assert workers.pool_id("a", host_workers["a"][0]) == "kvcr:model-x"


def test_kvcr_pool_on_one_host_pairs_there_and_across():
    host_workers = {"a": [_kvcr_worker("w0", "d", 1), _kvcr_worker("w1", "d", 1)], "b": [_kvcr_worker("w", "d", 2)]}
    got = [("%s/%s" % (p["a"]["host"], p["a"]["worker"]["name"]), "%s/%s" % (p["b"]["host"], p["b"]["worker"]["name"]))
           for p in workers.share_pairs(host_workers)]
    assert got == [("a/w0", "a/w1"), ("a/w0", "b/w")]


@pytest.mark.parametrize("worker", [
    {"name": "m", "engine": "mocker", "model": "m"},
    {"name": "e", "engine": "vllm", "model": "m",
     "kv_transfer_config": {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                            "kv_connector_extra_config": {"shared_storage_path": "/x"}}},
    {"name": "t", "engine": "vllm", "model": "m",
     "kv_transfer_config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                            "kv_connector_extra_config": {"secondary_tiers": [{"type": "cpu"}]}}},
], ids=["mocker", "example_connector", "other_tier"])
def test_no_store_metric_without_a_kvcr_tier(worker):
    assert workers.store_metric(worker) is None
    assert not (workers.pool_id("h", worker) or "").startswith("kvcr:")
