# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for model staging in plugins/module_utils/workers.py: which models a host's workers
load (each once, local or Hugging Face, offline or not) and the readiness timeout for their size."""
import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import workers as w

GIB = 1 << 30


def test_each_model_once_in_inventory_order_with_its_workers():
    stages = w.model_stages([{"name": "a", "engine": "vllm", "model": "org/m"},
                             {"name": "b", "engine": "mocker", "model": "/opt/models/tiny"},
                             {"name": "c", "engine": "vllm", "model": "org/m"}])
    assert stages == [
        {"model": "org/m", "local": False, "offline": False, "workers": ["a", "c"], "env": {}},
        {"model": "/opt/models/tiny", "local": True, "offline": False, "workers": ["b"], "env": {}},
    ]


@pytest.mark.parametrize("value,offline", [("1", True), ("true", True), ("ON", True), (1, True), ("0", False), ("", False)])
def test_offline_from_the_environment_the_workers_run_with(value, offline):
    stages = w.model_stages([{"name": "a", "engine": "vllm", "model": "org/m"}], {"HF_HUB_OFFLINE": value})
    assert stages[0]["offline"] is offline


def test_a_worker_env_wins_and_one_offline_worker_makes_the_model_offline():
    workers = [{"name": "a", "engine": "vllm", "model": "org/m", "env": {"HF_HUB_OFFLINE": "0"}},
               {"name": "b", "engine": "vllm", "model": "org/m"}]
    assert w.model_stages(workers[:1], {"HF_HUB_OFFLINE": "1"})[0]["offline"] is False
    assert w.model_stages(workers, {"HF_HUB_OFFLINE": "1"})[0]["offline"] is True


def test_cache_settings_follow_the_workers_and_split_a_model():
    engine_env = {"vllm": {"HF_HOME": "/srv/hf", "VLLM_NO_USAGE_STATS": "1"}}
    stages = w.model_stages([{"name": "a", "engine": "vllm", "model": "org/m"},
                             {"name": "b", "engine": "vllm", "model": "org/m", "env": {"HF_HUB_CACHE": "/data/hub", "HF_TOKEN": "x"}}],
                            {"HF_ENDPOINT": "http://127.0.0.1:9"}, engine_env)
    assert [(s["workers"], s["env"]) for s in stages] == [
        (["a"], {"HF_HOME": "/srv/hf", "HF_ENDPOINT": "http://127.0.0.1:9"}),
        (["b"], {"HF_HOME": "/srv/hf", "HF_HUB_CACHE": "/data/hub", "HF_ENDPOINT": "http://127.0.0.1:9"}),
    ]


def test_workers_without_a_model_and_malformed_entries_are_left_out():
    assert w.model_stages([{"name": "a"}, "junk", None]) == []
    assert w.model_stages(None) == []


@pytest.mark.parametrize("sizes,expected", [([], 300), ([0], 300), ([1], 310), ([GIB], 310), ([GIB + 1, 5], 320),
                                            ([int(14.5 * GIB), 2 * GIB], 450), ([None], 300)])
def test_ready_timeout_adds_the_allowance_per_started_gib_of_the_largest_model(sizes, expected):
    assert w.ready_timeout(300, sizes, 10) == expected


def test_ready_timeout_accepts_text_as_ansible_passes_it():
    assert w.ready_timeout("300", [str(3 * GIB)], "2.5") == 307
