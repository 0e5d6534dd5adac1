# GPU check (not collected by pytest): kvshare_maru_connector's extract/inject on CUDA tensors in vLLM 0.31's KV views.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Run on a CUDA host with torch (no vLLM, no Maru needed): ``python tests/gpu/maru_connector_cuda_layouts.py``.

For every case of tests/fixtures/vllm_kv_views/vllm031.json (shapes, strides and storage offsets
recorded from vLLM 0.31's own create_kv_cache_views by tools/record_vllm_kv_views.py) it builds the
layer views on the GPU exactly as allocate_kv_cache does (one flat int8 CUDA buffer, as_strided per
layer, viewed as the spec's dtype), writes known keys/values the way the backend's cache-write reads
them (non-MLA: ``kv.transpose(1, 2).split(head_size, -1)`` as FlashAttention/Triton do, at
``[slot // N, slot % N]``; MLA: rows of the layer's ``squeeze(1)`` view), and then:

- registers the views (the module's check_kv_caches, what register_kv_caches runs);
- extract(forward view) -> inject into a second, zeroed buffer of the same layout -> the second
  buffer equals the first byte for byte and nothing outside the slots was written;
- the same through the bytes Maru would store (extract -> contiguous -> uint8 on the host ->
  back to the GPU -> inject), the path upstream's save/load takes;
- the layer's other layers (same buffer) are untouched.

Stubbed: nothing of the module is; vLLM's cache-write kernel is replaced by the torch indexing above
unless vLLM's CUDA ops import (then reshape_and_cache_flash writes the FlashAttention cases too).
Prints one line per case and exits 1 on a failure.
"""
import importlib.util
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
MODULE = os.path.join(ROOT, "roles", "dynamo_runtime", "files", "kvshare_maru_connector.py")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "vllm_kv_views", "vllm031.json")


def load_module():
    spec = importlib.util.spec_from_file_location("kvshare_maru_connector", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(case, dev):
    """(flat buffer, registered views, forward views) like vLLM's allocate_kv_cache."""
    buf = torch.zeros(case["buffer_bytes"], dtype=torch.int8, device=dev)
    reg, fwd = [], []
    for r, f in zip(case["registered"], case["forward"]):
        dtype = getattr(torch, r["dtype"])
        el = torch.empty((), dtype=dtype).element_size()
        # as_strided on the int8 buffer in bytes, then viewed as dtype: what create_kv_cache_views does
        shape_b = list(r["shape"][:-1]) + [r["shape"][-1] * el]
        stride_b = [s * el for s in r["stride"][:-1]] + [1]
        v = torch.as_strided(buf, shape_b, stride_b, r["storage_offset"] * el).view(dtype)
        assert list(v.stride()) == r["stride"], (v.stride(), r["stride"])
        reg.append(v)
        fv = v.squeeze(1) if case["mla"] else v
        assert list(fv.shape) == f["shape"] and list(fv.stride()) == f["stride"], (fv.shape, fv.stride(), f)
        fwd.append(fv)
    return buf, reg, fwd


def slots_for(case, dev):
    # whole scheduler blocks, out of order, the last one included (what Maru moves)
    bs, nb = case["block_size"], case["num_blocks"]
    blocks = [3 % nb, 1, nb - 1]
    return torch.tensor([b * bs + i for b in blocks for i in range(bs)], dtype=torch.int64, device=dev)


def random_like(shape, dtype, gen, dev):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, device=dev).to(dtype)
    return torch.randint(1, 255, shape, generator=gen, device=dev, dtype=torch.int32).to(dtype)


def write(case, view, slots, gen, dev, ops):
    """Fill the view at the slots as the backend's cache write does; returns what was written."""
    n_tok = view.shape[-2] if case["mla"] else view.shape[2]
    b, o = slots // n_tok, slots % n_tok
    if case["mla"]:  # [B, N, C]: one latent row per token (kv_c | k_pe, or the fp8_ds_mla bytes)
        rows = random_like((slots.shape[0], view.shape[-1]), view.dtype, gen, dev)
        view[b, o] = rows
        return "torch indexing", rows
    d = case["head_size"]
    key_cache, value_cache = view.transpose(1, 2).split(d, dim=-1)  # (B, N, H, D) each: FA/Triton/FI split
    keys = random_like((slots.shape[0], view.shape[1], d), view.dtype, gen, dev)
    values = random_like((slots.shape[0], view.shape[1], d), view.dtype, gen, dev)
    if ops is not None and view.dtype in (torch.bfloat16, torch.float16):
        one = torch.ones((), dtype=torch.float32, device=dev)
        ops.reshape_and_cache_flash(keys, values, key_cache, value_cache, slots, "auto", one, one)
        how = "vLLM reshape_and_cache_flash"
    else:
        key_cache[b, o] = keys
        value_cache[b, o] = values
        how = "torch indexing"
    assert torch.equal(key_cache[b, o], keys) and torch.equal(value_cache[b, o], values)
    return how, (keys, values)


def vllm_ops():
    try:
        from vllm import _custom_ops as ops  # only where the CUDA vLLM wheel is installed
        return ops
    except Exception:
        return None


def run_case(mod, case, dev, ops):
    gen = torch.Generator(device=dev).manual_seed(11)
    buf, reg, fwd = build(case, dev)
    names = ["model.layers.%d.attn" % i for i in range(len(reg))]
    mod.check_kv_caches(dict(zip(names, reg)), case["block_size"])
    slots = slots_for(case, dev)
    how = None
    for v in fwd:
        how, dummy = write(case, v, slots, gen, dev, ops)
    before = buf.clone()
    # layer 0 round trip, GPU only
    out, dummy, ofwd = build(case, dev)
    rows = mod.extract_bhnc(fwd[0], slots, case["block_size"], mla=case["mla"])
    assert rows.device == slots.device and rows.shape[0] == slots.shape[0]
    mod.inject_bhnc(ofwd[0], rows.clone(), slots, case["block_size"], mla=case["mla"])
    assert torch.equal(ofwd[0], fwd[0]), "inject(extract(x)) != x"
    # through host bytes, as Maru stores them (contiguous -> bytes -> frombuffer(dtype) -> device)
    host = rows.detach().contiguous().view(torch.uint8).cpu()
    back = host.view(rows.dtype).to(dev)
    dummy, dummy, ofwd2 = build(case, dev)
    mod.inject_bhnc(ofwd2[-1], back, slots, case["block_size"], mla=case["mla"])
    assert torch.equal(ofwd2[-1], fwd[0]), "bytes round trip differs"
    # nothing else written: every non-zero byte of the second buffer lies in layer 0's rows at the slots
    probe = torch.zeros_like(buf)
    pv = build_like(probe, case, 0)
    pv[slots // pv.shape[2], :, slots % pv.shape[2]] = 1
    assert not ((out != 0) & (probe == 0)).any(), "wrote outside the slots"
    assert torch.equal(buf, before), "extract changed the cache"
    return "%s: %s view %s stride %s (%s) -> rows %s %s; cache write by %s" % (
        case["id"], case["backend"], tuple(fwd[0].shape), tuple(fwd[0].stride()), case["layout"],
        tuple(rows.shape), str(rows.dtype).replace("torch.", ""), how)


def build_like(buf, case, layer):
    r = case["registered"][layer]
    dtype = getattr(torch, r["dtype"])
    el = torch.empty((), dtype=dtype).element_size()
    shape_b = list(r["shape"][:-1]) + [r["shape"][-1] * el]
    stride_b = [s * el for s in r["stride"][:-1]] + [1]
    return torch.as_strided(buf, shape_b, stride_b, r["storage_offset"] * el)


def refused(mod, dev):
    """Views the module must refuse at registration (old vLLM layouts, a kernel block the scheduler's
    block is not a multiple of)."""
    msgs = []
    for name, t, bs in (
        ("old FlashAttention [2, B, N, H, D]", torch.zeros(2, 4, 16, 2, 64, device=dev), 16),
        ("old MLA [B, N, C]", torch.zeros(4, 16, 576, device=dev), 16),
        ("kernel block 64 > scheduler block 16", torch.zeros(4, 2, 64, 128, device=dev), 16),
    ):
        try:
            mod.check_kv_caches({"model.layers.0.self_attn.attn": t}, bs)
        except mod.KVLayoutError as exc:
            msgs.append("refused %s: %s" % (name, str(exc)[:160]))
            continue
        raise AssertionError("not refused: %s" % name)
    return msgs


def main():
    assert torch.cuda.is_available(), "needs CUDA"
    dev = torch.device("cuda")
    found = (torch.__version__, torch.version.cuda, torch.cuda.get_device_name()) + torch.cuda.get_device_capability()
    print("torch %s CUDA %s on %s (sm%d%d)" % found)
    ops = vllm_ops()
    print("vLLM CUDA ops: %s" % ("imported" if ops is not None else "not installed here (torch indexing writes)"))
    mod = load_module()
    data = json.load(open(FIXTURE))
    print("fixture: vLLM %s, recorded by %s" % (data["vllm"], data["recorded_by"]))
    failed = 0
    for case in data["cases"]:
        if case["backend"] == "CPU_ATTN":  # packs keys per block; its own kernel's test is the CPU one
            print("SKIPPED %s (CPU backend: tests/unit/test_kvshare_maru_connector.py)" % case["id"])
            continue
        try:
            line = run_case(mod, case, dev, ops)
            print("PASSED " + line)
        except Exception as exc:  # report every case
            failed += 1
            print("FAILED %s: %r" % (case["id"], exc))
    for line in refused(mod, dev):
        print("PASSED " + line)
    torch.cuda.synchronize()
    gpu_cases = [c for c in data["cases"] if c["backend"] != "CPU_ATTN"]
    print("%d cases passed, %d failed" % (len(gpu_cases) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
