# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/module_utils/kv_pools.py: a worker names its KV pool, the settings come from the pool."""
import copy
import os

import pytest
import yaml

from ansible_collections.kvshare.dynamo.plugins.module_utils import kv_pools as kp
from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config
from lib.sandbox import service_defaults

# The stack contract (roles/kvshare), which every caller passes in.
CONTRACT = service_defaults()

ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles")


def vllm(name, kv_pool="maru", **extra):
    worker = {"name": name, "engine": "vllm", "model": "m", "gpus": ["0"], "system_port": 18081, "kv_pool": kv_pool}
    worker.update(extra)
    return worker


def cluster(pool_vars=None, **host_workers):
    """hostvars and groups: one Maru pool on p1 (with pool_vars), workers on the hosts given."""
    hostvars = {"p1": dict({"kvshare_bind_address": "10.0.0.1"}, **(pool_vars or {}))}
    for host, workers in host_workers.items():
        hostvars.setdefault(host, {"kvshare_bind_address": "10.0.0.9"})["dynamo_workers"] = workers
    groups = {"maru_pool": ["p1"], "dynamo_workers": sorted(host_workers)}
    return hostvars, groups


def extra(worker):
    return worker["kv_transfer_config"]["kv_connector_extra_config"]


# ---------------------------------------------------------------- defaults in lock-step with the roles

def _load(*parts):
    with open(os.path.join(ROLES, *parts)) as handle:
        return yaml.safe_load(handle)


def test_the_pool_role_reads_its_worker_facing_defaults_from_the_contract():
    """Each pool setting a worker derives has one home, the contract: the role's default reads it
    (so a play that does not load the role derives the same value)."""
    defaults = _load("maru_pool", "defaults", "main.yml")
    for key in kp.MARU_HOST_KEYS:
        assert key in CONTRACT, key
        assert defaults[key] == "{{ kvshare_service_defaults.%s }}" % key, key


def test_a_pool_setting_left_unset_comes_from_the_contract_passed_in():
    hostvars, groups = cluster(p1=[vllm("a")])
    contract = dict(CONTRACT, maru_pool_server_port=6123, maru_pool_chunk_size="8M")
    (worker,) = kp.resolve_workers("p1", [vllm("a")], hostvars, groups, contract)
    assert extra(worker)["maru_server_url"] == "tcp://127.0.0.1:6123" and extra(worker)["maru_chunk_size"] == "8M"


# ---------------------------------------------------------------- Maru: what the pool gives

def test_maru_worker_gets_the_pool_hosts_settings():
    hostvars, groups = cluster({"maru_pool_bind_address": "10.0.0.1", "maru_pool_chunk_size": "128K"},
                               p1=[vllm("a")])
    (worker,) = kp.resolve_workers("p1", hostvars["p1"]["dynamo_workers"], hostvars, groups, CONTRACT)
    assert worker["kv_pool"] == {"type": "maru", "host": "p1"}
    assert worker["kv_transfer_config"] == {
        "kv_connector": "MaruKVConnector", "kv_connector_module_path": "kvshare_maru_connector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"maru_server_url": "tcp://10.0.0.1:5555", "maru_pool_size": "4G",
                                      "maru_chunk_size": "128K", "maru_kv_chunk_tokens": 256,
                                      "maru_instance_id": "p1-a"}}
    assert "env" not in worker and "extra_args" not in worker


def test_unset_pool_variables_are_the_role_defaults():
    hostvars, groups = cluster(p1=[vllm("a")])
    got = extra(kp.resolve_workers("p1", [vllm("a")], hostvars, groups, CONTRACT)[0])
    assert got["maru_server_url"] == "tcp://127.0.0.1:5555"  # maru_pool_bind_address: loopback by default
    assert (got["maru_pool_size"], got["maru_chunk_size"], got["maru_kv_chunk_tokens"]) == ("4G", "4M", 256)
    # a bad pool default is named with its host
    hostvars["p1"]["maru_pool_chunk_size"] = "big"
    with pytest.raises(kp.PoolError, match="maru_pool_chunk_size on p1: invalid size 'big'"):
        kp.resolve_workers("p1", [vllm("a")], hostvars, groups, CONTRACT)


