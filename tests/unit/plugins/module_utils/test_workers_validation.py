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
    assert errs == ["worker 'w1' on b: kv_transfer_config maru_instance_id 'x' is already used by worker 'w0' on a"]


def test_maru_server_url_must_be_served_by_a_pool_host():
    assert w.cluster_worker_errors({"a": [maru("w0", "x")]}, ["tcp://10.0.0.2:5555"]) == []
    errs = w.cluster_worker_errors({"a": [maru("w0", "x", "tcp://10.0.0.9:5555")]}, [])
    assert errs == ["worker 'w0' on a: kv_transfer_config maru_server_url tcp://10.0.0.9:5555 is served by no host "
                    "of group maru_pool (pool servers: none)"]
    assert w.cluster_worker_errors({"a": [maru("w0", "x", "tcp://10.0.0.9:5555")]}, None) == []  # no URL check


def test_malformed_entries_left_to_worker_errors():
    assert w.cluster_worker_errors({"a": "oops", "b": ["x", {"name": "m", "engine": "mocker"},
                                                        {"name": "j", "kv_transfer_config": "{bad"}]}) == []
