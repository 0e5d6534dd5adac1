# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.kvcr_checks: the advertise host, cross-host checks, the KVCR worker, settings every host shares."""
import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_checks
from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config
from lib.sandbox import service_defaults


@pytest.mark.parametrize("host,bad", [
    ("10.0.1.11", False), ("gpu-a.example", False), ("[fd00::1]", False),
    ("127.0.40.1", True), ("0.0.0.0", True), ("localhost", True), ("*", True), ("10.0.1.11:80", True),
    ("tcp://10.0.1.11", True), ("[::1]", True), ("", True),
])
def test_advertise_host(host, bad):
    assert (kvcr_checks.advertise_host_error(host) is not None) is bad


# ---------------------------------------------------------------- cross-host checks

def good_settings(**kw):
    settings = {"variant": "memory_service", "slot_count": 2, "compatibility_digest": "qwen3-0.6b-example-v1",
                "require_two_nodes": True, "router_modes": {"gpu-a": "kv"}, "discovery_backend": "etcd"}
    settings.update(kw)
    return settings


def members(*specs):
    return [{"host": h, "address": a, "slot": s, "kvcr_workers": ["kvcr"]} for h, a, s in specs]


GOOD = members(("gpu-a", "10.0.1.11", 0), ("gpu-b", "10.0.1.12", 1))


def test_good_deployment():
    assert kvcr_checks.deployment_errors(GOOD, good_settings()) == []
    assert kvcr_checks.deployment_errors(GOOD, good_settings(variant="process_local", compatibility_digest="")) == []


def test_duplicate_slot():
    errs = kvcr_checks.deployment_errors(members(("gpu-a", "10.0.1.11", 0), ("gpu-b", "10.0.1.12", 0)), good_settings())
    assert errs == ["kvcr_cache_slot 0 on gpu-b is already used by gpu-a: cache owner ids must be unique"]


def test_out_of_range_and_missing_slots():
    errs = kvcr_checks.deployment_errors(members(("gpu-a", "10.0.1.11", 2), ("gpu-b", "10.0.1.12", None)), good_settings())
    assert "kvcr_cache_slot 2 on gpu-a is outside [0, 2) (kvcr_cache_slot_count)" in errs
    assert any(e.startswith("kvcr_cache_slot on gpu-b must be a non-negative integer") for e in errs)


def test_both_workers_on_one_machine():
    errs = kvcr_checks.deployment_errors(members(("gpu-a", "10.0.1.11", 0), ("gpu-a2", "10.0.1.11", 1)), good_settings())
    assert any("gpu-a, gpu-a2 are one machine (10.0.1.11)" in e for e in errs)
    assert any("at least two nodes" in e for e in errs)
    # allowed when the variant does not require two nodes
    assert kvcr_checks.deployment_errors(members(("gpu-a", "10.0.1.11", 0), ("gpu-a2", "10.0.1.11", 1)),
                                         good_settings(require_two_nodes=False)) == []


def test_single_host_refused_and_two_workers_on_a_host():
    errs = kvcr_checks.deployment_errors(members(("gpu-a", "10.0.1.11", 0)), good_settings())
    assert any("at least two nodes" in e for e in errs)
    two = [{"host": "gpu-a", "address": "a", "slot": 0, "kvcr_workers": ["k0", "k1"]},
           {"host": "gpu-b", "address": "b", "slot": 1, "kvcr_workers": ["kvcr"]}]
    assert any("exactly one worker must be bound to KVCR" in e for e in kvcr_checks.deployment_errors(two, good_settings()))


def test_digest_and_router_mode_and_variant():
    assert any("kvcr_compatibility_digest is required" in e
               for e in kvcr_checks.deployment_errors(GOOD, good_settings(compatibility_digest="")))
    assert any("may only contain" in e for e in kvcr_checks.deployment_errors(GOOD, good_settings(compatibility_digest="a b")))
    errs = kvcr_checks.deployment_errors(GOOD, good_settings(router_modes={"gpu-a": "direct"}))
    assert any("dynamo_frontend_router_mode on gpu-a is 'direct'" in e for e in errs)
    assert any("no frontend" in e for e in kvcr_checks.deployment_errors(GOOD, good_settings(router_modes={})))
    assert any("kvcr_variant must be one of" in e for e in kvcr_checks.deployment_errors(GOOD, good_settings(variant="x")))
    assert any("etcd discovery" in e for e in kvcr_checks.deployment_errors(GOOD, good_settings(discovery_backend="file")))
    assert any("3 KVCR workers" in e for e in kvcr_checks.deployment_errors(
        members(("a", "1", 0), ("b", "2", 1), ("c", "3", 1)), good_settings()))