def test_worker_values_win_over_the_pool_defaults():
    hostvars, groups = cluster({"maru_pool_pool_size": "128M"}, p1=[])
    ref = {"type": "maru", "pool_size": "8G", "chunk_size": 65536, "kv_chunk_tokens": 128, "instance_id": "x1",
           "eager_map": False}
    got = extra(kp.resolve_workers("p1", [vllm("a", ref)], hostvars, groups, CONTRACT)[0])
    assert got == {"maru_server_url": "tcp://127.0.0.1:5555", "maru_pool_size": "8G", "maru_chunk_size": "64K",
                   "maru_kv_chunk_tokens": 128, "maru_instance_id": "x1", "maru_eager_map": False}
    ref["eager_map"] = "no"
    assert extra(kp.resolve_workers("p1", [vllm("a", ref)], hostvars, groups, CONTRACT)[0])["maru_eager_map"] is False


def test_pool_host_default_order():
    hostvars, groups = cluster(p1=[], w1=[])
    # another host: the only pool host; the pool host itself: itself; named: that one
    assert kp.maru_pool_host("w1", {"type": "maru"}, groups) == "p1"
    groups["maru_pool"] = ["p1", "p2"]
    assert kp.maru_pool_host("p2", {"type": "maru"}, groups) == "p2"
    assert kp.maru_pool_host("w1", {"type": "maru", "host": "p2"}, groups) == "p2"
    with pytest.raises(kp.PoolError, match=r"several hosts \(p1, p2\) and w1 is none of them"):
        kp.maru_pool_host("w1", {"type": "maru"}, groups)
    with pytest.raises(kp.PoolError, match="host p9 is not in group maru_pool"):
        kp.maru_pool_host("w1", {"type": "maru", "host": "p9"}, groups)
    with pytest.raises(kp.PoolError, match="no host of group maru_pool"):
        kp.maru_pool_host("w1", {"type": "maru"}, {})


def test_remote_worker_uses_the_pool_hosts_address_and_its_own_instance_id():
    hostvars, groups = cluster({"maru_pool_bind_address": "10.0.0.1"}, w1=[vllm("c", {"type": "maru", "host": "p1"})])
    (worker,) = kp.host_workers("w1", hostvars, groups, CONTRACT)
    assert worker["kv_pool"]["host"] == "p1"
    assert extra(worker)["maru_server_url"] == "tcp://10.0.0.1:5555"
    assert extra(worker)["maru_instance_id"] == "w1-c"


@pytest.mark.parametrize("bind", [None, "127.0.0.1", "localhost", "::1", "127.0.10.2"])
def test_remote_worker_refused_when_the_pool_listens_on_its_loopback(bind):
    """Left at the role default (127.0.0.1) the pool is unreachable from other hosts: a worker there
    would connect to its own host; refused at validation, naming both hosts and the variable."""
    pool_vars = {} if bind is None else {"maru_pool_bind_address": bind}
    hostvars, groups = cluster(pool_vars, w1=[vllm("c")])
    want = "127.0.0.1" if bind is None else bind
    with pytest.raises(kp.PoolError, match=r"its pool on p1 listens on %s \(maru_pool_bind_address on p1\), a "
                       r"loopback address: from w1 that is w1 itself" % want.replace(".", r"\.")):
        kp.resolve_workers("w1", [vllm("c")], hostvars, groups, CONTRACT)
    assert kp.pool_errors("w1", [vllm("c")], hostvars, groups, CONTRACT) == [
        "dynamo_workers[c].kv_pool on w1: its pool on p1 listens on %s (maru_pool_bind_address on p1), a loopback "
        "address: from w1 that is w1 itself, not the pool. Set maru_pool_bind_address on p1 to an address w1 reaches "
        "(e.g. p1's kvshare_bind_address), or run the worker on p1" % want]
    # the pool host's own workers reach it on loopback
    assert kp.pool_errors("p1", [vllm("a")], hostvars, groups, CONTRACT) == []


def test_remote_worker_accepted_on_the_pool_hosts_own_loopback_address():
    """Hosts that share one network namespace (the sandbox: each host on its own 127.0.10.N) reach a
    pool bound to the pool host's own kvshare_bind_address, loopback or not."""
    hostvars, groups = cluster({"maru_pool_bind_address": "127.0.10.2"}, w1=[vllm("c")])
    hostvars["p1"]["kvshare_bind_address"] = "127.0.10.2"
    assert extra(kp.host_workers("w1", hostvars, groups, CONTRACT)[0])["maru_server_url"] == "tcp://127.0.10.2:5555"


