# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.day2: rolling-restart steps, file_sd targets, hit rate, status table."""
import os

import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import day2
from lib.sandbox import service_defaults

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dynamo")


def _w(name, gpus, port=1):
    return {"name": name, "engine": "mocker", "model": "/m", "gpus": gpus, "system_port": 18080 + port,
            "rpc_port": 19080 + port}


WORKERS = [_w("a", ["0"], 1), _w("b", ["0"], 2), _w("c", ["1"], 3), _w("d", ["1", "2"], 4), _w("e", [], 5)]


def test_restart_one_worker_at_a_time():
    steps = day2.restart_groups(WORKERS, "worker")
    assert [s["names"] for s in steps] == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert all(s["waves"] == [s["names"]] and not s["stop_first"] for s in steps)


def test_restart_by_gpu_group_stops_together_starts_one_by_one():
    steps = day2.restart_groups(WORKERS, "gpu")
    assert [s["names"] for s in steps] == [["a", "b"], ["c", "d"], ["e"]]
    assert steps[0]["waves"] == [["a"], ["b"]] and steps[0]["stop_first"] and steps[0]["gpus"] == ["0"]
    assert steps[1]["gpus"] == ["1", "2"]
    assert steps[2] == {"names": ["e"], "waves": [["e"]], "stop_first": False, "gpus": []}


def test_restart_selected_names_and_errors():
    assert [s["names"] for s in day2.restart_groups(WORKERS, "worker", ["c", "a"])] == [["a"], ["c"]]
    assert day2.restart_groups(WORKERS, "worker", []) == []
    with pytest.raises(ValueError, match="unknown workers: zz"):
        day2.restart_groups(WORKERS, "worker", ["zz"])
    with pytest.raises(ValueError, match="restart unit"):
        day2.restart_groups(WORKERS, "host")


def test_prometheus_targets_labels():
    # The ports come from the stack contract the playbook passes (kvshare_service_defaults).
    SERVICE_DEFAULTS = service_defaults()
    hostvars = {
        "fe": {"kvshare_bind_address": "10.0.0.1"},
        "g1": {"kvshare_bind_address": "10.0.0.2", "dynamo_workers": [
            {"name": "w0", "engine": "vllm", "model": "/m", "served_model_name": "tiny", "gpus": ["0"], "system_port": 18081,
             "kv_transfer_config": {"kv_connector": "MaruKVConnector",
                                    "kv_connector_extra_config": {"maru_server_url": "tcp://10.0.0.2:5555"}}},
            {"name": "m0", "engine": "mocker", "model": "/m", "gpus": [], "system_port": 18082}]},
    }
    groups = {"dynamo_frontend": ["fe"], "dynamo_workers": ["g1"], "etcd": ["fe", "g1"], "maru_pool": ["g1"]}
    out = day2.prometheus_targets(hostvars, groups, SERVICE_DEFAULTS)
    assert out["dynamo-frontend"] == [{"targets": ["10.0.0.1:8000"], "labels": {
        "host": "fe", "worker": "", "gpu": "", "pool": "", "cluster": "kvshare", "kvshare_job": "dynamo-frontend"}}]
    w0, m0 = out["dynamo-worker"]
    assert w0["targets"] == ["10.0.0.2:18081"]
    assert w0["labels"]["worker"] == "w0" and w0["labels"]["gpu"] == "0" and w0["labels"]["model"] == "tiny"
    assert w0["labels"]["pool"] == "maru:tcp://10.0.0.2:5555"
    assert m0["labels"]["pool"] == "" and m0["labels"]["engine"] == "mocker"
    assert [g["targets"][0] for g in out["etcd"]] == ["10.0.0.1:2379", "10.0.0.2:2379"]
    assert out["maru"] == []
    assert day2.prometheus_targets(hostvars, groups, SERVICE_DEFAULTS, maru_metrics_port=9100)["maru"][0]["targets"] == ["10.0.0.2:9100"]
    # a worker that names its pool is labelled with the pool it resolves to
    hostvars["g1"]["maru_pool_bind_address"] = "10.0.0.2"
    hostvars["g1"]["dynamo_workers"][0] = dict(hostvars["g1"]["dynamo_workers"][0], kv_pool="maru")
    del hostvars["g1"]["dynamo_workers"][0]["kv_transfer_config"]
    assert day2.prometheus_targets(hostvars, groups, SERVICE_DEFAULTS)["dynamo-worker"][0]["labels"]["pool"] == "maru:tcp://10.0.0.2:5555"
    # a host's own port wins over the contract's
    hostvars["fe"]["dynamo_frontend_http_port"] = 8080
    other = dict(SERVICE_DEFAULTS, etcd_client_port=12379)
    out = day2.prometheus_targets(hostvars, groups, other)
    assert out["dynamo-frontend"][0]["targets"] == ["10.0.0.1:8080"]
    assert [g["targets"][0] for g in out["etcd"]] == ["10.0.0.1:12379", "10.0.0.2:12379"]


def test_hit_rate_from_real_vllm_metrics_and_mocker():
    with open(os.path.join(FIX, "kv_vllm", "metrics_b_2.txt")) as fh:
        got = day2.hit_rate(fh.read())
    assert got["queries"] == 3653.0 and got["hits"] == 2816.0
    assert got["hit_rate"] == pytest.approx(2816.0 / 3653.0)
    with open(os.path.join(FIX, "mocker_worker_metrics_full.txt")) as fh:
        assert day2.hit_rate(fh.read()) == {"queries": None, "hits": None, "hit_rate": None}
    assert day2.hit_rate("") == {"queries": None, "hits": None, "hit_rate": None}


HOSTS = [
    {"host": "sb1", "units": [{"unit": "etcd.service", "state": "active"},
                              {"unit": "dynamo-frontend.service", "state": "active"}], "workers": []},
    {"host": "sb2", "units": [{"unit": "etcd.service", "state": "active"},
                              {"unit": "dynamo-worker@w0.service", "state": "active"},
                              {"unit": "dynamo-worker@w1.service", "state": "activating"}],
     "workers": [{"name": "w0", "gpu": "0", "instance_id": "3496660461086300990", "ready": True, "registered": True,
                  "queries": 3653.0, "hits": 2816.0, "hit_rate": 0.7709},
                 {"name": "w1", "gpu": "0", "instance_id": None, "ready": False, "registered": False,
                  "queries": None, "hits": None, "hit_rate": None}]},
]


def test_status_table_one_line_per_unit():
    lines = day2.status_table(HOSTS).split("\n")
    assert lines[0].split() == ["host", "unit", "state", "worker", "gpu", "instance", "id", "ready", "external", "hit", "rate"]
    assert len(lines) == 1 + 5
    w0 = [ln for ln in lines if "dynamo-worker@w0" in ln][0].split()
    assert w0 == ["sb2", "dynamo-worker@w0.service", "active", "w0", "0", "3496660461086300990", "ready", "0.771", "(2816/3653)"]
    w1 = [ln for ln in lines if "dynamo-worker@w1" in ln][0]
    assert "activating" in w1 and "NOT READY" in w1
    assert [ln.split()[1] for ln in lines[1:3]] == ["etcd.service", "dynamo-frontend.service"]


def test_status_summary():
    assert day2.status_summary(HOSTS) == {"units_total": 5, "units_active": 4, "workers_total": 2,
                                          "workers_ready": 1, "healthy": False}
