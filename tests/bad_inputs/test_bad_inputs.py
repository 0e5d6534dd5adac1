# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Bad-input suite: every invalid inventory is refused by playbooks/validate.yml before any host changes.

Each case is a valid base inventory plus one mutation, written to a tmp dir and validated offline
(`-e kvshare_validate_offline=true`: every host runs on the controller with connection local,
nothing is gathered, host probes are skipped). A case passes when
- ansible-playbook fails, in the validation play (the only play that runs),
- every task that ran is controller-side validation (assert/set_fact/debug/include_role/argument
  specs) and every host's recap shows changed=0: nothing touched this machine or a host,
- it fails in the check it is written for (CHECK_OF) and, where that check asserts several
  conditions, on the condition it is written for (CONDITION_OF): a case that trips another check,
  or another condition of its check, fails,
- the failure message names the offending variable and the offending host (a failed argument
  spec is attributed to its host by Ansible, `fatal: [host]`; the spec message names the variable).
The base inventories themselves must pass (test_base_inventory_is_valid), so each failure is the
mutation's, and every condition of every multi-condition assert in validate.yml and the roles'
preflights has a case or a reason it has none (test_every_condition_has_a_case). A few cases run a
rollout (site.yml, upgrade.yml) with the offline flag instead: it must refuse the flag in its
validation play, before anything else runs.

Every case runs, as its own ansible-playbook run, in one pre-forking server (prefork.py: Ansible
and the collection imported once, one forked child per run); KVSHARE_BAD_INPUT_JOBS runs at a
time (default: one per CPU, 2-6). `pytest -k <case>` runs only the cases selected (and the bases).
conftest.py prints "bad inputs rejected N/N".
"""
import copy
import json
import os
import sys
import tempfile

import pytest
import yaml

import ansible_guard
import prefork

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(REPO, "playbooks", "validate.yml")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
# Controller-side actions only: anything else would have run on a host (or on this machine).
ALLOWED_ACTIONS = {"assert", "checks", "set_fact", "debug", "include_role", "include_vars", "validate_argument_spec", "meta"}


def _maru_worker(name, system_port, rpc_port, fraction=0.3, kv_pool="maru"):
    """A vLLM worker fed by the Maru pool (kv_pool: the connector settings come from the pool host)."""
    return {
        "name": name, "engine": "vllm", "model": "Qwen/Qwen2.5-0.5B-Instruct", "gpus": ["0"],
        "gpu_memory_utilization": fraction, "system_port": system_port, "rpc_port": rpc_port,
        "prefix_caching": False, "kv_pool": kv_pool,
    }


# A MaruKVConnector config written by hand, as inventories did before workers named their pool.
HAND_WRITTEN_MARU = {
    "kv_connector": "MaruKVConnector", "kv_connector_module_path": "maru_vllm", "kv_role": "kv_both",
    "kv_connector_extra_config": {"maru_server_url": "tcp://10.0.0.2:5555", "maru_pool_size": "4G",
                                  "maru_kv_chunk_tokens": 256, "maru_instance_id": "node-2-w0"},
}


def _mocker(name, gpu, system_port, rpc_port):
    return {"name": name, "engine": "mocker", "model": "Qwen/Qwen2.5-0.5B-Instruct", "served_model_name": "mock",
            "endpoint": "dyn://dynamo.mocker.generate", "gpus": [gpu], "system_port": system_port, "rpc_port": rpc_port}


def base_maru():
    """Three hosts: etcd on all, frontend on node-1, Maru pool + two vLLM workers on node-2, mockers on node-3."""
    return {
        "hosts": {
            "node-1": {"kvshare_bind_address": "10.0.0.1"},
            "node-2": {"kvshare_bind_address": "10.0.0.2",
                       "dynamo_workers": [_maru_worker("w0", 18081, 19081), _maru_worker("w1", 18082, 19082)],
                       # Workers on node-3 could use it: Maru binds loopback unless told otherwise.
                       "maru_pool_bind_address": "10.0.0.2",
                       "maru_pool_dedicated_devices": ["dax0.0"],
                       "maru_pool_model": {"num_kv_heads": 2, "head_dim": 64, "dtype": "bfloat16"}},
            "node-3": {"kvshare_bind_address": "10.0.0.3",
                       "dynamo_workers": [_mocker("mock-a", "0", 18081, 19081), _mocker("mock-b", "1", 18082, 19082)]},
        },
        "groups": {"etcd": ["node-1", "node-2", "node-3"], "dynamo_frontend": ["node-1"],
                   "dynamo_workers": ["node-2", "node-3"], "maru_pool": ["node-2"], "rdma_ucx": ["node-2"]},
        "group_vars": {"all": {"dynamo_runtime_extra_groups": ["video", "render", "maru"]}},
    }


def base_kvcr():
    """Seed 002 like inventories/two_node_kvcr: two GPU hosts, one KVCR worker each, KV router."""
    return {
        "hosts": {
            "gpu-a": {"kvshare_bind_address": "10.0.1.11", "kvcr_cache_slot": 0},
            "gpu-b": {"kvshare_bind_address": "10.0.1.12", "kvcr_cache_slot": 1},
        },
        "groups": {"etcd": ["gpu-a"], "dynamo_frontend": ["gpu-a"], "dynamo_workers": ["gpu-a", "gpu-b"],
                   "kvcr": ["gpu-a", "gpu-b"]},
        "group_vars": {
            "dynamo_frontend": {"dynamo_frontend_router_mode": "kv"},
            "kvcr": {
                "kvcr_variant": "memory_service", "kvcr_cache_slot_count": 2,
                "kvcr_compatibility_digest": "qwen3-0.6b-example-v1", "kvcr_service_pool_sizes_gb": [2],
                "dynamo_workers": [{
                    "name": "kvcr", "engine": "vllm", "model": "Qwen/Qwen3-0.6B", "gpus": ["0"],
                    "system_port": 9090, "rpc_port": 9190, "kv_pool": "kvcr",
                    "extra_args": ["--block-size", "64", "--enforce-eager"],
                }],
            },
        },
    }


BASES = {"maru": base_maru, "kvcr": base_kvcr}


def inventory_yaml(inv):
    children = {}
    for group, hosts in inv["groups"].items():
        entry = {"hosts": {h: None for h in hosts}}
        if inv["group_vars"].get(group):
            entry["vars"] = inv["group_vars"][group]
        children[group] = entry
    dynamo = {"children": {g: children.pop(g) for g in ("dynamo_frontend", "dynamo_workers") if g in children}}
    if dynamo["children"]:
        children["dynamo"] = dynamo
    return {"all": {"hosts": inv["hosts"], "vars": inv["group_vars"].get("all", {}), "children": children}}


# --- mutations -----------------------------------------------------------------------------------
def hv(host, **kwargs):
    def mutate(inv):
        inv["hosts"][host].update(kwargs)
    return mutate


def worker(host, index, **kwargs):
    def mutate(inv):
        inv["hosts"][host]["dynamo_workers"][index].update(kwargs)
    return mutate


def no_kv_pool(host, index, **kwargs):
    """The worker names no pool (and gets ``kwargs`` instead)."""
    def mutate(inv):
        inv["hosts"][host]["dynamo_workers"][index].pop("kv_pool")
        inv["hosts"][host]["dynamo_workers"][index].update(kwargs)
    return mutate


def group(name, hosts):
    def mutate(inv):
        if hosts is None:
            inv["groups"].pop(name, None)
        else:
            inv["groups"][name] = hosts
    return mutate


def gv(group_name, **kwargs):
    def mutate(inv):
        inv["group_vars"].setdefault(group_name, {}).update(kwargs)
    return mutate


def both(*mutations):
    def mutate(inv):
        for m in mutations:
            m(inv)
    return mutate


def rollout(playbook):
    """Run ``playbook`` (a rollout that imports validate.yml) instead of validate.yml. Every host
    points at a closed loopback port: should the rollout go past validation, it reaches nothing."""
    def mutate(inv):
        inv["playbook"] = playbook
        for host_vars in inv["hosts"].values():
            host_vars.update(ansible_host="127.0.0.1", ansible_port=9)
    return mutate


def no_hv(host, key):
    """The host's variable ``key`` unset (its role default applies)."""
    def mutate(inv):
        inv["hosts"][host].pop(key)
    return mutate


def node3_maru_worker(kv_pool):
    """node-3 runs one Maru worker instead of its mockers, fed by the pool ``kv_pool`` names."""
    def mutate(inv):
        inv["hosts"]["node-3"]["dynamo_workers"] = [_maru_worker("w0", 18081, 19081, kv_pool=kv_pool)]
    return mutate


def galaxy_dependencies():
    """The collections kvshare.dynamo declares it needs (galaxy.yml), what validate.yml checks on the controller."""
    with open(os.path.join(REPO, "galaxy.yml")) as fh:
        return dict((name, str(spec)) for name, spec in yaml.safe_load(fh)["dependencies"].items())


def controller_collections(**changes):
    """The controller must have galaxy.yml's dependencies with ``changes`` (name with "_" for "."), given as an
    extra var: ansible-core reads its collection path once, in the pre-forking server, so a case cannot take a
    collection away (tests/unit/test_controller_collections.py does, with its own collection path)."""
    def mutate(inv):
        wanted = galaxy_dependencies()
        wanted.update((name.replace("__", "."), spec) for name, spec in changes.items())
        inv["extra_vars"] = {"kvshare_controller_collections": wanted}
    return mutate


