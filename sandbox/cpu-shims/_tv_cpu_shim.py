"""Sandbox-only CPU workaround (not a Dynamo/vLLM stand-in): lets PyPI's CUDA-built torchvision import on CPU torch.

PyPI's torchvision wheel links CUDA libraries; beside torch+cpu its C extension fails to load and
torchvision/_meta_registrations.py then registers fakes for ops that were never defined
("operator torchvision::nms does not exist"). dynamo.vllm imports torchvision through
transformers' Qwen2-VL image processor. This declares the two op schemas (no kernels) just
before torchvision's meta registrations run, and only when torchvision's own ops did not load.
Calling torchvision.ops.nms still fails ("no kernel"); text models never call it.
"""
import importlib.abc
import sys

_LIB = None


class _TorchvisionOpsFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: D102
        global _LIB
        if name != "torchvision._meta_registrations" or _LIB is not None:
            return None
        import torch
        import torchvision.extension as ext

        if ext._has_ops():  # a real CPU torchvision: do nothing
            return None
        _LIB = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        return None


sys.meta_path.insert(0, _TorchvisionOpsFinder())
