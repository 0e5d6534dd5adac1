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
- the failure message names the offending variable and the offending host (a failed argument
  spec is attributed to its host by Ansible, `fatal: [host]`; the spec message names the variable).
The base inventories themselves must pass (test_base_inventory_is_valid), so each failure is the
mutation's. A few cases run a rollout (site.yml, upgrade.yml) with the offline flag instead: it must
refuse the flag in its validation play, before anything else runs. The cases run as many at a time
as there are CPUs (2-6; one ansible-playbook each) or KVSHARE_BAD_INPUT_JOBS; conftest.py prints
"bad inputs rejected N/N".
"""
import concurrent.futures
import copy
import json
import os
import subprocess
import sys
import tempfile

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(REPO, "playbooks", "validate.yml")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
# Controller-side actions only: anything else would have run on a host (or on this machine).
ALLOWED_ACTIONS = {"assert", "set_fact", "debug", "include_role", "include_vars", "validate_argument_spec", "meta"}


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


def node3_maru_worker(kv_pool):
    """node-3 runs one Maru worker instead of its mockers, fed by the pool ``kv_pool`` names."""
    def mutate(inv):
        inv["hosts"]["node-3"]["dynamo_workers"] = [_maru_worker("w0", 18081, 19081, kv_pool=kv_pool)]
    return mutate


# (id, base, mutation, host the message must name, variables the message must name)
CASES = [
    # duplicates
    ("dup_worker_name", "maru", worker("node-2", 1, name="w0"), "node-2", ["dynamo_workers", "duplicate worker name"]),
    ("dup_worker_system_port", "maru", worker("node-2", 1, system_port=18081), "node-2", ["system_port 18081"]),
    ("dup_worker_rpc_port", "maru", worker("node-3", 1, rpc_port=19081), "node-3", ["rpc_port 19081"]),
    ("worker_port_is_frontend_port", "maru", both(group("dynamo_frontend", ["node-3"]),
                                                  hv("node-3", dynamo_frontend_http_port=18082)),
     "node-3", ["system_port 18082", "frontend HTTP port"]),
    ("dup_maru_instance_id_on_host", "maru", worker("node-2", 1, kv_pool={"type": "maru", "instance_id": "node-2-w0"}),
     "node-2", ["maru_instance_id 'node-2-w0'", "dynamo_workers[w1].kv_pool.instance_id on node-2"]),
    ("dup_maru_instance_id_across_hosts", "maru", node3_maru_worker({"type": "maru", "instance_id": "node-2-w0"}),
     "node-3", ["maru_instance_id 'node-2-w0'", "dynamo_workers[w0].kv_pool.instance_id on node-3"]),
    ("dup_maru_pool_instance_id", "maru",
     both(worker("node-2", 0, kv_pool={"type": "maru", "instance_id": "x"}),
          worker("node-2", 1, kv_pool={"type": "maru", "instance_id": "x"})),
     "node-2", ["maru_instance_id 'x'", "dynamo_workers[w1].kv_pool.instance_id"]),
    ("dup_etcd_member_name", "maru", hv("node-2", etcd_member_name="node-1"), "node-2", ["etcd_member_name"]),
    ("dup_etcd_address", "maru", hv("node-3", etcd_address="10.0.0.1"), "node-3", ["etcd_address"]),
    ("etcd_client_port_equals_peer_port", "maru", hv("node-1", etcd_peer_port=2379), "node-1", ["etcd_peer_port"]),
    ("dup_kvcr_slot", "kvcr", hv("gpu-b", kvcr_cache_slot=0), "gpu-b", ["kvcr_cache_slot"]),
    # missing groups
    ("no_etcd_group", "maru", group("etcd", None), "node-1", ["etcd_client_endpoints", "'etcd'"]),
    ("empty_etcd_group", "maru", group("etcd", []), "node-2", ["etcd_client_endpoints", "'etcd'"]),
    ("workers_without_frontend", "maru", group("dynamo_frontend", []), "node-2", ["dynamo_workers", "no frontend"]),
    ("maru_workers_without_pool_group", "maru", group("maru_pool", None), "node-2",
     ["dynamo_workers[w0].kv_pool on node-2", "no host of group maru_pool"]),
    # a worker names its pool (kv_pool), and the pool must exist and be the one to choose
    ("kv_pool_names_no_pool_host", "maru", node3_maru_worker({"type": "maru", "host": "node-9"}), "node-3",
     ["dynamo_workers[w0].kv_pool on node-3", "node-9 is not in group maru_pool"]),
    ("kv_pool_of_several_pool_hosts", "maru", both(group("maru_pool", ["node-1", "node-2"]), node3_maru_worker("maru")),
     "node-3", ["dynamo_workers[w0].kv_pool on node-3", "several hosts (node-1, node-2)"]),
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
        "rpc_port": 23280, "kv_pool": "kvcr"}]),
     "gpu-b", ["dynamo_workers[kvcr].rpc_port", "23280", "kvcr_control_port"]),
    ("worker_port_is_default_kvcr_agent_port", "kvcr", hv("gpu-a", dynamo_workers=[{
        "name": "kvcr", "engine": "vllm", "model": "Qwen/Qwen3-0.6B", "gpus": ["0"], "system_port": 9091,
        "rpc_port": 9190, "kv_pool": "kvcr"}]),
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
]


# The validation task each case must fail in (the only failed task of its run; check_name: the role
# without the collection's name, an argument-spec check without its description). Several cases
# share a check, each breaking it another way: `KVSHARE_BAD_INPUTS=checks` runs the first case of
# each check (CI, beside the molecule scenario: every check the suite reaches, proven once), the
# default `all` every case.
CHECK_OF = {
    "dup_worker_name": "Check the worker list as the inventory writes it (dynamo_workers)",
    "dup_worker_system_port": "Check the worker list as the inventory writes it (dynamo_workers)",
    "dup_worker_rpc_port": "Check the worker list as the inventory writes it (dynamo_workers)",
    "worker_port_is_frontend_port": "dynamo_worker : Check the worker list",
    "dup_maru_instance_id_on_host": "maru_pool : Preflight | Check the pool's workers (sizes, the per-layer chunk size, unique maru_instance_id)",
    "dup_maru_instance_id_across_hosts": "maru_pool : Preflight | Check the pool's workers (sizes, the per-layer chunk size, unique maru_instance_id)",
    "dup_maru_pool_instance_id": "maru_pool : Preflight | Check the pool's workers (sizes, the per-layer chunk size, unique maru_instance_id)",
    "dup_etcd_member_name": "etcd : Check that member names and endpoints are unique",
    "dup_etcd_address": "etcd : Check that member names and endpoints are unique",
    "etcd_client_port_equals_peer_port": "etcd : Check this member's ports and address",
    "dup_kvcr_slot": "kvcr : Check the KVCR deployment across hosts (slots, nodes, digest, router mode)",
    "no_etcd_group": "etcd_client : Check that etcd endpoints are known",
    "empty_etcd_group": "etcd_client : Check that etcd endpoints are known",
    "workers_without_frontend": "Check the worker list as the inventory writes it (dynamo_workers)",
    "maru_workers_without_pool_group": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
    "kv_pool_names_no_pool_host": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
    "kv_pool_of_several_pool_hosts": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
    "kv_pool_unknown_type": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
    "kv_pool_kvcr_off_a_kvcr_host": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
    "maru_server_url_written_by_hand": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
    "maru_connector_without_kv_pool": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
    "kvcr_worker_without_kv_pool": "kvcr : Check this host's KVCR worker",
    "etcd_client_port_not_int": "etcd : Validating arguments against arg spec 'preflight'",
    "frontend_port_not_int": "dynamo_frontend : Validating arguments against arg spec 'preflight'",
    "dynamo_workers_not_a_list": "Check the host's worker list is a list of mappings (dynamo_workers, read by several roles)",
    "worker_gpus_string": "Check the worker list as the inventory writes it (dynamo_workers)",
    "worker_system_port_not_int": "Check the worker list as the inventory writes it (dynamo_workers)",
    "kv_pool_not_a_type_or_mapping": "dynamo_worker : Check the KV pool each worker names (kv_pool) and that its settings are written once",
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
}


def check_name(task):
    """A task's name as CHECK_OF writes it."""
    name = task[len("kvshare.dynamo."):] if task.startswith("kvshare.dynamo.") else task
    return name.split("' - ", 1)[0] + "'" if "Validating arguments against arg spec '" in name else name