# (id, base, mutation, host the message must name, variables the message must name)
CASES = [
    # duplicates
    ("dup_worker_name", "maru", worker("node-2", 1, name="w0"), "node-2", ["dynamo_workers", "duplicate worker name"]),
    ("dup_worker_system_port", "maru", worker("node-2", 1, system_port=18081), "node-2", ["system_port 18081"]),
    ("dup_worker_rpc_port", "maru", worker("node-3", 1, rpc_port=19081), "node-3", ["rpc_port 19081"]),
    ("worker_port_is_frontend_port", "maru", both(group("dynamo_frontend", ["node-3"]),
                                                  hv("node-3", dynamo_frontend_http_port=18082)),
     "node-3", ["dynamo_workers[mock-b].system_port", "18082", "dynamo_frontend_http_port"]),
    ("dup_maru_instance_id_on_host", "maru", worker("node-2", 1, kv_pool={"type": "maru", "instance_id": "node-2-w0"}),
     "node-2", ["maru_instance_id 'node-2-w0'", "dynamo_workers[w1].kv_pool.instance_id on node-2"]),
    ("dup_maru_instance_id_across_hosts", "maru", node3_maru_worker({"type": "maru", "instance_id": "node-2-w0"}),
     "node-3", ["maru_instance_id 'node-2-w0'", "dynamo_workers[w0].kv_pool.instance_id on node-3"]),
    ("dup_maru_pool_instance_id", "maru",
     both(worker("node-2", 0, kv_pool={"type": "maru", "instance_id": "x"}),
          worker("node-2", 1, kv_pool={"type": "maru", "instance_id": "x"})),
     "node-2", ["maru_instance_id 'x'", "dynamo_workers[w1].kv_pool.instance_id"]),
    # a group name the plays cannot see (set in the inventory, not with -e)
    ("etcd_group_name_only_in_inventory", "maru", hv("node-2", etcd_group_name="members"), "node-2",
     ["etcd_group_name on node-2: 'members'", "run on group 'etcd'", "-e etcd_group_name=members"]),
    ("kvcr_group_name_only_in_inventory", "kvcr", hv("gpu-b", kvcr_group_name="kvcr_hosts"), "gpu-b",
     ["kvcr_group_name on gpu-b: 'kvcr_hosts'", "run on group 'kvcr'", "-e kvcr_group_name=kvcr_hosts"]),
    ("dup_etcd_member_name", "maru", hv("node-2", etcd_member_name="node-1"), "node-2", ["etcd_member_name"]),
    ("dup_etcd_address", "maru", hv("node-3", etcd_address="10.0.0.1"), "node-3", ["etcd_address"]),
    ("etcd_client_port_equals_peer_port", "maru", hv("node-1", etcd_peer_port=2379), "node-1", ["etcd_peer_port"]),
    ("dup_kvcr_slot", "kvcr", hv("gpu-b", kvcr_cache_slot=0), "gpu-b", ["kvcr_cache_slot"]),
    # settings each KVCR host reads from its own copy must agree
    ("kvcr_slot_count_differs", "kvcr", hv("gpu-b", kvcr_cache_slot_count=3), "gpu-b",
     ["kvcr on gpu-b", "kvcr_cache_slot_count differs between the KVCR hosts: 2 on gpu-a, 3 on gpu-b"]),
    ("kvcr_block_size_differs", "kvcr", hv("gpu-b", dynamo_workers=[{
        "name": "kvcr", "engine": "vllm", "model": "Qwen/Qwen3-0.6B", "gpus": ["0"], "system_port": 9090,
        "rpc_port": 9190, "kv_pool": "kvcr", "extra_args": ["--block-size", "32", "--enforce-eager"]}]),
     "gpu-b", ["--block-size differs between the KVCR hosts: 64 on gpu-a, 32 on gpu-b"]),
    # missing groups
    ("no_etcd_group", "maru", group("etcd", None), "node-1", ["etcd_client_endpoints", "'etcd'"]),
    ("empty_etcd_group", "maru", group("etcd", []), "node-2", ["etcd_client_endpoints", "'etcd'"]),
    ("workers_without_frontend", "maru", group("dynamo_frontend", []), "node-2", ["dynamo_workers", "no frontend"]),
    # one model per endpoint: node-3's mocker without its endpoint lands on the default one, where node-2's
    # vLLM workers serve another model
    ("two_models_on_one_endpoint", "maru", lambda inv: inv["hosts"]["node-3"]["dynamo_workers"][0].pop("endpoint"),
     "node-3", ["dynamo_workers[mock-a].served_model_name on node-3", "serves 'mock' on endpoint dyn://dynamo.backend.generate",
                "dynamo_workers[w0].model on node-2 serves 'Qwen/Qwen2.5-0.5B-Instruct'"]),
    # one served name on one endpoint, loaded from two sources: the frontend rejects the second card
    ("one_name_two_model_sources", "maru", worker("node-3", 1, model="Qwen/Qwen2.5-0.5B-Instruct-AWQ"),
     "node-3", ["dynamo_workers[mock-b].model on node-3: loads 'Qwen/Qwen2.5-0.5B-Instruct-AWQ' for 'mock'",
                "where dynamo_workers[mock-a].model on node-3 loads 'Qwen/Qwen2.5-0.5B-Instruct'"]),
    # the controller's collections: one it does not have, one older than required
    ("controller_collection_missing", "maru", controller_collections(kvshare__absent_dependency=">=1.0.0"), "localhost",
     ["collection kvshare.absent_dependency on the controller (localhost): not installed",
      "needs kvshare.absent_dependency >=1.0.0"]),
    ("controller_collection_too_old", "kvcr", controller_collections(community__crypto=">=99.0.0"), "localhost",
     ["collection community.crypto on the controller (localhost): version", "needs community.crypto >=99.0.0"]),
    # one frontend per deployment: a second would be started but never proven ready
    ("two_frontends", "maru", group("dynamo_frontend", ["node-1", "node-3"]), "node-3",
     ["dynamo_frontend on node-3", "group dynamo_frontend has 2 hosts (node-1, node-3)"]),
    ("maru_workers_without_pool_group", "maru", group("maru_pool", None), "node-2",
     ["dynamo_workers[w0].kv_pool on node-2", "no host of group maru_pool"]),
    # a worker names its pool (kv_pool), and the pool must exist and be the one to choose
    ("kv_pool_names_no_pool_host", "maru", node3_maru_worker({"type": "maru", "host": "node-9"}), "node-3",
     ["dynamo_workers[w0].kv_pool on node-3", "node-9 is not in group maru_pool"]),
    ("kv_pool_of_several_pool_hosts", "maru", both(group("maru_pool", ["node-1", "node-2"]), node3_maru_worker("maru")),
     "node-3", ["dynamo_workers[w0].kv_pool on node-3", "several hosts (node-1, node-2)"]),
    # the pool on node-2 left on its default loopback address: from node-3 that is node-3 itself
    ("kv_pool_remote_on_loopback_pool", "maru", both(no_hv("node-2", "maru_pool_bind_address"), node3_maru_worker("maru")),
     "node-3", ["dynamo_workers[w0].kv_pool on node-3", "listens on 127.0.0.1 (maru_pool_bind_address on node-2)"]),
    # MaruKVConnector cuts its chunks to a multiple of the block size: 96 does not divide the pool's 256
    ("maru_block_size_not_dividing_chunk", "maru", worker("node-2", 1, extra_args=["--block-size", "96"]), "node-2",
     ["dynamo_workers[w1].extra_args on node-2", "--block-size 96 does not divide the 256-token chunks",
      "maru_pool_kv_chunk_tokens on node-2"]),
    ("kv_pool_unknown_type", "maru", worker("node-2", 1, kv_pool="nfs"), "node-2",
     ["dynamo_workers[w1].kv_pool on node-2", "pool type 'nfs' is unknown"]),
    ("kv_pool_kvcr_off_a_kvcr_host", "maru", worker("node-2", 0, kv_pool="kvcr"), "node-2",
     ["dynamo_workers[w0].kv_pool on node-2", "not a KVCR host"]),
    # one source for each connector setting: the pool's are not written again, Maru is not written by hand
    ("maru_server_url_written_by_hand", "maru",
     worker("node-2", 0, kv_transfer_config={"kv_connector_extra_config": {"maru_server_url": "tcp://10.0.0.9:5555"}}),
     "node-2", ["dynamo_workers[w0].kv_transfer_config on node-2", "maru_server_url is set by its pool"]),
    ("maru_connector_without_kv_pool", "maru", no_kv_pool("node-2", 0, kv_transfer_config=HAND_WRITTEN_MARU), "node-2",
     ["dynamo_workers[w0].kv_transfer_config on node-2", "kv_pool: maru"]),
    ("kvcr_worker_without_kv_pool", "kvcr", gv("kvcr", dynamo_workers=[{
        "name": "kvcr", "engine": "vllm", "model": "Qwen/Qwen3-0.6B", "gpus": ["0"], "system_port": 9090,
        "rpc_port": 9190, "kv_transfer_config": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}}]),
     "gpu-a", ["worker kvcr", "kv_pool: kvcr"]),
    # wrong types (argument specs and preflight)
    ("etcd_client_port_not_int", "maru", hv("node-2", etcd_client_port="twenty"), "node-2", ["etcd_client_port"]),
    ("frontend_port_not_int", "maru", hv("node-1", dynamo_frontend_http_port="http"), "node-1", ["dynamo_frontend_http_port"]),
    ("dynamo_workers_not_a_list", "maru", hv("node-3", dynamo_workers={"name": "mock-a"}), "node-3", ["dynamo_workers"]),
    ("worker_gpus_string", "maru", worker("node-3", 0, gpus="0,1"), "node-3",
     ["dynamo_workers[mock-a].gpus", "must be a list of GPU ids"]),
    ("worker_system_port_not_int", "maru", worker("node-3", 0, system_port="metrics"), "node-3", ["system_port"]),
    ("kv_pool_not_a_type_or_mapping", "maru", worker("node-2", 0, kv_pool=["maru"]), "node-2",
     ["dynamo_workers[w0].kv_pool on node-2", "mapping with `type`"]),
    ("kvcr_slot_not_int", "kvcr", hv("gpu-b", kvcr_cache_slot="one"), "gpu-b", ["kvcr_cache_slot"]),
    ("extra_args_string", "maru", worker("node-3", 0, extra_args="--speedup-ratio 10"), "node-3", ["extra_args"]),
    # unknown engine / router / connector config
    ("unknown_engine", "maru", worker("node-3", 1, engine="sglang"), "node-3", ["engine", "sglang"]),
    ("unknown_router_mode", "maru", hv("node-1", dynamo_frontend_router_mode="fastest"), "node-1",
     ["dynamo_frontend_router_mode", "fastest"]),
    ("kv_transfer_config_not_json", "maru", worker("node-2", 0, kv_transfer_config="{kv_connector: Maru"), "node-2",
     ["kv_transfer_config is not valid JSON"]),
    ("kv_transfer_config_without_connector", "maru", no_kv_pool("node-2", 1, kv_transfer_config={"kv_role": "kv_both"}),
     "node-2", ["kv_transfer_config has no 'kv_connector'"]),
    ("connector_on_mocker", "maru", worker("node-3", 0, kv_transfer_config={"kv_connector": "ExampleConnector"}),
     "node-3", ["kv_transfer_config is set but engine mocker"]),
    ("unknown_discovery_backend", "maru", hv("node-3", dynamo_worker_discovery_backend="zookeeper"), "node-3",
     ["dynamo_worker_discovery_backend"]),
    ("unknown_kvcr_variant", "kvcr", gv("kvcr", kvcr_variant="shared_nothing"), "gpu-a", ["kvcr_variant"]),
    ("kvcr_router_mode_not_kv", "kvcr", gv("dynamo_frontend", dynamo_frontend_router_mode="round-robin"), "gpu-a",
     ["router"]),
    # out-of-range values
    ("gpu_memory_fraction_above_1", "maru", worker("node-2", 0, gpu_memory_utilization=1.5), "node-2",
     ["gpu_memory_utilization must be in (0, 1]"]),
    ("gpu_memory_fraction_zero", "maru", worker("node-2", 1, gpu_memory_utilization=0), "node-2",
     ["gpu_memory_utilization must be in (0, 1]"]),
    ("gpu_memory_sum_above_1", "maru", both(worker("node-2", 0, gpu_memory_utilization=0.6),
                                            worker("node-2", 1, gpu_memory_utilization=0.5)),
     "node-2", ["gpu_memory_utilization", "share GPU 0", "1.10"]),
    ("port_out_of_range", "maru", worker("node-3", 1, rpc_port=70000), "node-3",
     ["dynamo_workers[mock-b].rpc_port", "must be an integer in 1-65535"]),
    ("kvcr_slot_out_of_range", "kvcr", hv("gpu-b", kvcr_cache_slot=2), "gpu-b", ["kvcr_cache_slot"]),
    ("frontend_ready_delay_too_long", "maru", hv("node-1", dynamo_frontend_ready_delay=5), "node-1",
     ["dynamo_frontend_ready_delay"]),
    # bad addresses
    ("bind_address_not_ipv4", "maru", hv("node-3", kvshare_bind_address="10.0.0.300"), "node-3", ["kvshare_bind_address"]),
    ("bind_address_hostname", "maru", hv("node-2", kvshare_bind_address="gpu-node-2.example"), "node-2",
     ["kvshare_bind_address"]),
    ("bind_address_missing_offline", "maru", lambda inv: inv["hosts"]["node-3"].pop("kvshare_bind_address"), "node-3",
     ["kvshare_bind_address"]),
    ("frontend_on_all_addresses", "maru", hv("node-1", dynamo_frontend_http_host="0.0.0.0"), "node-1",
     ["dynamo_frontend_http_host"]),
    ("workers_on_all_addresses", "maru", hv("node-3", dynamo_worker_bind_address="0.0.0.0"), "node-3",
     ["dynamo_worker_bind_address"]),
    ("etcd_address_not_ipv4", "maru", hv("node-1", etcd_address="etcd-1"), "node-1", ["etcd_address"]),
    ("kvcr_advertise_loopback", "kvcr", hv("gpu-a", kvcr_advertise_host="127.0.0.1"), "gpu-a", ["kvcr_advertise_host"]),
    # TLS files and install sources missing
    ("etcd_tarball_without_sha256", "maru", gv("etcd", etcd_install_method="tarball",
                                               etcd_tarball_url="https://example.invalid/etcd-v3.5.17-linux-amd64.tar.gz"),
     "node-1", ["etcd_tarball_sha256"]),
    ("etcd_tarball_without_url", "maru", gv("etcd", etcd_install_method="tarball", etcd_tarball_sha256="0" * 64),
     "node-2", ["etcd_tarball_url"]),
    ("etcd_client_ca_missing", "maru", hv("node-3", etcd_client_pki_dir="/nonexistent/kvshare-pki"), "node-3",
     ["etcd_client_pki_dir", "TLS files missing"]),
    ("etcd_client_tls_mismatch", "maru", hv("node-1", etcd_client_tls_enabled=False), "node-1",
     ["etcd_client_tls_enabled"]),
    ("etcd_client_cluster_name_mismatch", "maru", hv("node-2", etcd_client_cluster_name="other"), "node-2",
     ["etcd_client_cluster_name"]),
    # contradictory toggles
    ("offline_pip_without_wheelhouse", "maru", hv("node-3", dynamo_runtime_pip_index="offline",
                                                  dynamo_runtime_wheelhouse_dir=""), "node-3",
     ["dynamo_runtime_pip_index", "dynamo_runtime_wheelhouse_dir"]),
    ("unknown_pip_index", "maru", hv("node-1", dynamo_runtime_pip_index="pypi"), "node-1", ["dynamo_runtime_pip_index"]),
    ("maru_artifacts_without_dir", "maru", hv("node-2", maru_pool_install_method="artifacts"), "node-2",
     ["maru_pool_install_method", "maru_pool_artifacts_dir"]),
    ("maru_chunk_too_small", "maru", hv("node-2", maru_pool_chunk_size="64K"), "node-2", ["maru_pool_chunk_size"]),
    ("rdma_bw_test_without_server", "maru", hv("node-2", rdma_ucx_bw_test=True), "node-2",
     ["rdma_ucx_bw_test", "rdma_ucx_bw_server"]),
    ("rdma_clear_acs_without_hardware", "maru", hv("node-2", rdma_ucx_clear_acs=True, rdma_ucx_require_hardware=False),
     "node-2", ["rdma_ucx_clear_acs", "rdma_ucx_require_hardware"]),
    ("rdma_peermem_not_a_choice", "maru", hv("node-2", rdma_ucx_peermem="maybe"), "node-2", ["rdma_ucx_peermem"]),
    ("rdma_tls_without_cuda", "maru", hv("node-2", rdma_ucx_tls="rc_x,ud_x"), "node-2", ["rdma_ucx_tls"]),
    ("kvcr_memory_service_without_digest", "kvcr", gv("kvcr", kvcr_compatibility_digest=""), "gpu-a",
     ["kvcr_compatibility_digest"]),
    ("kvcr_worker_missing", "kvcr", hv("gpu-b", kvcr_worker_name="other"), "gpu-b", ["kvcr_worker_name"]),
    # KVCR moves KV over RDMA only: a GPU pinned to its HCA but with another UCX transport
    ("kvcr_worker_without_rdma_transport", "kvcr",
     hv("gpu-b", rdma_ucx_hca_overrides={"0": "mlx5_1:1"}, rdma_ucx_tls="tcp,cuda"), "gpu-b",
     ["GPU 0 on gpu-b", "UCX_TLS=tcp,cuda", "kvcr_allow_non_rdma_transport"]),
    ("worker_env_sets_dyn_connector", "maru", worker("node-3", 0, env={"DYN_CONNECTOR": "nixl"}), "node-3",
     ["DYN_CONNECTOR"]),
    # the local etcd client proxy (TLS passes through it: the member certificates must name its address)
    ("etcd_proxy_not_loopback", "maru", hv("node-2", etcd_client_proxy_address="192.0.2.10"), "node-2",
     ["etcd_client_proxy_address", "192.0.2.10", "loopback"]),
    ("etcd_proxy_address_not_in_member_certs", "maru", hv("node-3", etcd_client_proxy_address="127.0.20.3"), "node-3",
     ["etcd_client_proxy_address", "127.0.20.3", "etcd_cert_extra_sans"]),
    ("etcd_proxy_port_wrong_type", "kvcr", gv("kvcr", etcd_client_proxy_port="proxy"), "gpu-a",
     ["etcd_client_proxy_port"]),
    # a worker port on a port another service of the same host listens on by default (not set in the inventory)
    ("worker_port_is_default_frontend_port", "maru", both(group("dynamo_frontend", ["node-3"]),
                                                          worker("node-3", 0, system_port=8000)),
     "node-3", ["dynamo_workers[mock-a].system_port", "8000", "dynamo_frontend_http_port"]),
    ("worker_port_is_default_etcd_client_port", "maru", worker("node-2", 0, system_port=2379), "node-2",
     ["dynamo_workers[w0].system_port", "2379", "etcd_client_port"]),
    ("worker_port_is_default_etcd_peer_port", "maru", worker("node-3", 1, rpc_port=2380), "node-3",
     ["dynamo_workers[mock-b].rpc_port", "2380", "etcd_peer_port"]),
    ("worker_port_is_default_maru_rm_port", "maru", worker("node-2", 1, rpc_port=9850), "node-2",
     ["dynamo_workers[w1].rpc_port", "9850", "maru_pool_rm_port"]),
    ("worker_port_is_default_maru_server_port", "maru", worker("node-2", 0, system_port=5555), "node-2",
     ["dynamo_workers[w0].system_port", "5555", "maru_pool_server_port"]),
    ("worker_port_is_default_etcd_proxy_port", "maru", worker("node-3", 0, rpc_port=23790), "node-3",
     ["dynamo_workers[mock-a].rpc_port", "23790", "etcd_client_proxy_port"]),
    ("worker_port_is_default_kvcr_control_port", "kvcr", hv("gpu-b", dynamo_workers=[{
        "name": "kvcr", "engine": "vllm", "model": "Qwen/Qwen3-0.6B", "gpus": ["0"], "system_port": 9090,
        "rpc_port": 23280, "kv_pool": "kvcr", "extra_args": ["--block-size", "64"]}]),
     "gpu-b", ["dynamo_workers[kvcr].rpc_port", "23280", "kvcr_control_port"]),
    ("worker_port_is_default_kvcr_agent_port", "kvcr", hv("gpu-a", dynamo_workers=[{
        "name": "kvcr", "engine": "vllm", "model": "Qwen/Qwen3-0.6B", "gpus": ["0"], "system_port": 9091,
        "rpc_port": 9190, "kv_pool": "kvcr", "extra_args": ["--block-size", "64"]}]),
     "gpu-a", ["dynamo_workers[kvcr].system_port", "9091", "kvcr_state_agent_system_port"]),
    # one address, two hosts (not only between etcd members)
    ("dup_bind_address", "maru", both(group("etcd", ["node-1"]), hv("node-3", kvshare_bind_address="10.0.0.2")),
     "node-3", ["kvshare_bind_address", "10.0.0.2", "node-2"]),
    # a vLLM worker must say which GPUs it uses
    ("vllm_worker_gpus_empty", "maru", worker("node-2", 1, gpus=[]), "node-2", ["dynamo_workers[w1].gpus"]),
    ("vllm_worker_without_gpus", "maru", lambda inv: inv["hosts"]["node-2"]["dynamo_workers"][0].pop("gpus"),
     "node-2", ["dynamo_workers[w0].gpus"]),
    # a wrong type inside dynamo_workers is named as the user wrote it, without the role's argument spec
    ("worker_system_port_not_a_number", "maru", worker("node-3", 0, system_port="18081x"), "node-3",
     ["dynamo_workers[mock-a].system_port", "18081x"]),
    ("worker_prefix_caching_not_bool", "maru", worker("node-2", 0, prefix_caching="sometimes"), "node-2",
     ["dynamo_workers[w0].prefix_caching", "sometimes"]),
    # offline validation is for validate.yml alone: a rollout refuses the flag before it validates
    ("offline_flag_in_site", "maru", rollout("site.yml"), "node-1",
     ["kvshare_validate_offline", "playbooks/validate.yml"]),
    ("offline_flag_in_upgrade", "kvcr", rollout("playbooks/upgrade.yml"), "gpu-a",
     ["kvshare_validate_offline", "playbooks/validate.yml"]),
    # host firewall (opt-in: each case enables it on the host it breaks)
    ("firewall_extra_port_out_of_range", "maru", hv("node-2", firewall_enabled=True,
                                                    firewall_extra_ports=[{"port": 70000, "proto": "tcp"}]),
     "node-2", ["firewall_extra_ports[0].port", "70000"]),
    ("firewall_extra_port_unknown_proto", "kvcr", gv("kvcr", firewall_enabled=True,
                                                     firewall_extra_ports=[{"port": 9100, "proto": "sctp"}]),
     "gpu-a", ["firewall_extra_ports", "sctp"]),
    ("firewall_frontend_source_bad_cidr", "maru", hv("node-1", firewall_enabled=True,
                                                     firewall_frontend_sources=["10.0.0.0/33"]),
     "node-1", ["firewall_frontend_sources", "10.0.0.0/33"]),
    ("firewall_ssh_sources_string", "maru", hv("node-3", firewall_enabled=True, firewall_ssh_sources="10.0.0.0/8"),
     "node-3", ["firewall_ssh_sources", "must be a list"]),
    ("firewall_ssh_port_not_int", "maru", hv("node-2", firewall_enabled=True, firewall_ssh_port="ssh"), "node-2",
     ["firewall_ssh_port"]),
    ("firewall_drop_without_ssh_sources", "maru", hv("node-1", firewall_enabled=True, firewall_ssh_sources=[]),
     "node-1", ["firewall_ssh_sources", "firewall_policy=drop"]),
    ("firewall_policy_unknown", "kvcr", hv("gpu-b", firewall_enabled=True, firewall_policy="reject"), "gpu-b",
     ["firewall_policy"]),
    ("firewall_dynamic_range_reversed", "maru", hv("node-3", firewall_enabled=True,
                                                   firewall_dynamic_port_range="60999-32768"),
     "node-3", ["firewall_dynamic_port_range", "60999-32768"]),
    # each condition of an assert with several: one case each, which must fail on that condition
    # (CONDITION_OF), not on another one of the same assert
    ("bind_address_empty_offline", "maru", hv("node-3", kvshare_bind_address=""), "node-3", ["kvshare_bind_address"]),
    ("bind_address_all_addresses", "maru", hv("node-3", kvshare_bind_address="0.0.0.0"), "node-3",
     ["kvshare_bind_address", "'0.0.0.0'"]),
    ("dynamo_workers_item_not_a_mapping", "maru", hv("node-3", dynamo_workers=["mock-a"]), "node-3",
     ["dynamo_workers", "got a list"]),
    ("frontend_port_out_of_range", "maru", hv("node-1", dynamo_frontend_http_port=70000), "node-1",
     ["dynamo_frontend_http_port"]),
    ("frontend_env_disables_nvext", "maru", hv("node-1", dynamo_frontend_env={"DYN_DISABLE_FRONTEND_NVEXT": "1"}),
     "node-1", ["dynamo_frontend_env", "DYN_DISABLE_FRONTEND_NVEXT"]),
    ("frontend_env_sets_nats", "maru", hv("node-1", dynamo_frontend_env={"NATS_SERVER": "nats://127.0.0.1:4222"}),
     "node-1", ["dynamo_frontend_env", "NATS_SERVER"]),
    ("frontend_without_etcd_env_file", "maru", hv("node-1", etcd_client_env_file=""), "node-1",
     ["etcd_client role's environment file"]),
    ("workers_without_etcd_env_file", "maru", hv("node-3", etcd_client_env_file=""), "node-3",
     ["etcd_client role's environment file"]),
    ("pip_steps_empty", "maru", hv("node-3", dynamo_runtime_pip_steps=[]), "node-3", ["dynamo_runtime_pip_steps"]),
    ("pip_step_without_packages", "maru", hv("node-3", dynamo_runtime_pip_steps=[{"engines": ["vllm"]}]), "node-3",
     ["dynamo_runtime_pip_steps", "`packages` list"]),
    ("pip_step_packages_string", "maru", hv("node-3", dynamo_runtime_pip_steps=[{"packages": "ai-dynamo==1.6.1"}]),
     "node-3", ["dynamo_runtime_pip_steps", "`packages` list"]),
    ("etcd_client_port_signed", "maru", hv("node-1", etcd_client_port="+2379"), "node-1", ["etcd_client_port (+2379)"]),
    ("etcd_peer_port_signed", "maru", hv("node-1", etcd_peer_port="+2380"), "node-1", ["etcd_peer_port (+2380)"]),
    ("etcd_client_port_out_of_range", "maru", hv("node-2", etcd_client_port=70000), "node-2", ["etcd_client_port (70000)"]),
    ("etcd_peer_port_zero", "maru", hv("node-3", etcd_peer_port=0), "node-3", ["etcd_peer_port (0)"]),
    ("etcd_member_name_not_plain", "maru", hv("node-2", etcd_member_name="node 2"), "node-2", ["etcd_member_name (node 2)"]),
    ("etcd_proxy_port_out_of_range", "maru", hv("node-3", etcd_client_proxy_port=0), "node-3",
     ["etcd_client_proxy_port", "'127.0.0.1:0'"]),
    ("etcd_proxy_on_member_port", "maru", hv("node-1", etcd_address="127.0.0.5", etcd_client_proxy_address="127.0.0.5",
                                             etcd_client_proxy_port=2379), "node-1",
     ["etcd_client_proxy_port", "'127.0.0.5:2379'", "etcd client or peer port"]),
    ("firewall_conf_relative", "maru", hv("node-2", firewall_enabled=True, firewall_nftables_conf="nftables.conf"),
     "node-2", ["firewall_nftables_conf (nftables.conf)"]),
    ("firewall_conf_is_role_ruleset", "maru", hv("node-2", firewall_enabled=True,
                                                 firewall_nftables_conf="/etc/nftables.d/kvshare.nft"),
     "node-2", ["firewall_nftables_conf (/etc/nftables.d/kvshare.nft)"]),
    ("kvcr_socket_not_under_run", "kvcr", gv("kvcr", kvcr_service_socket_path="/tmp/kvcr.sock"), "gpu-a",
     ["kvcr_service_socket_path"]),
    ("kvcr_pool_dir_relative", "kvcr", gv("kvcr", kvcr_service_pool_dir="kvcr-pool"), "gpu-a", ["kvcr_service_pool_dir"]),
    ("kvcr_guard_count_zero", "kvcr", gv("kvcr", kvcr_service_guard_count=0), "gpu-a", ["kvcr_service_guard_count"]),
    ("kvcr_pool_sizes_empty", "kvcr", gv("kvcr", kvcr_service_pool_sizes_gb=[]), "gpu-a", ["kvcr_service_pool_sizes_gb"]),
    ("kvcr_heartbeat_too_short", "kvcr", gv("kvcr", kvcr_service_heartbeat_timeout_ms=500), "gpu-a",
     ["kvcr_service_heartbeat_timeout_ms"]),
    ("kvcr_nice_out_of_range", "kvcr", hv("gpu-b", kvcr_service_nice=20), "gpu-b", ["kvcr on gpu-b", "kvcr_service_nice"]),
    ("kvcr_timer_slack_out_of_range", "kvcr", hv("gpu-b", kvcr_service_timer_slack_ms=2000), "gpu-b",
     ["kvcr on gpu-b", "kvcr_service_timer_slack_ms"]),
    ("kvcr_state_agent_port_out_of_range", "kvcr", hv("gpu-b", kvcr_state_agent_system_port=70000), "gpu-b",
     ["kvcr on gpu-b"]),
    ("kvcr_without_etcd_env_file", "kvcr", hv("gpu-b", etcd_client_env_file=""), "gpu-b",
     ["etcd_client role's environment file"]),
    ("maru_git_without_version", "maru", hv("node-2", maru_pool_git_version=""), "node-2",
     ["maru_pool_install_method=git", "maru_pool_git_version"]),
    ("maru_archive_without_sha256", "maru", hv("node-2", maru_pool_install_method="archive",
                                               maru_pool_source_archive="/srv/maru/maru.tar.gz"), "node-2",
     ["maru_pool_install_method=archive", "maru_pool_source_archive_sha256"]),
    ("rdma_hca_override_key_not_gpu_index", "maru", hv("node-2", rdma_ucx_hca_overrides={"gpu0": "mlx5_0:1"}), "node-2",
     ["rdma_ucx_hca_overrides", "gpu0"]),
    ("rdma_hca_override_not_a_device", "maru", hv("node-2", rdma_ucx_hca_overrides={"0": "mlx5_0 port 1"}), "node-2",
     ["rdma_ucx_hca_overrides", "mlx5_0 port 1"]),
    ("rdma_gid_index_not_a_number", "maru", hv("node-2", rdma_ucx_gid_index="auto"), "node-2", ["rdma_ucx_gid_index"]),
    ("rdma_roce_mtu_negative", "maru", hv("node-2", rdma_ucx_roce_mtu=-1), "node-2", ["rdma_ucx_roce_mtu"]),
]


