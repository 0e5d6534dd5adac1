# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""kvshare_maru_connector against the KV views vLLM 0.31 hands to connectors, without torch.

tests/fixtures/vllm_kv_views/vllm031.json holds the per-layer views (shape, stride, storage offset,
dtype) that vLLM 0.31's own create_kv_cache_views builds for each backend Hopper can select, the
layouts the backends resolve to and Hopper's backend order, recorded by tools/record_vllm_kv_views.py
in a venv with vLLM 0.31 (CPU build). Here (CI's venv, no torch): every recorded view passes the
module's registration check, the index arithmetic of extract/inject addresses each token's own
bytes in those strides, and views the module cannot index stop the worker at registration with a
message naming the layer, shape, backend and what is supported. The same fixture drives the CUDA
round trip (tests/gpu/maru_connector_cuda_layouts.py); the CPU round trip with vLLM's own kernel is
tests/unit/test_kvshare_maru_connector.py.
"""
import importlib.util
import json
import os
import sys
import types

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "..", "..", "roles", "dynamo_runtime", "files", "kvshare_maru_connector.py")
FIXTURE = os.path.join(HERE, "..", "fixtures", "vllm_kv_views", "vllm031.json")
DATA = json.load(open(FIXTURE))
CASES = {c["id"]: c for c in DATA["cases"]}


def _module():
    spec = importlib.util.spec_from_file_location("kvshare_maru_connector_under_test", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fixture_is_vllm_031_and_hopper_order_is_what_the_docs_say():
    assert DATA["vllm"].startswith("0.31.0"), DATA["vllm"]
    prio = DATA["hopper_backend_priorities"]
    assert prio["standard"][:3] == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"], prio
    assert prio["mla"][:4] == ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA"], prio
    # FlashAttention declares no layout: the default preference's first, LBNHC (NHD), is resolved
    assert CASES["flash_attn"]["layout"] == "LBNHC" and CASES["flash_attn"]["layout_from"] == "resolved"
    assert CASES["flash_attn"]["backend_facts"]["supported_kv_cache_layouts"] is None


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_every_recorded_view_is_accepted_at_registration(case_id):
    mod = _module()
    case = CASES[case_id]
    for i, view in enumerate(case["registered"]):
        assert len(view["shape"]) == 4, view  # vLLM 0.31: always [B, H, N, C]
        mod.check_kv_view("model.layers.%d.attn" % i, view["shape"], view["stride"], view["dtype"],
                          case["block_size"], case["backend"], case["spec"])


def _offsets(view, slots, block_size, latent):
    """Element offsets extract_bhnc reads for the slots, by the module's own index arithmetic
    (slot // N, slot % N over the view's strides), one tuple of offsets per slot."""
    shape, stride, base = view["shape"], view["stride"], view["storage_offset"]
    n = shape[1] if latent else shape[2]
    assert block_size % n == 0
    rows = []
    for s in slots:
        b, o = s // n, s % n
        assert b < shape[0]
        if latent:
            rows.append(tuple(base + b * stride[0] + o * stride[1] + c * stride[2] for c in range(shape[2])))
        else:
            rows.append(tuple(base + b * stride[0] + h * stride[1] + o * stride[2] + c * stride[3]
                              for h in range(shape[1]) for c in range(shape[3])))
    return rows


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_extract_addresses_each_tokens_own_bytes(case_id):
    """Every slot of every layer maps to its own elements inside the buffer, and for MLA the
    layer's own [B, N, C] view reads the same elements as the registered [B, 1, N, C] one."""
    case = CASES[case_id]
    bs, nb = case["block_size"], case["num_blocks"]
    slots = [b * bs + i for b in (nb - 1, 0, 2) for i in range(bs)]
    seen = set()
    for reg, fwd in zip(case["registered"], case["forward"]):
        rows = _offsets(reg, slots, bs, False)
        flat = [x for r in rows for x in r]
        el_size = {"bfloat16": 2, "float16": 2, "float32": 4, "uint8": 1, "int8": 1}[reg["dtype"]]
        assert min(flat) >= 0 and (max(flat) + 1) * el_size <= case["buffer_bytes"]
        assert len(set(flat)) == len(flat), "two slots share bytes"
        assert not seen & set(flat), "two layers share bytes"
        seen |= set(flat)
        if case["mla"]:
            assert len(fwd["shape"]) == 3 and _offsets(fwd, slots, bs, True) == rows
        else:
            assert fwd == reg


def test_kernel_block_split_indexes_like_vllms_block_table():
    """Scheduler block b of size S split into r kernel blocks of N: vLLM's map_to_kernel_blocks
    gives kernel blocks b*r .. b*r+r-1; slot // N lands there (upstream's slot // S would not)."""
    case = CASES["flash_attn_kernel_split"]
    s, n = case["block_size"], case["registered"][0]["shape"][2]
    r = s // n
    assert r == 2 and case["registered"][0]["shape"][0] == case["num_blocks"] * r
    for b in range(case["num_blocks"]):
        for i in range(s):
            slot = b * s + i
            assert slot // n == b * r + i // n and slot % n == i % n


def _message(excinfo):
    return str(excinfo.value)


@pytest.mark.parametrize("shape,stride,block_size,why", [
    ((2, 6, 16, 2, 64), (12288, 2048, 128, 64, 1), 16, "a 5-D view"),    # FlashAttention before 0.31
    ((6, 16, 576), (9216, 576, 1), 16, "a 3-D view"),                      # MLA before 0.31 as registered
    ((6, 2, 64, 128), (16384, 8192, 128, 1), 16, "block_size dim 64 does not divide"),
    ((6, 2, 24, 128), (6144, 3072, 128, 1), 16, "block_size dim 24 does not divide"),
])
def test_a_view_it_cannot_index_stops_registration(shape, stride, block_size, why):
    mod = _module()
    with pytest.raises(mod.KVLayoutError) as excinfo:
        mod.check_kv_view("model.layers.3.self_attn.attn", shape, stride, "bfloat16", block_size, "FLASH_ATTN")
    msg = _message(excinfo)
    for part in ("model.layers.3.self_attn.attn", "FLASH_ATTN", str(tuple(shape)), str(tuple(stride)),
                 why, "Supported: a 4-D per-layer view [blocks, kv_heads, block_size, C]", "Maru save error"):
        assert part in msg, (part, msg)


@pytest.mark.parametrize("kwargs,why", [
    ({"spec": "MambaSpec"}, "KV cache spec MambaSpec"),
    ({"spec": "SlidingWindowSpec"}, "KV cache spec SlidingWindowSpec"),
    ({"spec": "MLAAttentionSpec", "tokens_per_state": 4}, "4 tokens per stored row"),
    ({"spec": "FullAttentionSpec", "group": 1, "groups": 2}, "KV cache group 1 of 2"),
])
def test_layers_that_are_not_one_token_per_row_of_group_0_are_refused(kwargs, why):
    mod = _module()
    with pytest.raises(mod.KVLayoutError, match=why):
        mod.check_kv_view("model.layers.0.attn", (6, 1, 16, 576), (9216, 9216, 576, 1), "bfloat16", 16,
                          "FLASHMLA", **kwargs)


class _FakeTensor:
    """Enough of a tensor for the registration check (shape, stride(), dtype)."""

    def __init__(self, shape, stride, dtype="torch.bfloat16"):
        self.shape, self._stride, self.dtype = tuple(shape), tuple(stride), dtype

    def stride(self):
        return self._stride

    def dim(self):
        return len(self.shape)


def _fake_upstream(monkeypatch):
    """maru_vllm.connector stand-in: the module subclasses whatever upstream provides; these record."""
    class MaruWorkerConnector:
        def __init__(self):
            self._block_size = 16
            self.registered = None

        def register_kv_caches(self, kv_caches):
            self.registered = kv_caches

    class MaruKVConnector:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._worker = MaruWorkerConnector()

        def register_kv_caches(self, kv_caches):
            self._worker.register_kv_caches(kv_caches)

    pkg = types.ModuleType("maru_vllm")
    conn = types.ModuleType("maru_vllm.connector")
    conn.MaruWorkerConnector, conn.MaruKVConnector = MaruWorkerConnector, MaruKVConnector
    pkg.connector = conn
    monkeypatch.setitem(sys.modules, "maru_vllm", pkg)
    monkeypatch.setitem(sys.modules, "maru_vllm.connector", conn)


def _vllm_config(backend):
    layer = types.SimpleNamespace(get_attn_backend=lambda: types.SimpleNamespace(get_name=lambda: backend))
    return types.SimpleNamespace(compilation_config=types.SimpleNamespace(
        static_forward_context={"model.layers.0.self_attn.attn": layer}))


def _kv_cache_config(spec_name, names, groups=1):
    spec_cls = type(spec_name, (), {"tokens_per_state": 1})
    return types.SimpleNamespace(kv_cache_groups=[
        types.SimpleNamespace(kv_cache_spec=spec_cls(), layer_names=names if g == 0 else ["other.%d" % g])
        for g in range(groups)])


def _flash_attn_connector(monkeypatch, groups=1):
    """(module, FlashAttention's recorded view, its one-layer kv_caches, a connector with ``groups``
    KV cache groups)."""
    _fake_upstream(monkeypatch)
    mod = _module()
    view = CASES["flash_attn"]["registered"][0]
    kv = {"model.layers.0.self_attn.attn": _FakeTensor(view["shape"], view["stride"])}
    connector = mod.MaruKVConnector(_vllm_config("FLASH_ATTN"), "worker",
                                    _kv_cache_config("FullAttentionSpec", list(kv), groups=groups))
    return mod, view, kv, connector


def test_register_kv_caches_accepts_flash_attention_and_passes_them_on(monkeypatch):
    dummy, view, kv, connector = _flash_attn_connector(monkeypatch)
    connector.register_kv_caches(kv)
    assert connector._worker.registered is kv
    assert connector._worker._kvshare_shapes == {"model.layers.0.self_attn.attn": tuple(view["shape"])}


def test_register_kv_caches_stops_the_worker_on_the_old_layout(monkeypatch):
    """What vLLM before 0.31 (or a backend with its own view) would hand over: the worker stops at
    registration instead of logging 'Maru save error' for every store."""
    _fake_upstream(monkeypatch)
    mod = _module()
    kv = {"model.layers.0.self_attn.attn": _FakeTensor((2, 6, 16, 8, 128), (98304, 16384, 1024, 128, 1))}
    connector = mod.MaruKVConnector(_vllm_config("FLASH_ATTN"), "worker",
                                    _kv_cache_config("FullAttentionSpec", list(kv)))
    with pytest.raises(mod.KVLayoutError) as excinfo:
        connector.register_kv_caches(kv)
    msg = _message(excinfo)
    assert "layer model.layers.0.self_attn.attn (attention backend FLASH_ATTN)" in msg, msg
    assert "(2, 6, 16, 8, 128)" in msg and "Supported:" in msg, msg
    assert connector._worker.registered is None


def test_register_kv_caches_refuses_a_second_kv_cache_group(monkeypatch):
    mod, dummy, kv, connector = _flash_attn_connector(monkeypatch, groups=2)
    with pytest.raises(mod.KVLayoutError, match="KV cache group 0 of 2"):
        connector.register_kv_caches(kv)


def test_latent_rows_only_for_layers_registered_with_one_head(monkeypatch):
    _fake_upstream(monkeypatch)
    mod = _module()
    mla = CASES["flash_attn_mla"]
    kv = {"model.layers.0.self_attn.attn": _FakeTensor(mla["registered"][0]["shape"], mla["registered"][0]["stride"])}
    connector = mod.MaruKVConnector(_vllm_config("FLASH_ATTN_MLA"), "worker",
                                    _kv_cache_config("MLAAttentionSpec", list(kv)))
    connector._worker._block_size = mla["block_size"]
    connector.register_kv_caches(kv)
    worker = connector._worker
    squeezed = _FakeTensor(mla["forward"][0]["shape"], mla["forward"][0]["stride"])
    assert worker._latent(squeezed, "model.layers.0.self_attn.attn")
    assert not worker._latent(squeezed, "model.layers.9.self_attn.attn")
    assert not worker._latent(kv["model.layers.0.self_attn.attn"], "model.layers.0.self_attn.attn")
