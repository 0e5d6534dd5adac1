# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/module_utils/maru.py (sizes, chunk check, connector configs)."""
import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import maru as m

GIB = 1024 ** 3
MIB = 1024 ** 2

# Llama-3-8B: 32 layers, 8 kv heads, head_dim 128, bf16.
LLAMA3_8B = {"num_kv_heads": 8, "head_dim": 128, "dtype": "bfloat16"}


@pytest.mark.parametrize("value,expected", [
    ("4G", 4 * GIB), ("500M", 500 * MIB), ("1.5G", int(1.5 * GIB)), ("4GB", 4 * GIB),
    ("4g", 4 * GIB), ("64K", 64 * 1024), ("1T", 1024 ** 4), ("123", 123), (4096, 4096),
    (" 4M ", 4 * MIB), ("0", 0),
])
def test_parse_size_matches_upstream_rules(value, expected):
    assert m.parse_size(value) == expected


@pytest.mark.parametrize("value", ["four", "4X", "G", "-1", True, -5, "4 GiB"])
def test_parse_size_rejects(value):
    with pytest.raises(m.MaruConfigError) as err:
        m.parse_size(value, "maru_pool_pool_size")
    assert "maru_pool_pool_size" in str(err.value)


@pytest.mark.parametrize("num,text", [(4 * GIB, "4G"), (500 * MIB, "500M"), (1536 * MIB, "1536M"), (1000, "1000"),
                                      (1024 ** 4, "1T"), (3 * 1024, "3K")])
def test_format_size_round_trips(num, text):
    assert m.format_size(num) == text
    assert m.parse_size(text) == num


@pytest.mark.parametrize("tokens,block,expected", [(256, 16, 256), (250, 16, 240), (8, 16, 16), (256, 128, 256),
                                                   (300, 128, 256)])
def test_effective_kv_chunk_tokens_aligns_down(tokens, block, expected):
    assert m.effective_kv_chunk_tokens(tokens, block) == expected


def test_per_layer_chunk_llama3_8b_is_1mib():
    assert m.per_layer_chunk_bytes(LLAMA3_8B, 256) == 2 * 8 * 128 * 2 * 256 == MIB


def test_per_layer_chunk_tensor_parallel_and_fp8():
    model = dict(LLAMA3_8B, tensor_parallel_size=2, dtype="fp8")
    assert m.per_layer_chunk_bytes(model, 256) == 2 * 4 * 128 * 1 * 256
    # tp larger than kv heads: heads are replicated, at least one per rank
    model = dict(LLAMA3_8B, tensor_parallel_size=16)
    assert m.per_layer_chunk_bytes(model, 256) == 2 * 1 * 128 * 2 * 256


def test_per_layer_chunk_mla_has_no_factor_two():
    model = {"mla_latent_dim": 576, "dtype": "bfloat16"}
    assert m.per_layer_chunk_bytes(model, 256) == 256 * 576 * 2


def test_per_layer_chunk_uses_aligned_tokens_and_dtype_bytes():
    model = {"num_kv_heads": 8, "head_dim": 128, "dtype_bytes": 2, "block_size": 128}
    assert m.per_layer_chunk_bytes(model, 300) == 2 * 8 * 128 * 2 * 256


def test_unknown_dtype_is_named():
    with pytest.raises(m.MaruConfigError, match="dtype"):
        m.per_layer_chunk_bytes({"num_kv_heads": 8, "head_dim": 128, "dtype": "int3"})


def test_check_chunk_size_ok_with_defaults():
    assert m.check_chunk_size("4M", "1G", LLAMA3_8B, 256) == []
    assert m.check_chunk_size("4M", "1G", None) == []


def test_check_chunk_size_too_small_names_variable_and_fix():
    errors = m.check_chunk_size("512K", "1G", LLAMA3_8B, 256)
    assert len(errors) == 1
    assert "maru_pool_chunk_size" in errors[0]
    assert "1048576 bytes" in errors[0]
    assert "set maru_pool_chunk_size >= 1M" in errors[0]


def test_check_chunk_size_pool_smaller_than_chunk():
    errors = m.check_chunk_size("8M", "4M")
    assert errors and "maru_pool_pool_size" in errors[0]


def test_worker_extra_config_keys_are_upstreams():
    extra = m.worker_extra_config("tcp://127.0.30.1:5555", "h1-w0", pool_size=4 * GIB, chunk_size="4M")
    assert extra == {
        "maru_server_url": "tcp://127.0.30.1:5555",
        "maru_pool_size": "4G",
        "maru_chunk_size": "4M",
        "maru_kv_chunk_tokens": 256,
        "maru_instance_id": "h1-w0",
    }


def test_kv_transfer_config_shape():
    extra = m.worker_extra_config("tcp://127.0.0.1:5555", "w0")
    cfg = m.kv_transfer_config(extra)
    assert cfg["kv_connector"] == "MaruKVConnector"
    assert cfg["kv_connector_module_path"] == "maru_vllm"
    assert m.kv_transfer_config(extra, module_path="kvshare_maru_connector")["kv_connector_module_path"] == \
        "kvshare_maru_connector"
    assert cfg["kv_role"] == "kv_both"
    assert cfg["kv_connector_extra_config"] == extra


def test_lmcache_config():
    cfg = m.lmcache_config("127.0.30.1", 5555, "4", instance_id="w0")
    assert cfg["maru_path"] == "maru://127.0.30.1:5555"
    assert cfg["maru_pool_size"] == 4.0
    assert cfg["local_cpu"] is False
    assert cfg["chunk_size"] == 256
    assert cfg["extra_config"]["maru_instance_id"] == "w0"
    with pytest.raises(m.MaruConfigError, match="GB"):
        m.lmcache_config("h", 1, "4G")