# The validation task each case must fail in (the only failed task of its run; check_name: the role
# without the collection's name, an argument-spec check without its description). Several cases
# share a check, each breaking it another way; every case runs (./dev.sh bad_inputs, CI).
CHECK_OF = {
    "dup_worker_name": "Check the worker list as the inventory writes it (dynamo_workers)",
    "dup_worker_system_port": "Check the worker list as the inventory writes it (dynamo_workers)",
    "dup_worker_rpc_port": "Check the worker list as the inventory writes it (dynamo_workers)",
    "worker_port_is_frontend_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "dup_maru_instance_id_on_host": "maru_pool : Preflight | Check the pool's workers (sizes, the per-layer chunk size, unique maru_instance_id)",
    "dup_maru_instance_id_across_hosts": "maru_pool : Preflight | Check the pool's workers (sizes, the per-layer chunk size, unique maru_instance_id)",
    "dup_maru_pool_instance_id": "maru_pool : Preflight | Check the pool's workers (sizes, the per-layer chunk size, unique maru_instance_id)",
    "etcd_group_name_only_in_inventory": "Check that the etcd plays and the roles use the same group (etcd_group_name)",
    "kvcr_group_name_only_in_inventory": "Check that the KVCR plays and the roles use the same group (kvcr_group_name)",
    "dup_etcd_member_name": "etcd : Check that member names and endpoints are unique",
    "dup_etcd_address": "etcd : Check that member names and endpoints are unique",
    "etcd_client_port_equals_peer_port": "etcd : Check this member's ports and address",
    "dup_kvcr_slot": "kvcr : Check the KVCR deployment across hosts (slots, nodes, digest, router mode)",
    "kvcr_slot_count_differs": "kvcr : Check that the KVCR hosts agree (variant, slot count, owner prefix, digest, hash seed, block size)",
    "kvcr_block_size_differs": "kvcr : Check that the KVCR hosts agree (variant, slot count, owner prefix, digest, hash seed, block size)",
    "no_etcd_group": "etcd_client : Check that etcd endpoints are known",
    "empty_etcd_group": "etcd_client : Check that etcd endpoints are known",
    "workers_without_frontend": "Check the worker list as the inventory writes it (dynamo_workers)",
    "two_models_on_one_endpoint": "dynamo_worker : Check that the workers of one endpoint serve one model (endpoint, served_model_name)",
    "one_name_two_model_sources": "dynamo_worker : Check that the workers of one endpoint serve one model (endpoint, served_model_name)",
    "controller_collection_missing": "Check the controller's collections (kvshare.dynamo's galaxy.yml dependencies)",
    "controller_collection_too_old": "Check the controller's collections (kvshare.dynamo's galaxy.yml dependencies)",
    "two_frontends": "dynamo_frontend : Check that the inventory has one frontend (group dynamo_frontend)",
    "maru_workers_without_pool_group": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "kv_pool_names_no_pool_host": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "kv_pool_of_several_pool_hosts": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "kv_pool_remote_on_loopback_pool": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "maru_block_size_not_dividing_chunk": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "kv_pool_unknown_type": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "kv_pool_kvcr_off_a_kvcr_host": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "maru_server_url_written_by_hand": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "maru_connector_without_kv_pool": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "kvcr_worker_without_kv_pool": "kvcr : Check this host's KVCR worker",
    "etcd_client_port_not_int": "etcd : Validating arguments against arg spec 'preflight'",
    "frontend_port_not_int": "dynamo_frontend : Validating arguments against arg spec 'preflight'",
    "dynamo_workers_not_a_list": "Check the host's worker list is a list of mappings (dynamo_workers, read by several roles)",
    "worker_gpus_string": "Check the worker list as the inventory writes it (dynamo_workers)",
    "worker_system_port_not_int": "Check the worker list as the inventory writes it (dynamo_workers)",
    "kv_pool_not_a_type_or_mapping": "dynamo_worker : Check the KV pool each worker names (kv_pool), its settings written once, the block size",
    "kvcr_slot_not_int": "kvcr : Validating arguments against arg spec 'preflight'",
    "extra_args_string": "Check the worker list as the inventory writes it (dynamo_workers)",
    "unknown_engine": "Check the worker list as the inventory writes it (dynamo_workers)",
    "unknown_router_mode": "dynamo_frontend : Validating arguments against arg spec 'preflight'",
    "kv_transfer_config_not_json": "Check the worker list as the inventory writes it (dynamo_workers)",
    "kv_transfer_config_without_connector": "Check the worker list as the inventory writes it (dynamo_workers)",
    "connector_on_mocker": "Check the worker list as the inventory writes it (dynamo_workers)",
    "unknown_discovery_backend": "dynamo_worker : Validating arguments against arg spec 'preflight'",
    "unknown_kvcr_variant": "kvcr : Validating arguments against arg spec 'preflight'",
    "kvcr_router_mode_not_kv": "kvcr : Check the KVCR deployment across hosts (slots, nodes, digest, router mode)",
    "gpu_memory_fraction_above_1": "Check the worker list as the inventory writes it (dynamo_workers)",
    "gpu_memory_fraction_zero": "Check the worker list as the inventory writes it (dynamo_workers)",
    "gpu_memory_sum_above_1": "Check the worker list as the inventory writes it (dynamo_workers)",
    "port_out_of_range": "Check the worker list as the inventory writes it (dynamo_workers)",
    "kvcr_slot_out_of_range": "kvcr : Check the KVCR deployment across hosts (slots, nodes, digest, router mode)",
    "frontend_ready_delay_too_long": "dynamo_frontend : Check the frontend inputs",
    "bind_address_not_ipv4": "Check the host's address (kvshare_bind_address)",
    "bind_address_hostname": "Check the host's address (kvshare_bind_address)",
    "bind_address_missing_offline": "Check that every host has its address in the inventory (offline validation)",
    "frontend_on_all_addresses": "dynamo_frontend : Check the frontend inputs",
    "workers_on_all_addresses": "dynamo_worker : Check the worker settings",
    "etcd_address_not_ipv4": "etcd : Check this member's ports and address",
    "kvcr_advertise_loopback": "kvcr : Check this host's KVCR worker",
    "etcd_tarball_without_sha256": "etcd : Check the tarball inputs",
    "etcd_tarball_without_url": "etcd : Check the tarball inputs",
    "etcd_client_ca_missing": "etcd_client : Check that the client matches the members (cluster name, TLS, the CA on the controller)",
    "etcd_client_tls_mismatch": "etcd_client : Check that the client matches the members (cluster name, TLS, the CA on the controller)",
    "etcd_client_cluster_name_mismatch": "etcd_client : Check that the client matches the members (cluster name, TLS, the CA on the controller)",
    "offline_pip_without_wheelhouse": "dynamo_runtime : Check the install source",
    "unknown_pip_index": "dynamo_runtime : Validating arguments against arg spec 'preflight'",
    "maru_artifacts_without_dir": "maru_pool : Preflight | Check the install method has its source",
    "maru_chunk_too_small": "maru_pool : Preflight | Check the pool's workers (sizes, the per-layer chunk size, unique maru_instance_id)",
    "rdma_bw_test_without_server": "rdma_ucx : Check that the toggles agree",
    "rdma_clear_acs_without_hardware": "rdma_ucx : Check that the toggles agree",
    "rdma_peermem_not_a_choice": "rdma_ucx : Check the static inputs",
    "rdma_tls_without_cuda": "rdma_ucx : Check that UCX_TLS carries a CUDA transport when GPU buffers are used",
    "kvcr_memory_service_without_digest": "kvcr : Check the KVCR deployment across hosts (slots, nodes, digest, router mode)",
    "kvcr_worker_missing": "kvcr : Check this host's KVCR worker",
    "kvcr_worker_without_rdma_transport": "kvcr : Check that the KVCR worker's GPUs move KV over RDMA only (UCX_NET_DEVICES, UCX_TLS=rc_x,cuda)",
    "worker_env_sets_dyn_connector": "Check the worker list as the inventory writes it (dynamo_workers)",
    "etcd_proxy_not_loopback": "etcd_client : Check the local proxy's address and port",
    "etcd_proxy_address_not_in_member_certs": "etcd_client : Check that the member certificates name the proxy address",
    "etcd_proxy_port_wrong_type": "etcd_client : Validating arguments against arg spec 'preflight'",
    "worker_port_is_default_frontend_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "worker_port_is_default_etcd_client_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "worker_port_is_default_etcd_peer_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "worker_port_is_default_maru_rm_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "worker_port_is_default_maru_server_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "worker_port_is_default_etcd_proxy_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "worker_port_is_default_kvcr_control_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "worker_port_is_default_kvcr_agent_port": "Check that no worker port is one another service of the host listens on (defaults included)",
    "dup_bind_address": "Check that no other host has the host's address (kvshare_bind_address)",
    "vllm_worker_gpus_empty": "Check the worker list as the inventory writes it (dynamo_workers)",
    "vllm_worker_without_gpus": "Check the worker list as the inventory writes it (dynamo_workers)",
    "worker_system_port_not_a_number": "Check the worker list as the inventory writes it (dynamo_workers)",
    "worker_prefix_caching_not_bool": "Check the worker list as the inventory writes it (dynamo_workers)",
    "offline_flag_in_site": "Refuse offline validation in a rollout (kvshare_validate_offline is for validate.yml alone)",
    "offline_flag_in_upgrade": "Refuse offline validation in a rollout (kvshare_validate_offline is for validate.yml alone)",
    "firewall_extra_port_out_of_range": "firewall : Check the ports and sources of this host's table",
    "firewall_extra_port_unknown_proto": "firewall : Validating arguments against arg spec 'preflight'",
    "firewall_frontend_source_bad_cidr": "firewall : Check the ports and sources of this host's table",
    "firewall_ssh_sources_string": "firewall : Check the ports and sources of this host's table",
    "firewall_ssh_port_not_int": "firewall : Validating arguments against arg spec 'preflight'",
    "firewall_drop_without_ssh_sources": "firewall : Check the ports and sources of this host's table",
    "firewall_policy_unknown": "firewall : Validating arguments against arg spec 'preflight'",
    "firewall_dynamic_range_reversed": "firewall : Check the ports and sources of this host's table",
    "bind_address_empty_offline": "Check that every host has its address in the inventory (offline validation)",
    "bind_address_all_addresses": "Check the host's address (kvshare_bind_address)",
    "dynamo_workers_item_not_a_mapping": "Check the host's worker list is a list of mappings (dynamo_workers, read by several roles)",
    "frontend_port_out_of_range": "dynamo_frontend : Check the frontend inputs",
    "frontend_env_disables_nvext": "dynamo_frontend : Check the frontend inputs",
    "frontend_env_sets_nats": "dynamo_frontend : Check the frontend inputs",
    "frontend_without_etcd_env_file": "dynamo_frontend : Check the frontend inputs",
    "workers_without_etcd_env_file": "dynamo_worker : Check the worker settings",
    "pip_steps_empty": "dynamo_runtime : Check the pip steps",
    "pip_step_without_packages": "dynamo_runtime : Check the pip steps",
    "pip_step_packages_string": "dynamo_runtime : Check the pip steps",
    "etcd_client_port_signed": "etcd : Check this member's ports and address",
    "etcd_peer_port_signed": "etcd : Check this member's ports and address",
    "etcd_client_port_out_of_range": "etcd : Check this member's ports and address",
    "etcd_peer_port_zero": "etcd : Check this member's ports and address",
    "etcd_member_name_not_plain": "etcd : Check this member's ports and address",
    "etcd_proxy_port_out_of_range": "etcd_client : Check the local proxy's address and port",
    "etcd_proxy_on_member_port": "etcd_client : Check the local proxy's address and port",
    "firewall_conf_relative": "firewall : Check the firewall settings",
    "firewall_conf_is_role_ruleset": "firewall : Check the firewall settings",
    "kvcr_socket_not_under_run": "kvcr : Check the KVCR settings",
    "kvcr_pool_dir_relative": "kvcr : Check the KVCR settings",
    "kvcr_guard_count_zero": "kvcr : Check the KVCR settings",
    "kvcr_pool_sizes_empty": "kvcr : Check the KVCR settings",
    "kvcr_heartbeat_too_short": "kvcr : Check the KVCR settings",
    "kvcr_nice_out_of_range": "kvcr : Check the KVCR settings",
    "kvcr_timer_slack_out_of_range": "kvcr : Check the KVCR settings",
    "kvcr_state_agent_port_out_of_range": "kvcr : Check the KVCR settings",
    "kvcr_without_etcd_env_file": "kvcr : Check the KVCR settings",
    "maru_git_without_version": "maru_pool : Preflight | Check the install method has its source",
    "maru_archive_without_sha256": "maru_pool : Preflight | Check the install method has its source",
    "rdma_hca_override_key_not_gpu_index": "rdma_ucx : Check the static inputs",
    "rdma_hca_override_not_a_device": "rdma_ucx : Check the static inputs",
    "rdma_gid_index_not_a_number": "rdma_ucx : Check the static inputs",
    "rdma_roce_mtu_negative": "rdma_ucx : Check the static inputs",
}