def selected_cases():
    """The cases this run proves: all (default) or, KVSHARE_BAD_INPUTS=checks, the first of each check."""
    which = os.environ.get("KVSHARE_BAD_INPUTS", "all")
    if which not in ("all", "checks"):
        raise ValueError("KVSHARE_BAD_INPUTS=%s: all or checks" % which)
    if which == "all":
        return list(CASES)
    first = {}
    for case in CASES:
        first.setdefault(CHECK_OF[case[0]], case)
    return [c for c in CASES if first[CHECK_OF[c[0]]] is c]


SELECTED = selected_cases()


def run_case(base, mutation, workdir):
    inv = copy.deepcopy(BASES[base]())
    if mutation is not None:
        mutation(inv)
    playbook = os.path.join(REPO, inv.pop("playbook", PLAYBOOK))
    path = os.path.join(workdir, "hosts.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(inventory_yaml(inv), fh, sort_keys=False)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_LOCAL_TEMP=os.path.join(workdir, "tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", path, playbook, "-e", "kvshare_validate_offline=true"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        # The JSON document, then whatever notification callbacks (profile_tasks) print.
        report = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])[0]
    except ValueError:
        report = None
    return {"rc": proc.returncode, "report": report, "stdout": proc.stdout, "stderr": proc.stderr}