def test_the_workers_own_config_is_merged_over_the_pools():
    hostvars, groups = cluster(p1=[])
    worker = vllm("a", kv_transfer_config={"kv_role": "kv_producer", "kv_connector_module_path": "maru_vllm",
                                           "kv_connector_extra_config": {"maru_extra_knob": 1}})
    got = kp.resolve_workers("p1", [worker], hostvars, groups, CONTRACT)[0]["kv_transfer_config"]
    assert got["kv_role"] == "kv_producer" and got["kv_connector_module_path"] == "maru_vllm"
    assert got["kv_connector_extra_config"]["maru_extra_knob"] == 1
    assert got["kv_connector_extra_config"]["maru_instance_id"] == "p1-a"
    # a JSON string is merged as well
    worker["kv_transfer_config"] = '{"kv_role": "kv_consumer"}'
    assert kp.resolve_workers("p1", [worker], hostvars, groups, CONTRACT)[0]["kv_transfer_config"]["kv_role"] == "kv_consumer"


def test_workers_without_a_pool_are_left_as_written():
    hostvars, groups = cluster(p1=[])
    plain = {"name": "m", "engine": "mocker", "model": "m", "system_port": 1}
    hand = {"name": "e", "engine": "vllm", "model": "m", "system_port": 2,
            "kv_transfer_config": {"kv_connector": "ExampleConnector"}}
    assert kp.resolve_workers("p1", [plain, hand], hostvars, groups, CONTRACT) == [plain, hand]


def test_input_is_not_modified():
    hostvars, groups = cluster(p1=[])
    workers = [vllm("a", env={"X": "1"}, extra_args=["--y"])]
    before = copy.deepcopy(workers)
    kp.resolve_workers("p1", workers, hostvars, groups, CONTRACT)
    assert workers == before


def test_lmcache_pool_gives_the_lmcache_connector_and_its_config_file():
    hostvars, groups = cluster({"maru_pool_connector": "lmcache"}, p1=[vllm("a")], w1=[vllm("b")])
    (worker,) = kp.host_workers("p1", hostvars, groups, CONTRACT)
    assert worker["kv_transfer_config"] == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert worker["env"] == {"LMCACHE_CONFIG_FILE": "/etc/maru/lmcache/a.yaml"}
    (client,) = kp.pool_clients("p1", hostvars, groups, CONTRACT)[:1]
    assert client["lmcache_config_file"] == "/etc/maru/lmcache/a.yaml"
    assert client["lmcache_config"]["maru_path"] == "maru://127.0.0.1:5555"
    assert client["lmcache_config"]["extra_config"]["maru_instance_id"] == "p1-a"
    # the file is on the pool host: a worker elsewhere cannot use it
    errors = kp.pool_errors("w1", [vllm("b")], hostvars, groups, CONTRACT)
    assert errors == ["dynamo_workers[b].kv_pool on w1: the pool on p1 uses LMCache (maru_pool_connector: lmcache), "
                      "whose config file is written on p1: only workers on p1 can use it"]


# ---------------------------------------------------------------- KVCR

def kvcr_cluster(engine="vllm"):
    hostvars = {"g1": {"kvshare_bind_address": "10.0.1.12", "kvcr_cache_slot": 1, "kvcr_compatibility_digest": "d-1",
                       "dynamo_workers": [vllm("kvcr", "kvcr", engine=engine, extra_args=["--block-size", "64"])]}}
    return hostvars, {"kvcr": ["g1"], "dynamo_workers": ["g1"]}


def test_kvcr_worker_gets_the_hosts_kvcr_settings():
    hostvars, groups = kvcr_cluster()
    (worker,) = kp.host_workers("g1", hostvars, groups, CONTRACT)
    settings = kvcr_config.host_worker_settings(hostvars["g1"], CONTRACT)
    assert worker["kv_pool"] == {"type": "kvcr", "host": "g1"}
    assert worker["kv_transfer_config"] == settings["kv_transfer_config"]
    assert worker["env"] == settings["env"] and worker["env"]["KVCR_CACHE_SLOT"] == "1"
    assert worker["extra_args"] == settings["extra_args"] + ["--block-size", "64"]  # the pool's first


def test_kvcr_stand_in_mocker_gets_the_environment_only():
    hostvars, groups = kvcr_cluster("mocker")
    (worker,) = kp.host_workers("g1", hostvars, groups, CONTRACT)
    assert worker["env"]["KVCR_CACHE_SLOT"] == "1"
    assert "kv_transfer_config" not in worker and worker["extra_args"] == ["--block-size", "64"]


