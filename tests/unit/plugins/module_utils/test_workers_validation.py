# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for the cross-host worker checks and port requests in plugins/module_utils/workers.py."""
from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as w


def maru(name, iid, url="tcp://10.0.0.2:5555"):
    return {"name": name, "engine": "vllm", "model": "m", "system_port": 1, "kv_transfer_config": {
        "kv_connector": "MaruKVConnector", "kv_connector_extra_config": {"maru_server_url": url, "maru_instance_id": iid}}}


def test_port_requests_name_variable_and_unit():
    reqs = w.port_requests([{"name": "w0", "system_port": 18081, "rpc_port": "19081"}, {"name": "w1", "system_port": 0}],
                           "10.0.0.2")
    assert reqs == [
        {"port": 18081, "address": "10.0.0.2", "variable": "dynamo_workers[w0].system_port", "units": ["dynamo-worker@w0.service"]},
        {"port": 19081, "address": "10.0.0.2", "variable": "dynamo_workers[w0].rpc_port", "units": ["dynamo-worker@w0.service"]},
    ]


def test_duplicate_instance_id_across_hosts_names_both():
    errs = w.cluster_worker_errors({"a": [maru("w0", "x")], "b": [maru("w1", "x")]})
    assert errs == ["worker 'w1' on b: maru_instance_id 'x' is already used by worker 'w0' on a (set kv_pool.instance_id)"]
    # two pools, one id: still refused (ids are unique across the deployment)
    errs = w.cluster_worker_errors({"a": [maru("w0", "x")], "b": [maru("w1", "x", "tcp://10.0.0.3:5555")]})
    assert len(errs) == 1


def test_key_label_names_the_worker_or_its_index():
    assert w.key_label("h", {"name": "w0"}, 3, "kv_pool") == "dynamo_workers[w0].kv_pool on h"
    assert w.key_label("h", {}, 3, "kv_pool") == "dynamo_workers[3].kv_pool on h"
    assert w.key_label("h", "oops", 1, "gpus") == "dynamo_workers[1].gpus on h"


def test_worker_errors_accept_a_partial_config_with_kv_pool():
    worker = {"name": "w0", "engine": "vllm", "model": "m", "gpus": ["0"], "system_port": 1, "kv_pool": "maru",
              "kv_transfer_config": {"kv_role": "kv_producer"}}
    assert w.worker_errors([worker], "h", ["fe"]) == []
    worker.pop("kv_pool")
    assert w.worker_errors([worker], "h", ["fe"]) == ["worker 'w0' on h: kv_transfer_config has no 'kv_connector'"]


def test_malformed_entries_left_to_worker_errors():
    assert w.cluster_worker_errors({"a": "oops", "b": ["x", {"name": "m", "engine": "mocker"},
                                                       {"name": "j", "kv_transfer_config": "{bad"}]}) == []


# --- worker_errors: keys and types as the inventory writes them -----------------------------------

import os  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def good(**kw):
    worker = {"name": "w0", "engine": "vllm", "model": "m", "gpus": ["0"], "system_port": 18081}
    worker.update(kw)
    return worker


def test_worker_keys_match_the_role_argument_spec():
    with open(os.path.join(REPO, "roles", "dynamo_worker", "meta", "argument_specs.yml")) as fh:
        specs = yaml.safe_load(fh)["argument_specs"]
    for entry in ("main", "preflight"):
        options = specs[entry]["options"]["dynamo_workers"]["options"]
        assert dict((k, v["type"]) for k, v in options.items()) == w.WORKER_KEYS, entry


@pytest.mark.parametrize("kw,message", [
    ({"system_port": "18081x"}, "dynamo_workers[w0].system_port on h: must be an integer in 1-65535 (got '18081x')"),
    ({"rpc_port": True}, "dynamo_workers[w0].rpc_port on h: must be an integer in 1-65535 (got True)"),
    ({"prefix_caching": "sometimes"}, "dynamo_workers[w0].prefix_caching on h: must be true or false (got 'sometimes')"),
    ({"served_model_name": ["a"]}, "dynamo_workers[w0].served_model_name on h: must be a string (got ['a'])"),
    ({"gpus": [{"id": 0}]}, "dynamo_workers[w0].gpus on h: must be a list of strings (got [{'id': 0}])"),
    ({"gpus": "0"}, "dynamo_workers[w0].gpus on h: must be a list of GPU ids (got '0')"),
    ({"gpus": []}, "dynamo_workers[w0].gpus on h: a vLLM worker must list its GPUs, e.g. gpus: [\"0\"] (got [])"),
    ({"extra_args": "--x"}, "dynamo_workers[w0].extra_args on h: must be a list of arguments (got '--x')"),
    ({"env": ["A=1"]}, "dynamo_workers[w0].env on h: must be a mapping (got ['A=1'])"),
    ({"system_prot": 1}, "dynamo_workers[w0].system_prot on h: unknown key (known: "),
])
def test_wrong_type_is_named_as_the_inventory_writes_it(kw, message):
    errors = w.worker_errors([good(**kw)], "h", ["fe"])
    assert any(e.startswith(message) for e in errors), errors


def test_vllm_worker_without_gpus_key_and_unnamed_worker():
    worker = good()
    del worker["gpus"]
    assert w.worker_errors([worker], "h", ["fe"]) == [
        "dynamo_workers[w0].gpus on h: a vLLM worker must list its GPUs, e.g. gpus: [\"0\"] (got None)"]
    assert any(e.startswith("dynamo_workers[0].system_port on h:") for e in
               w.worker_errors([good(name=None, system_port="x")], "h", ["fe"]))