def check_name(task):
    """A task's name as CHECK_OF writes it."""
    name = task[len("kvshare.dynamo."):] if task.startswith("kvshare.dynamo.") else task
    return name.split("' - ", 1)[0] + "'" if "Validating arguments against arg spec '" in name else name


# Where a check asserts several conditions, the one each of its cases breaks (a piece of its text, in
# exactly one condition): Ansible reports the first false condition (`assertion`), so a case passes
# only when that one refuses it. Each condition has a case, or a reason in UNCOVERED_CONDITIONS.
CONDITION_OF = {
    "bind_address_missing_offline": "kvshare_bind_address is defined",
    "bind_address_empty_offline": "kvshare_bind_address | string | length > 0",
    "bind_address_not_ipv4": "kvshare_bind_address is match(",
    "bind_address_hostname": "kvshare_bind_address is match(",
    "bind_address_all_addresses": "kvshare_bind_address != '0.0.0.0'",
    "dynamo_workers_not_a_list": "dynamo_workers is sequence",
    "dynamo_workers_item_not_a_mapping": "reject('mapping')",
    "frontend_port_out_of_range": "dynamo_frontend_http_port | int >= 1",
    "frontend_on_all_addresses": "dynamo_frontend_http_host != '0.0.0.0'",
    "frontend_ready_delay_too_long": "dynamo_frontend_ready_delay",
    "frontend_without_etcd_env_file": "__dynamo_frontend_etcd_env_file",
    "frontend_env_disables_nvext": "'DYN_DISABLE_FRONTEND_NVEXT' not in",
    "frontend_env_sets_nats": "'NATS_SERVER' not in",
    "pip_steps_empty": "dynamo_runtime_pip_steps | length > 0",
    "pip_step_without_packages": "rejectattr('packages', 'defined')",
    "pip_step_packages_string": "map('type_debug')",
    "offline_pip_without_wheelhouse": "dynamo_runtime_wheelhouse_dir | length > 0",
    "workers_without_etcd_env_file": "__dynamo_worker_etcd_env_file",
    "workers_on_all_addresses": "dynamo_worker_bind_address != '0.0.0.0'",
    "etcd_client_port_signed": "etcd_client_port | string is match(",
    "etcd_peer_port_signed": "etcd_peer_port | string is match(",
    "etcd_client_port_out_of_range": "etcd_client_port | int >= 1",
    "etcd_peer_port_zero": "etcd_peer_port | int >= 1",
    "etcd_client_port_equals_peer_port": "etcd_client_port | int != etcd_peer_port | int",
    "etcd_address_not_ipv4": "etcd_address is match(",
    "etcd_member_name_not_plain": "etcd_member_name is match(",
    "etcd_tarball_without_url": "etcd_tarball_url | length > 0",
    "etcd_tarball_without_sha256": "etcd_tarball_sha256 is match(",
    "dup_etcd_member_name": "__etcd_names | unique",
    "dup_etcd_address": "__etcd_urls | unique",
    "etcd_client_cluster_name_mismatch": "cluster_name | default(etcd_client_cluster_name)",
    "etcd_client_tls_mismatch": "tls | default(etcd_client_tls_enabled)",
    "etcd_client_ca_missing": "__etcd_client_ca_found",
    "etcd_proxy_not_loopback": "etcd_client_proxy_address is match(",
    "etcd_proxy_port_out_of_range": "etcd_client_proxy_port | int >= 1",
    "etcd_proxy_on_member_port": "not in __etcd_client_member_listeners",
    "firewall_conf_relative": "firewall_nftables_conf is match(",
    "firewall_conf_is_role_ruleset": "__firewall_ruleset_path != firewall_nftables_conf",
    "kvcr_socket_not_under_run": "kvcr_service_socket_path is match(",
    "kvcr_pool_dir_relative": "kvcr_service_pool_dir is match(",
    "kvcr_guard_count_zero": "kvcr_service_guard_count | int >= 1",
    "kvcr_pool_sizes_empty": "kvcr_service_pool_sizes_gb | length >= 1",
    "kvcr_heartbeat_too_short": "kvcr_service_heartbeat_timeout_ms",
    "kvcr_nice_out_of_range": "kvcr_service_nice | int >= -20",
    "kvcr_timer_slack_out_of_range": "kvcr_service_timer_slack_ms | int >= 0",
    "kvcr_state_agent_port_out_of_range": "kvcr_state_agent_system_port",
    "kvcr_without_etcd_env_file": "__kvcr_etcd_env_file",
    "maru_artifacts_without_dir": "maru_pool_install_method != 'artifacts'",
    "maru_git_without_version": "maru_pool_install_method != 'git'",
    "maru_archive_without_sha256": "maru_pool_install_method != 'archive'",
    "rdma_peermem_not_a_choice": "rdma_ucx_peermem | string in",
    "rdma_hca_override_key_not_gpu_index": "rdma_ucx_hca_overrides.keys()",
    "rdma_hca_override_not_a_device": "rdma_ucx_hca_overrides.values()",
    "rdma_gid_index_not_a_number": "rdma_ucx_gid_index",
    "rdma_roce_mtu_negative": "rdma_ucx_roce_mtu",
    "rdma_clear_acs_without_hardware": "rdma_ucx_clear_acs",
    "rdma_bw_test_without_server": "rdma_ucx_bw_test",
}