def test_kvcr_worker_must_be_on_a_kvcr_host():
    hostvars, groups = kvcr_cluster()
    groups["kvcr"] = []
    with pytest.raises(kp.PoolError, match=r"dynamo_workers\[kvcr\].kv_pool on g1: g1 is not a KVCR host \(group kvcr\)"):
        kp.resolve_workers("g1", hostvars["g1"]["dynamo_workers"], hostvars, groups, CONTRACT)
    # kvcr_group_name names the group
    hostvars["g1"]["kvcr_group_name"] = "kvcr_hosts"
    groups["kvcr_hosts"] = ["g1"]
    assert kp.host_workers("g1", hostvars, groups, CONTRACT)[0]["env"]["KVCR_CACHE_SLOT"] == "1"


# ---------------------------------------------------------------- errors, named as the inventory writes them

@pytest.mark.parametrize("kv_pool,message", [
    ("nfs", "pool type 'nfs' is unknown (choose one of maru, kvcr)"),
    (["maru"], "must be a pool type (maru, kvcr) or a mapping with `type`"),
    ({"type": "maru", "size": "1G"}, "unknown key(s) size for a maru pool"),
    ({"type": "kvcr", "host": "g1"}, "unknown key(s) host for a kvcr pool"),
    ({"type": "maru", "host": "p9"}, "host p9 is not in group maru_pool (its hosts: p1)"),
    ({"type": "maru", "pool_size": "lots"}, "kv_pool.pool_size: invalid size 'lots'"),
])
def test_pool_errors_name_the_workers_kv_pool(kv_pool, message):
    hostvars, groups = cluster(p1=[])
    workers = [vllm("a", None), vllm("b", kv_pool)]
    errors = kp.pool_errors("w1", workers, hostvars, groups, CONTRACT)
    assert len(errors) == 1 and errors[0].startswith("dynamo_workers[b].kv_pool on w1: " + message), errors
    with pytest.raises(kp.PoolError, match=r"^dynamo_workers\[b\]\.kv_pool on w1: "):
        kp.resolve_workers("w1", workers, hostvars, groups, CONTRACT)


def test_pool_errors_refuse_settings_written_twice():
    hostvars, groups = cluster(p1=[])
    extra = {"maru_server_url": "tcp://10.9.9.9:5555", "maru_pool_size": "1G"}
    worker = vllm("a", kv_transfer_config={"kv_connector_extra_config": extra}, env={"X": "1"})
    assert kp.pool_errors("p1", [worker], hostvars, groups, CONTRACT) == [
        "dynamo_workers[a].kv_transfer_config on p1: kv_connector_extra_config.maru_pool_size is set by its pool "
        "(kv_pool: maru on p1); set it per worker as kv_pool.pool_size",
        "dynamo_workers[a].kv_transfer_config on p1: kv_connector_extra_config.maru_server_url is set by its pool "
        "(kv_pool: maru on p1); it follows the pool host's maru_pool_bind_address and maru_pool_server_port"]
    other = vllm("a", kv_transfer_config={"kv_connector": "ExampleConnector"})
    assert kp.pool_errors("p1", [other], hostvars, groups, CONTRACT) == [
        "dynamo_workers[a].kv_transfer_config on p1: kv_connector ExampleConnector, but its pool (kv_pool: maru on p1) "
        "gives MaruKVConnector: drop one of the two"]
    assert kp.pool_errors("p1", [vllm("a", kv_transfer_config={"kv_role": "kv_producer"})], hostvars, groups, CONTRACT) == []


def test_pool_errors_refuse_a_hand_written_kvcr_connector_and_pool_environment():
    hostvars, groups = kvcr_cluster()
    worker = dict(hostvars["g1"]["dynamo_workers"][0], kv_transfer_config={"kv_role": "kv_both"},
                  env={"PYTHONHASHSEED": "7"})
    assert kp.pool_errors("g1", [worker], hostvars, groups, CONTRACT) == [
        "dynamo_workers[kvcr].kv_transfer_config on g1: a KVCR worker's connector comes whole from its pool "
        "(kv_pool: kvcr on g1): drop it",
        "dynamo_workers[kvcr].env on g1: PYTHONHASHSEED is set by its pool (kv_pool: kvcr on g1)"]