_RESULTS = {}


def _jobs():
    """Cases at a time: KVSHARE_BAD_INPUT_JOBS (CI: 1, beside the molecule scenario), else one per CPU (2-6)."""
    return int(os.environ.get("KVSHARE_BAD_INPUT_JOBS") or max(2, min(6, os.cpu_count() or 2)))


@pytest.fixture(scope="module")
def results():
    """Run every case (and both bases) once, one ansible-playbook each, a few at a time."""
    if not _RESULTS:
        jobs = [("base_" + b, b, None) for b in BASES] + [(c[0], c[1], c[2]) for c in SELECTED]
        with tempfile.TemporaryDirectory(prefix="kvshare-bad-inputs-") as tmp:
            with concurrent.futures.ThreadPoolExecutor(max_workers=_jobs()) as pool:
                futures = {}
                for case_id, base, mutation in jobs:
                    workdir = os.path.join(tmp, case_id)
                    os.makedirs(workdir)
                    futures[pool.submit(run_case, base, mutation, workdir)] = case_id
                for future in concurrent.futures.as_completed(futures):
                    _RESULTS[futures[future]] = future.result()
    return _RESULTS


def audit(result):
    """Every executed task is controller-side validation; every host changed=0. Returns the failures."""
    report = result["report"]
    assert report is not None, result["stdout"][-3000:] + result["stderr"][-3000:]
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
                    failures.append((host, task["task"]["name"], json.dumps(res.get("msg", ""))
                                     + json.dumps(res.get("argument_errors", ""))))
    for host, stats in report["stats"].items():
        assert stats["changed"] == 0, (host, stats)
    return failures


@pytest.mark.parametrize("base", sorted(BASES))
def test_base_inventory_is_valid(results, base):
    result = results["base_" + base]
    failures = audit(result)
    assert result["rc"] == 0 and not failures, failures or result["stderr"][-3000:]


def test_at_least_25_cases_each_with_its_check():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 25
    assert sorted(CHECK_OF) == sorted(ids)


@pytest.mark.parametrize("case_id,base,mutation,host,needles", SELECTED, ids=[c[0] for c in SELECTED])
def test_bad_input_rejected(results, case_id, base, mutation, host, needles):
    result = results[case_id]
    failures = audit(result)
    assert result["rc"] != 0, "%s: validate.yml passed an invalid inventory" % case_id
    assert failures, "%s: rc=%s but no failed task: %s" % (case_id, result["rc"], result["stderr"][-2000:])
    # It fails in the check it is written for, not in an earlier one that happens to name the host.
    failed_in = sorted({check_name(f[1]) for f in failures})
    assert failed_in == [CHECK_OF[case_id]], "%s: failed in %s, expected %r" % (case_id, failed_in, CHECK_OF[case_id])
    # The failure names the offending host (in its message, or as the failed host of an argument
    # spec check) and every needle (variable names).
    named = [f for f in failures if host in f[2] or (f[0] == host and "argument" in f[2].lower())]
    assert named, "%s: no failure names host %s: %s" % (case_id, host, failures)
    text = " ".join(f[2] for f in named)
    missing = [n for n in needles if n not in text]
    assert not missing, "%s: message does not name %s: %s" % (case_id, missing, named)