# Conditions no case reaches offline, and why: (check, piece of the condition) -> reason.
_SPEC_FIRST = "the argument spec's choices refuse any other value first (case %s)"
_ON_THE_HOST = "it reads %s on the host: not run by offline validation"
UNCOVERED_CONDITIONS = {
    ("dynamo_runtime : Check the install source", "dynamo_runtime_pip_index in"): _SPEC_FIRST % "unknown_pip_index",
    ("dynamo_runtime : Refuse to renumber an existing service account", "dynamo_runtime_uid"):
        _ON_THE_HOST % "the service account",
    ("dynamo_runtime : Refuse to renumber an existing service account", "dynamo_runtime_gid"):
        _ON_THE_HOST % "the service account",
    ("dynamo_worker : Check the worker settings", "dynamo_worker_discovery_backend in"):
        _SPEC_FIRST % "unknown_discovery_backend",
    ("dynamo_worker : Check the worker settings", "__kvshare_frontend_url"):
        "validate.yml's worker list check refuses workers without a frontend first (case workers_without_frontend)",
    ("etcd : Check that the etcd group exists and has members", "etcd_group_name in groups"):
        "run once for the cluster: its message names the group, no host (every case's message names its host)",
    ("etcd : Check that the etcd group exists and has members", "groups[etcd_group_name] | length > 0"):
        "run once for the cluster: its message names the group, no host (every case's message names its host)",
    ("kvcr : Check the KVCR settings", "kvcr_variant in"): _SPEC_FIRST % "unknown_kvcr_variant",
    ("maru_pool : Preflight | Check Python version", "__maru_pool_python_version.rc"): _ON_THE_HOST % "maru_pool_python",
    ("maru_pool : Preflight | Check Python version", "__maru_pool_python_version.stdout"): _ON_THE_HOST % "maru_pool_python",
    ("maru_pool : Preflight | Check that the workers can open FS_DAX pool files (maru_pool_rm_user)",
     "maru_pool_worker_users | length <= 1"): _ON_THE_HOST % "the FS_DAX pool (it runs only where the host has one)",
    ("maru_pool : Preflight | Check that the workers can open FS_DAX pool files (maru_pool_rm_user)",
     "maru_pool_rm_user in maru_pool_worker_users"): _ON_THE_HOST % "the FS_DAX pool (it runs only where the host has one)",
    ("rdma_ucx : Check the static inputs", "rdma_ucx_link_layer in"): "the argument spec's choices refuse any other value first",
    ("rdma_ucx : Refuse nvidia_peermem without an OFED/DOCA stack", "__rdma_ucx_ofed"): _ON_THE_HOST % "the OFED/DOCA stack",
    ("rdma_ucx : Refuse nvidia_peermem without an OFED/DOCA stack", "__rdma_ucx_peermem_probe"):
        _ON_THE_HOST % "nvidia_peermem",
}