def test_pool_errors_one_way_for_maru_and_no_pool_for_mockers():
    hostvars, groups = cluster(p1=[])
    hand = {"name": "h", "engine": "vllm", "model": "m", "system_port": 1,
            "kv_transfer_config": {"kv_connector": "MaruKVConnector", "kv_connector_extra_config": {}}}
    mock = {"name": "m", "engine": "mocker", "model": "m", "system_port": 2, "kv_pool": "maru"}
    errors = kp.pool_errors("p1", [hand, mock, "not a worker"], hostvars, groups, CONTRACT)
    assert errors[0].startswith("dynamo_workers[h].kv_transfer_config on p1: a MaruKVConnector worker names its pool, "
                                "kv_pool: maru")
    assert errors[1] == "dynamo_workers[m].kv_pool on p1: engine mocker has no KV connector: drop kv_pool"
    assert len(errors) == 2
    assert kp.pool_errors("p1", "oops", hostvars, groups, CONTRACT) == []


def test_host_workers_falls_back_to_the_written_list():
    hostvars, groups = cluster(w1=[vllm("a", "nfs")])
    assert kp.host_workers("w1", hostvars, groups, CONTRACT) == [vllm("a", "nfs")]
    assert kp.host_workers("nobody", hostvars, groups, CONTRACT) == []
    hostvars["w1"]["dynamo_workers"] = "oops"
    assert kp.host_workers("w1", hostvars, groups, CONTRACT) == []


# ---------------------------------------------------------------- the pool's side: its workers and their checks

def test_pool_clients_are_every_hosts_workers_that_name_the_pool():
    hostvars, groups = cluster({"maru_pool_chunk_size": "64K"},
                               p1=[vllm("a"), vllm("b", {"type": "maru", "chunk_size": "128K"})],
                               w1=[vllm("c", {"type": "maru", "host": "p1", "instance_id": "cee"}),
                                   vllm("d", "kvcr"), vllm("e", None), vllm("f", "nfs")])
    clients = kp.pool_clients("p1", hostvars, groups, CONTRACT)
    assert [(c["host"], c["name"], c["instance_id"], c["chunk_size"]) for c in clients] == [
        ("p1", "a", "p1-a", "64K"), ("p1", "b", "p1-b", "128K"), ("w1", "c", "cee", "64K")]
    assert clients[0]["source"] == {"pool_size": "maru_pool_pool_size", "chunk_size": "maru_pool_chunk_size",
                                    "kv_chunk_tokens": "maru_pool_kv_chunk_tokens",
                                    "instance_id": "dynamo_workers[a].kv_pool on p1 (default p1-a)"}
    assert clients[1]["source"]["chunk_size"] == "dynamo_workers[b].kv_pool.chunk_size on p1"
    assert clients[2]["source"]["instance_id"] == "dynamo_workers[c].kv_pool.instance_id on w1"
    assert "lmcache_config" not in clients[0]
    assert kp.pool_clients("p2", hostvars, groups, CONTRACT) == []
    # a name written twice on a host is one worker here (the worker checks report the duplicate name)
    hostvars["p1"]["dynamo_workers"].append(vllm("a", {"type": "maru", "instance_id": "other"}))
    assert [c["name"] for c in kp.pool_clients("p1", hostvars, groups, CONTRACT)] == ["a", "b", "c"]


MODEL = {"num_kv_heads": 2, "head_dim": 64, "dtype": "bfloat16"}  # 128 KiB per layer of a 256-token chunk


def test_client_errors_name_where_each_value_comes_from():
    hostvars, groups = cluster({"maru_pool_chunk_size": "64K"},
                               p1=[vllm("a"), vllm("b", {"type": "maru", "chunk_size": "32K", "pool_size": "16K"})])
    errors = kp.client_errors(kp.pool_clients("p1", hostvars, groups, CONTRACT), {}, MODEL)
    assert len(errors) == 3, errors
    assert errors[0].startswith("maru_pool_chunk_size (64K = 65536 bytes) is too small for one per-layer KV chunk")
    assert errors[1].startswith("dynamo_workers[b].kv_pool.pool_size on p1 (16K) is smaller than "
                                "dynamo_workers[b].kv_pool.chunk_size on p1 (32K)")
    assert errors[2].startswith("dynamo_workers[b].kv_pool.chunk_size on p1 (32K = 32768 bytes) is too small")