def test_worker_errors():
    cfg = kvcr_config.host_worker_settings({"kvcr_cache_slot": 0, "kvshare_bind_address": "10.0.1.11"},
                                           service_defaults())["kv_transfer_config"]
    pool = {"type": "kvcr", "host": "g0"}  # the worker as its pool configures it (module_utils.kv_pools)
    good = {"name": "kvcr", "engine": "vllm", "gpus": ["0"], "kv_transfer_config": cfg, "kv_pool": pool,
            "extra_args": ["--kv-events-config", "{}"]}
    assert kvcr_checks.worker_errors(good, cfg, "memory_service") == []
    bad = dict(good, prefix_caching=False, gpus=[], kv_transfer_config={"kv_connector": "X"}, extra_args=[])
    assert len(kvcr_checks.worker_errors(bad, cfg, "memory_service")) == 4
    mock = {"name": "kvcr", "engine": "mocker", "kv_pool": pool}
    assert kvcr_checks.worker_errors(mock, cfg, "memory_service", require_hardware=False) == []
    assert "engine must be vllm" in kvcr_checks.worker_errors(mock, cfg, "memory_service")[0]
    # the worker names its pool: the connector is never hand-written
    for worker in (dict(good, kv_pool=None), dict(good, kv_pool={"type": "maru", "host": "g0"})):
        assert kvcr_checks.worker_errors(worker, cfg, "memory_service") == [
            "worker kvcr: must name its pool, kv_pool: kvcr (its kv_transfer_config, env and --kv-events-config come "
            "from this host's KVCR slot)"]


def test_settings_that_must_agree_across_kvcr_hosts():
    """Each host reads its own copy (issue 34): a per-host kvcr_cache_slot_count that differs is refused,
    naming every host with its value; 2 and "2" are one value."""
    same = {"kvcr_variant": "memory_service", "kvcr_cache_slot_count": 2, "kvcr_hash_seed": 0, "--block-size": 64}
    assert kvcr_checks.agreement_errors([("gpu-a", same), ("gpu-b", dict(same, kvcr_cache_slot_count="2"))]) == []
    assert kvcr_checks.agreement_errors([("gpu-a", same), ("gpu-b", dict(same, kvcr_cache_slot_count=3))]) == [
        "kvcr_cache_slot_count differs between the KVCR hosts: 2 on gpu-a, 3 on gpu-b. Every host of group kvcr needs "
        "one value: every worker's KVCR_CACHE_SLOT_COUNT and the state agent's slots; set it once, in the group's "
        "variables"]
    errs = kvcr_checks.agreement_errors([("a", same), ("b", dict(same, kvcr_hash_seed=1, **{"--block-size": 16})),
                                         ("c", dict(same, kvcr_compatibility_digest=""))], group="kv")
    assert [e.split(" differs")[0] for e in errs] == ["kvcr_hash_seed", "the KVCR workers' vLLM --block-size"]
    assert "0 on a, 1 on b, 0 on c" in errs[0] and "Every host of group kv needs" in errs[0]
    assert errs[1].startswith("the KVCR workers' vLLM --block-size differs between the KVCR hosts: 64 on a, 16 on b, 64 on c")
    # a host without the setting (no KVCR worker) is left to the worker checks
    assert kvcr_checks.agreement_errors([("a", {"--block-size": 64}), ("b", {})]) == []
    assert kvcr_checks.agreement_errors([("a", {"kvcr_compatibility_digest": "x"}), ("b", {"kvcr_compatibility_digest": ""})]) == [
        "kvcr_compatibility_digest differs between the KVCR hosts: x on a, '' on b. Every host of group kvcr needs one "
        "value: a memory service refuses claims from engines with another digest; set it once, in the group's variables"]


def test_agreed_settings_are_role_variables_with_defaults():
    """Every agreed kvcr_* setting is one the contract defines (the filter reads unset ones there)."""
    keys = [k for k, dummy in kvcr_checks.AGREED_SETTINGS]
    assert keys[-1] == "--block-size" and all(k in kvcr_config.HOST_KEYS and k in service_defaults() for k in keys[:-1])


def test_agreement_filter_reads_defaults_and_the_workers_block_size():
    from ansible_collections.kvshare.dynamo.plugins.filter.internal import kvcr as filters
    worker = {"name": "kvcr", "engine": "vllm", "model": "m", "extra_args": ["--block-size", "64"]}
    hostvars = {"a": {"dynamo_workers": [worker]},
                "b": {"dynamo_workers": [dict(worker, extra_args=[])], "kvcr_cache_slot_count": 2}}
    errs = filters.kvcr_agreement_errors(["a", "b"], hostvars, service_defaults(), "kvcr", "kvcr")
    assert errs == [e for e in errs if "--block-size differs" in e] and "64 on a, 16 on b" in errs[0]
    hostvars["b"]["kvcr_cache_slot_count"] = 4
    assert "kvcr_cache_slot_count differs between the KVCR hosts: 2 on a, 4 on b" in filters.kvcr_agreement_errors(
        ["a", "b"], hostvars, service_defaults(), "kvcr", "kvcr")[0]