# Cases whose check's message does not name the variable the case writes (the role's message names
# what it needs instead): their needles are what the message says, and this strict xfail turns into
# a failure once the message names the variable, so that the case's needles can say so.
MESSAGE_LACKS_VARIABLE = {
    "frontend_without_etcd_env_file": "etcd_client_env_file",
    "workers_without_etcd_env_file": "etcd_client_env_file",
    "kvcr_without_etcd_env_file": "etcd_client_env_file",
    "kvcr_state_agent_port_out_of_range": "kvcr_state_agent_system_port",
}


def _asserts(tasks, prefix):
    """(check name, conditions) of every assert task in ``tasks`` (blocks included)."""
    for task in tasks or []:
        for key in ("block", "rescue", "always"):
            yield from _asserts(task.get(key), prefix)
        spec = task.get("ansible.builtin.assert", task.get("assert"))
        # kvshare.dynamo.checks: each check is an assert of its own name (a failure returns it).
        checks = (task.get("kvshare.dynamo.checks") or {}).get("checks") or []
        for check in [dict(spec, name=task["name"])] if spec is not None else [c for c in checks if "that" in c]:
            that = check.get("that")
            yield prefix + check["name"], [str(c) for c in (that if isinstance(that, list) else [that])]


def multi_condition_asserts():
    """{check name: conditions} of every assert with several conditions that validate.yml runs: its
    own and those of each role's preflight it includes."""
    with open(PLAYBOOK) as fh:
        tasks = yaml.safe_load(fh)[0]["tasks"]
    found = dict(_asserts(tasks, ""))
    for task in tasks:
        role = task.get("ansible.builtin.include_role") or {}
        if role.get("tasks_from") == "preflight":
            name = role["name"].rsplit(".", 1)[-1]
            with open(os.path.join(REPO, "roles", name, "tasks", "preflight.yml")) as fh:
                found.update(_asserts(yaml.safe_load(fh), name + " : "))
    return {check: conditions for check, conditions in found.items() if len(conditions) > 1}