def test_client_errors_without_workers_check_the_pools_defaults():
    defaults = {"pool_size": "4G", "chunk_size": "64K", "kv_chunk_tokens": 256}
    assert kp.client_errors([], defaults, MODEL)[0].startswith("maru_pool_chunk_size (64K = 65536 bytes) is too small")
    assert kp.client_errors([], dict(defaults, chunk_size="128K"), MODEL) == []
    assert kp.client_errors([], defaults, {}) == []


def test_client_errors_two_workers_with_one_instance_id():
    hostvars, groups = cluster(p1=[vllm("a", {"type": "maru", "instance_id": "x"})],
                               w1=[vllm("b", {"type": "maru", "instance_id": "x"}), vllm("p1-a", "maru")])
    hostvars["w1"]["dynamo_workers"].append(vllm("c", {"type": "maru", "instance_id": "w1-p1-a"}))
    errors = kp.client_errors(kp.pool_clients("p1", hostvars, groups, CONTRACT), {}, None)
    assert errors == [
        "maru_instance_id 'x' of dynamo_workers[b].kv_pool.instance_id on w1 is already used by "
        "dynamo_workers[a].kv_pool.instance_id on p1: give each worker its own kv_pool.instance_id",
        "maru_instance_id 'w1-p1-a' of dynamo_workers[c].kv_pool.instance_id on w1 is already used by "
        "dynamo_workers[p1-a].kv_pool on w1 (default w1-p1-a): give each worker its own kv_pool.instance_id"]


# ---------------------------------------------------------------- the block size divides the pool's chunk

def test_block_size_that_does_not_divide_the_pools_chunk_is_refused():
    """MaruKVConnector aligns maru_kv_chunk_tokens down to the block size: a worker whose block size does
    not divide the pool's chunk keys its chunks on other prefix lengths than the pool's other workers
    (issue 34). Named by the key written (extra_args) and where the chunk comes from."""
    hostvars, groups = cluster({"maru_pool_bind_address": "10.0.0.1"}, p1=[vllm("a")])
    good = vllm("b", extra_args=["--enforce-eager", "--block-size", "128"])
    bad = vllm("c", extra_args=["--block-size", "96"])
    assert kp.pool_errors("p1", [vllm("a"), good], hostvars, groups, CONTRACT) == []  # 16 and 128 divide 256
    assert kp.pool_errors("p1", [good, bad], hostvars, groups, CONTRACT) == [
        "dynamo_workers[c].extra_args on p1: --block-size 96 does not divide the 256-token chunks its pool stores "
        "(maru_pool_kv_chunk_tokens on p1). MaruKVConnector would cut this worker's chunks to 192 tokens: their keys "
        "(hashes of the prompt up to each chunk's end) match none that the pool's other workers store, so no KV is "
        "shared. Use a block size that divides 256, or a kv_chunk_tokens that is a multiple of 96 for every worker "
        "of the pool"]
    # the chunk from the worker's own kv_pool, vLLM's default block size (16), and a block above the chunk
    errs = kp.pool_errors("p1", [vllm("d", kv_pool={"type": "maru", "kv_chunk_tokens": 200}),
                                 vllm("e", kv_pool={"type": "maru", "kv_chunk_tokens": 64}, extra_args=["--block-size=128"])],
                          hostvars, groups, CONTRACT)
    assert errs[0].startswith("dynamo_workers[d].kv_pool on p1: vLLM's default block size 16 (no --block-size in "
                              "extra_args) does not divide the 200-token chunks its pool stores "
                              "(dynamo_workers[d].kv_pool.kv_chunk_tokens on p1). MaruKVConnector would cut this "
                              "worker's chunks to 192 tokens")
    assert errs[1].startswith("dynamo_workers[e].extra_args on p1: --block-size 128 does not divide the 64-token chunks")
    assert "chunks to 128 tokens" in errs[1] and len(errs) == 2
    assert kp.pool_errors("p1", [vllm("f", extra_args=["--block-size", "x"])], hostvars, groups, CONTRACT) == [
        "dynamo_workers[f].extra_args on p1: --block-size must be a positive integer (got 'x')"]


def test_block_size_is_not_checked_for_lmcache_or_kvcr():
    hostvars, groups = cluster({"maru_pool_connector": "lmcache"}, p1=[vllm("a")])
    assert kp.pool_errors("p1", [vllm("a", extra_args=["--block-size", "96"])], hostvars, groups, CONTRACT) == []