def test_accepted_spellings_pass():
    # what the argument spec converts: digit strings for ints, yes/no for bools, ints for strings
    assert w.worker_errors([good(system_port="18081", prefix_caching="no", served_model_name=7, gpus=[0])],
                           "h", ["fe"]) == []
    assert w.worker_errors([good(engine="mocker", gpus=[])], "h", ["fe"]) == []


def model_worker(name, model="m", **kw):
    return dict({"name": name, "engine": "vllm", "model": model, "system_port": 1}, **kw)


def test_two_models_on_the_default_endpoint_across_hosts_are_refused():
    """Dynamo keeps one model per endpoint: the second model on it exits at start (issue 34)."""
    errs = w.endpoint_model_errors({"a": [model_worker("w0", "Qwen/A")], "b": [model_worker("w1", "Qwen/B")]})
    assert errs == [
        "dynamo_workers[w1].model on b: serves 'Qwen/B' on endpoint dyn://dynamo.backend.generate (no endpoint set: "
        "the default), where dynamo_workers[w0].model on a serves 'Qwen/A': Dynamo registers one model per endpoint "
        "and refuses the second at start. Give one of them its own endpoint (dynamo_workers[<worker>].endpoint, "
        "e.g. dyn://dynamo.<component>.generate) or one served_model_name"]


def test_served_model_name_is_the_name_and_an_endpoint_spelt_two_ways_is_one():
    ep = "dyn://ns.mocker.generate"
    errs = w.endpoint_model_errors({
        "a": [model_worker("m0", "/models/x", engine="mocker", endpoint=ep, served_model_name="mock")],
        "b": [model_worker("m1", "/other/x", engine="mocker", served_model_name="mock2",
                           extra_args=["--endpoint=" + ep])]})
    assert len(errs) == 1 and errs[0].startswith(
        "dynamo_workers[m1].served_model_name on b: serves 'mock2' on endpoint dyn://ns.mocker.generate (its endpoint), "
        "where dynamo_workers[m0].served_model_name on a serves 'mock'")
    assert "e.g. dyn://ns.<component>.generate" in errs[0]
    # one name and one model on one endpoint: fine
    assert w.endpoint_model_errors({
        "a": [model_worker("m0", "/models/x", endpoint=ep, served_model_name="mock")],
        "b": [model_worker("m1", "/models/x", endpoint=ep, served_model_name="mock")]}) == []
    # one host, two models on one endpoint: refused too
    assert len(w.endpoint_model_errors({"a": [model_worker("a0", "A"), model_worker("a1", "B")]})) == 1


def test_distinct_endpoints_namespaces_and_prefill_are_distinct():
    assert w.endpoint_model_errors({
        "a": [model_worker("w0", "A"), model_worker("w1", "B", endpoint="dyn://dynamo.other.generate")],
        # another namespace: the host's dynamo_worker_namespace, its dynamo_worker_env, the worker's own env or --namespace
        "b": [model_worker("w2", "C")], "c": [model_worker("w3", "D")],
        "d": [model_worker("w4", "E", env={"DYN_NAMESPACE": "e"}), model_worker("w5", "F", extra_args=["--namespace", "f"])],
        # a prefill worker registers on the prefill component
        "e": [model_worker("w6", "G", extra_args=["--disaggregation-mode", "prefill"])],
    }, namespaces={"b": "nb"}, host_envs={"c": {"DYN_NAMESPACE": "nc"}}) == []
    assert w.worker_endpoint(model_worker("w", extra_args=["--disaggregation-mode", "prefill"]), "ns") == (
        "dyn://ns.prefill.generate", True)


def test_arg_value():
    assert w.arg_value(["--block-size", "64", "--x"], "--block-size") == "64"
    assert w.arg_value(["--block-size=32", "--block-size", "16"], "--block-size") == "16"
    assert w.arg_value(["--block-size"], "--block-size") is None
    assert w.arg_value("--block-size 64", "--block-size") is None


def test_block_size():
    assert w.block_size({"extra_args": ["--enforce-eager", "--block-size", "128"]}) == 128
    assert w.block_size({"extra_args": ["--block-size=32"]}) == 32
    assert w.block_size({}) == 16
    for bad in ("0", "big", "-16"):
        try:
            w.block_size({"extra_args": ["--block-size", bad]})
        except ValueError as exc:
            assert "--block-size must be a positive integer" in str(exc)
        else:
            raise AssertionError(bad)


def test_one_name_from_two_model_sources_on_one_endpoint_is_refused():
    """Dynamo 1.6.1's frontend rejects a worker whose model card checksum differs from the first
    of its worker set, and the card's checksum covers the model's source: seen in the sandbox with
    the same files at two paths ("Rejected incompatible workers")."""
    ep = "dyn://ns.mocker.generate"
    errs = w.endpoint_model_errors({
        "a": [model_worker("m0", "/models/x", endpoint=ep, served_model_name="mock")],
        "b": [model_worker("m1", "/copy/x", endpoint=ep, served_model_name="mock"),
              model_worker("m2", "org/x", endpoint=ep, served_model_name="mock")]})
    assert len(errs) == 2
    assert errs[0].startswith("dynamo_workers[m1].model on b: loads '/copy/x' for 'mock' on endpoint dyn://ns.mocker.generate, "
                              "where dynamo_workers[m0].model on a loads '/models/x': Dynamo checksums the model card")
    assert errs[1].startswith("dynamo_workers[m2].model on b: loads 'org/x'")
    # the default endpoint too, where the name is the model itself: no served_model_name, one model
    assert w.endpoint_model_errors({"a": [model_worker("w0", "Qwen/A")], "b": [model_worker("w1", "Qwen/A")]}) == []