MULTI_CONDITION = multi_condition_asserts()


def condition_of(check, piece):
    """The one condition of ``check`` that contains ``piece``."""
    matches = [c for c in MULTI_CONDITION.get(check, []) if piece in c]
    assert len(matches) == 1, "%r names %d conditions of %r: %s" % (piece, len(matches), check, matches)
    return matches[0]


_RESULTS = {}


def _jobs():
    """Cases at a time: KVSHARE_BAD_INPUT_JOBS (CI: 1, beside the molecule scenario), else one per CPU (2-6)."""
    return int(os.environ.get("KVSHARE_BAD_INPUT_JOBS") or max(2, min(6, os.cpu_count() or 2)))


def _env(tmp):
    """The runs' environment: the suite's Ansible settings (read once, by the server), the loopback guard."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCAL_TEMP=os.path.join(tmp, "ansible-local"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    return ansible_guard.runtime_env(env)  # the guard in the server, so in every run's processes


def _report(stdout):
    try:
        # The JSON document, then whatever notification callbacks (profile_tasks) print.
        return json.JSONDecoder().raw_decode(stdout[stdout.index("{"):])[0]
    except ValueError:
        return None


@pytest.fixture(scope="module")
def results(request):
    """Run both bases and every selected case once, each its own ansible-playbook run, in one
    pre-forking server (prefork.py)."""
    if not _RESULTS:
        selected = {item.callspec.params["case_id"] for item in request.session.items
                    if getattr(item, "module", None) is request.module
                    and "case_id" in getattr(getattr(item, "callspec", None), "params", {})}
        runs = [("base_" + b, b, None) for b in BASES] + [(c[0], c[1], c[2]) for c in CASES if c[0] in selected]
        with tempfile.TemporaryDirectory(prefix="kvshare-bad-inputs-") as tmp:
            env = _env(tmp)
            jobs = []
            for case_id, base, mutation in runs:
                workdir = os.path.join(tmp, case_id)
                os.makedirs(workdir)
                inv = copy.deepcopy(BASES[base]())
                if mutation is not None:
                    mutation(inv)
                playbook = os.path.join(REPO, inv.pop("playbook", PLAYBOOK))
                extra_vars = inv.pop("extra_vars", None)
                path = os.path.join(workdir, "hosts.yml")
                with open(path, "w") as fh:
                    yaml.safe_dump(inventory_yaml(inv), fh, sort_keys=False)
                argv = [ANSIBLE_PLAYBOOK, "-i", path, playbook, "-e", "kvshare_validate_offline=true"]
                if extra_vars:
                    argv += ["-e", json.dumps(extra_vars)]
                try:
                    # What the guard checks before an ansible-playbook starts (these start in the server).
                    ansible_guard.check_run(argv, REPO, env, runtime=True)
                except ansible_guard.NonLoopbackAnsibleRun as exc:
                    ansible_guard.record(str(exc))
                    _RESULTS[case_id] = {"refused": str(exc)}
                    continue
                jobs.append({"id": case_id, "argv": argv, "stdout": os.path.join(workdir, "stdout"),
                             "stderr": os.path.join(workdir, "stderr")})
            ran = prefork.run_playbooks(jobs, env, parallel=_jobs(), timeout=300)
            for job in jobs:
                with open(job["stdout"]) as out, open(job["stderr"]) as err:
                    stdout, stderr = out.read(), err.read()
                _RESULTS[job["id"]] = dict(ran[job["id"]], report=_report(stdout), stdout=stdout, stderr=stderr)
    return _RESULTS


def audit(result):
    """Every executed task is controller-side validation; every host changed=0. Returns the failures:
    (host, task name, message and argument errors as JSON, the false condition of a failed assert)."""
    assert "refused" not in result, result.get("refused")
    report = result["report"]
    assert report is not None, "rc=%s: %s %s" % (result["rc"], result["stdout"][-3000:], result["stderr"][-3000:])
    assert [p["play"]["name"] for p in report["plays"]] == ["Validate the inventory before any host changes"]
    failures = []
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                if res.get("skipped"):
                    continue
                action = (res.get("action") or "").rsplit(".", 1)[-1]
                assert action in ALLOWED_ACTIONS, "task %r ran %s on %s" % (task["task"]["name"], action, host)
                assert not res.get("changed"), "task %r changed %s" % (task["task"]["name"], host)
                if res.get("failed"):
                    failures.append((host, failed_check(task["task"]["name"], res), json.dumps(res.get("msg", ""))
                                     + json.dumps(res.get("argument_errors", "")), res.get("assertion")))
    for host, stats in report["stats"].items():
        assert stats["changed"] == 0, (host, stats)
    return failures


def failed_check(task_name, res):
    """The check that failed: the task's name, or for kvshare.dynamo.checks the failed check's name
    (``check``) under the task's role prefix."""
    if not res.get("check"):
        return task_name
    return (task_name.split(" : ", 1)[0] + " : " if " : " in task_name else "") + res["check"]


