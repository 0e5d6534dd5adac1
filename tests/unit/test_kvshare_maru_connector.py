# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""roles/dynamo_runtime/files/kvshare_maru_connector.py against vLLM 0.31's real CPU KV cache.

vLLM's own kernel (``cpu_attn_reshape_and_cache``, what the CPU attention backend calls for every
forward) writes known keys and values into a cache of the shape that backend declares
([blocks, kv_heads, block_size, 2 * head_size], layout LBHNC). The connector's extract must return
exactly those slots, and its inject must put them back where vLLM's kernel reads them, for whole
blocks (what Maru moves; see _slots); upstream
Maru's helper at the pinned commit (old [2, pages, page_size, ...] layout) must fail on the same
cache with the "out of bounds" error seen in the sandbox.

Needs torch, vLLM (CPU build) and Maru: skipped in the controller venv, run for real inside a
sandbox host's Dynamo venv by the molecule verifier (tests/lib and test_3_sharing.py), where it
is also a plain script: ``python test_kvshare_maru_connector.py`` runs every test and exits 1 on
a failure.
"""
import contextlib
import importlib.util
import os
import re
import sys

try:
    import pytest
except ImportError:  # a host's Dynamo venv has no pytest: the script mode below needs none
    pytest = None

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "..", "..", "roles", "dynamo_runtime", "files", "kvshare_maru_connector.py")
NEEDED = ("torch", "vllm", "maru_vllm")
MISSING = [m for m in NEEDED if importlib.util.find_spec(m) is None]
if pytest is not None:
    pytestmark = pytest.mark.skipif(bool(MISSING), reason="needs %s (a Dynamo venv with vLLM and Maru)" % MISSING)


@contextlib.contextmanager
def raises(types, match):
    try:
        yield
    except types as exc:
        assert re.search(match, str(exc)), "%r does not match %r" % (str(exc), match)
        return
    raise AssertionError("nothing raised %s" % (types,))


NUM_BLOCKS, KV_HEADS, BLOCK, HEAD = 8, 2, 32, 32


def _connector():
    if os.path.exists(MODULE):
        spec = importlib.util.spec_from_file_location("kvshare_maru_connector", MODULE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    import kvshare_maru_connector  # installed into the venv by the dynamo_runtime role
    return kvshare_maru_connector


def _vllm_cache(slots, dtype=None):
    """A CPU KV cache written by vLLM's kernel at ``slots``; returns (cache, keys, values)."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends import cpu_attn
    from vllm.v1.attention.backends.utils import KVCacheLayout

    assert KVCacheLayout.LBHNC in cpu_attn.CPUAttentionBackend.supported_kv_cache_layouts()
    dtype = dtype or torch.float32
    cache = torch.zeros(NUM_BLOCKS, KV_HEADS, BLOCK, 2 * HEAD, dtype=dtype)
    n = slots.shape[0]
    gen = torch.Generator().manual_seed(7)
    keys = torch.randn(n, KV_HEADS, HEAD, generator=gen).to(dtype)
    values = torch.randn(n, KV_HEADS, HEAD, generator=gen).to(dtype)
    # The backend's own view (cpu_attn.py forward): [B, H, 2N, C/2] split into key and value halves.
    key_cache, value_cache = cache.view(NUM_BLOCKS, KV_HEADS, BLOCK * 2, -1).chunk(2, dim=2)
    isa = cpu_attn._get_attn_isa(dtype, BLOCK, HEAD)
    ops.cpu_attn_reshape_and_cache(keys, values, key_cache, value_cache, slots, isa)
    return cache, keys, values


def _slots():
    import torch
    # Whole blocks, out of order, the last block of the cache included: Maru moves chunks of
    # maru_kv_chunk_tokens, which the connector rounds to a multiple of the block size. Whole
    # blocks matter on CPU: vLLM's vec/amx kernels pack a block's keys internally (one token's key
    # is spread over the block's rows), so only a whole block is a self-contained unit.
    blocks = [3, 1, NUM_BLOCKS - 1]
    return torch.tensor([b * BLOCK + i for b in blocks for i in range(BLOCK)], dtype=torch.int64)


def test_extract_then_inject_round_trips_what_vllm_wrote():
    import torch
    mod = _connector()
    slots = _slots()
    cache, keys, values = _vllm_cache(slots)
    rows = mod.extract_bhnc(cache, slots, BLOCK)
    assert tuple(rows.shape) == (slots.shape[0], KV_HEADS, 2 * HEAD)
    fresh = torch.zeros_like(cache)
    mod.inject_bhnc(fresh, rows.clone(), slots, BLOCK)
    assert torch.equal(fresh, cache), "inject(extract(x)) must rebuild vLLM's cache at those slots"
    # And vLLM's own reader view sees the original keys and values in the rebuilt cache.
    key_cache, value_cache = fresh.view(NUM_BLOCKS, KV_HEADS, BLOCK * 2, -1).chunk(2, dim=2)
    assert key_cache.abs().sum() > 0 and value_cache.abs().sum() > 0
    untouched = torch.ones(NUM_BLOCKS * BLOCK, dtype=torch.bool)
    untouched[slots] = False
    flat = fresh.permute(0, 2, 1, 3).reshape(NUM_BLOCKS * BLOCK, -1)
    assert flat[untouched].abs().sum() == 0, "inject wrote outside the given slots"


def test_bf16_cache_round_trips():
    import torch
    mod = _connector()
    slots = _slots()
    cache, dummy, dummy = _vllm_cache(slots, torch.bfloat16)
    fresh = torch.zeros_like(cache)
    mod.inject_bhnc(fresh, mod.extract_bhnc(cache, slots, BLOCK), slots, BLOCK)
    assert torch.equal(fresh, cache)


def test_upstream_helper_fails_on_this_layout():
    """The bug the subclass fixes (maru_vllm @ 4fd29ce treats a CPU cache as [2, pages, page, ...])."""
    import torch
    from maru_vllm.connector import MaruWorkerConnector

    slots = _slots()
    cache, dummy, dummy = _vllm_cache(slots)
    upstream = MaruWorkerConnector.__new__(MaruWorkerConnector)
    upstream._block_size = BLOCK
    with raises((IndexError, RuntimeError), "out of bounds"):
        upstream._extract_kv_from_layer(cache, slots, None)


def test_connector_class_is_upstreams_with_the_fixed_worker():
    mod = _connector()
    from maru_vllm.connector import MaruKVConnector as Upstream
    assert issubclass(mod.MaruKVConnector, Upstream)


def test_non_4d_view_is_refused():
    import torch
    mod = _connector()
    with raises(ValueError, "blocks, kv_heads, block_size, C"):
        mod.extract_bhnc(torch.zeros(2, 8, 4), torch.tensor([1]), 4)


if __name__ == "__main__":
    if MISSING:
        print("missing %s" % MISSING)
        sys.exit(2)
    failed = 0
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    for name, func in tests:
        try:
            func()
            print("PASSED %s" % name)
        except Exception as exc:  # report every test, then the total
            failed += 1
            print("FAILED %s: %r" % (name, exc))
    print("%d passed, %d failed" % (len(tests) - failed, failed))
    sys.exit(1 if failed else 0)
