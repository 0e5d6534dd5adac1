# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""site.yml's closing summary (plugins/filter/summary.py): from the inventory only."""
from ansible_collections.kvshare.dynamo.plugins.filter.internal.summary import stack_summary
from lib.sandbox import service_defaults

SERVICE_DEFAULTS = service_defaults()

GROUPS = {"dynamo_frontend": ["fe"], "dynamo_workers": ["w1", "w2"]}
HOSTVARS = {
    "fe": {"kvshare_bind_address": "127.0.10.1"},
    "w1": {"dynamo_workers": [
        {"name": "b", "engine": "vllm", "model": "m1", "gpus": ["1"], "system_port": 2,
         "kv_transfer_config": {"kv_connector": "MaruKVConnector",
                                "kv_connector_extra_config": {"maru_server_url": "tcp://127.0.0.1:5555"}}},
        {"name": "a", "engine": "vllm", "model": "m1", "gpus": ["0"], "system_port": 1}]},
    "w2": {"dynamo_workers": [{"name": "c", "engine": "mocker", "system_port": 3}]},
}


def test_summary_rows_frontend_and_next_steps():
    lines = stack_summary(GROUPS, HOSTVARS, SERVICE_DEFAULTS, "inventories/x")
    assert lines[1].startswith("frontend: http://127.0.10.1:8000")
    assert lines[2] == "workers: 3 on 2 host(s), models: m1, mocker"
    rows = [line.split() for line in lines if line.startswith(("w1 ", "w2 "))]
    assert [r[:4] for r in rows] == [["w1", "0", "a", "vllm"], ["w1", "1", "b", "vllm"], ["w2", "-", "c", "mocker"]]
    assert rows[1][-2:] == ["maru", "tcp://127.0.0.1:5555"]
    assert any("ansible-playbook -i inventories/x verify.yml" in line for line in lines)


def test_summary_without_frontend_or_workers():
    lines = stack_summary({}, {}, SERVICE_DEFAULTS)
    assert lines[1] == "frontend: none in this inventory" and lines[2].startswith("workers: 0 on 0 host(s)")


def test_summary_shows_the_pool_a_worker_names():
    hostvars = {"p1": {"maru_pool_bind_address": "10.0.0.1", "dynamo_workers": [
        {"name": "a", "engine": "vllm", "model": "m1", "gpus": ["0"], "system_port": 1, "kv_pool": "maru"}]}}
    lines = stack_summary({"dynamo_workers": ["p1"], "maru_pool": ["p1"]}, hostvars, SERVICE_DEFAULTS)
    assert [line.split()[-2:] for line in lines if line.startswith("p1 ")] == [["maru", "tcp://10.0.0.1:5555"]]