def named_failures(failures, host):
    """The failures that name ``host``: in their message, or as the failed host of an argument spec check."""
    return [f for f in failures if host in f[2] or (f[0] == host and "argument" in f[2].lower())]


@pytest.mark.parametrize("base", sorted(BASES))
def test_base_inventory_is_valid(results, base):
    result = results["base_" + base]
    failures = audit(result)
    assert result["rc"] == 0 and not failures, failures or result["stderr"][-3000:]


def test_at_least_25_cases_each_with_its_check():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 25
    assert sorted(CHECK_OF) == sorted(ids)


def test_every_condition_has_a_case():
    """Each condition of a multi-condition assert has a case that fails on it alone (CONDITION_OF), or
    a reason in UNCOVERED_CONDITIONS; each case of such an assert names its condition."""
    assert not set(CONDITION_OF) - set(CHECK_OF), "CONDITION_OF names no case: %s" % sorted(set(CONDITION_OF) - set(CHECK_OF))
    missing = sorted(c for c in CHECK_OF if CHECK_OF[c] in MULTI_CONDITION and c not in CONDITION_OF)
    assert not missing, "cases of a multi-condition assert without CONDITION_OF: %s" % missing
    covered = {(CHECK_OF[c], condition_of(CHECK_OF[c], piece)) for c, piece in CONDITION_OF.items()}
    uncovered = {(check, condition_of(check, piece)) for check, piece in UNCOVERED_CONDITIONS}
    assert not covered & uncovered, "conditions with a case and a reason for none: %s" % sorted(covered & uncovered)
    lacking = sorted((check, condition) for check, conditions in MULTI_CONDITION.items() for condition in conditions
                     if (check, condition) not in covered | uncovered)
    assert not lacking, "conditions with no case (add one, or the reason to UNCOVERED_CONDITIONS): %s" % lacking


@pytest.mark.parametrize("case_id,base,mutation,host,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input_rejected(results, record_property, case_id, base, mutation, host, needles):
    result = results[case_id]
    record_property("bad_input_cpu_s", result.get("cpu", 0.0))  # conftest.py sums them
    failures = audit(result)
    assert result["rc"] != 0, "%s: validate.yml passed an invalid inventory" % case_id
    assert failures, "%s: rc=%s but no failed task: %s" % (case_id, result["rc"], result["stderr"][-2000:])
    # It fails in the check it is written for, not in an earlier one that happens to name the host.
    failed_in = sorted({check_name(f[1]) for f in failures})
    assert failed_in == [CHECK_OF[case_id]], "%s: failed in %s, expected %r" % (case_id, failed_in, CHECK_OF[case_id])
    # ... and, where that check asserts several conditions, on the condition it is written for.
    if case_id in CONDITION_OF:
        expected = condition_of(CHECK_OF[case_id], CONDITION_OF[case_id])
        failed_on = sorted({str(f[3]) for f in failures})
        assert failed_on == [expected], "%s: failed on %s, expected %r" % (case_id, failed_on, expected)
    # The failure names the offending host (in its message, or as the failed host of an argument
    # spec check) and every needle (variable names).
    named = named_failures(failures, host)
    assert named, "%s: no failure names host %s: %s" % (case_id, host, failures)
    text = " ".join(f[2] for f in named)
    missing = [n for n in needles if n not in text]
    assert not missing, "%s: message does not name %s: %s" % (case_id, missing, named)


@pytest.mark.parametrize("case_id", [pytest.param(c, marks=pytest.mark.xfail(
    strict=True, reason="the message of %s does not name %s" % (CHECK_OF[c], v))) for c, v in sorted(MESSAGE_LACKS_VARIABLE.items())])
def test_message_names_the_variable_written(results, case_id):
    """MESSAGE_LACKS_VARIABLE, kept true: once such a message names the variable, this passes and
    (strict) fails the run: drop the case from MESSAGE_LACKS_VARIABLE and add the variable to its needles."""
    text = " ".join(f[2] for f in named_failures(audit(results[case_id]), dict((c[0], c[3]) for c in CASES)[case_id]))
    assert MESSAGE_LACKS_VARIABLE[case_id] in text
