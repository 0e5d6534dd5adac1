# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The pool role and its workers name one maru-server URL (plugins/filter/kv_pools.py)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kvshare.dynamo.plugins.filter.internal.kv_pools import maru_server_url
from ansible_collections.kvshare.dynamo.plugins.filter.kv_pools import kv_pool_workers
from lib.sandbox import service_defaults


def test_the_pool_url_is_the_one_its_workers_get():
    pool = {"kvshare_bind_address": "10.0.0.2", "maru_pool_bind_address": "10.0.0.2", "maru_pool_server_port": 5600}
    worker = {"name": "w0", "engine": "vllm", "model": "m", "gpus": ["0"], "system_port": 1, "kv_pool": "maru"}
    hostvars = {"pool": pool, "node": {"dynamo_workers": [worker]}}
    groups = {"maru_pool": ["pool"], "dynamo_workers": ["node"]}
    got = kv_pool_workers([worker], "node", hostvars, groups, service_defaults())[0]
    url = got["kv_transfer_config"]["kv_connector_extra_config"]["maru_server_url"]
    assert url == maru_server_url(pool) == "tcp://10.0.0.2:5600"


def test_a_port_as_text_and_a_missing_port():
    assert maru_server_url({"maru_pool_bind_address": "127.0.0.1", "maru_pool_server_port": "5555"}) == "tcp://127.0.0.1:5555"
    with pytest.raises(AnsibleFilterError, match="maru_pool_server_port"):
        maru_server_url({"maru_pool_bind_address": "127.0.0.1"})
