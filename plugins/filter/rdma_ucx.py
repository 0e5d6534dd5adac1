# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Filters of the rdma_ucx role; logic in plugins/module_utils/topology.py."""

from __future__ import annotations

from ansible_collections.kvshare.dynamo.plugins.module_utils import topology as _topology


def rdma_ucx_gpu_plan(topology, hca_overrides):
    """The per-GPU UCX plan: the topology's GPUs with rdma_ucx_hca_overrides applied (topology.gpu_plan)."""
    return _topology.gpu_plan(topology, hca_overrides)


class FilterModule:
    """kvshare.dynamo rdma_ucx filters."""

    def filters(self):
        return {"rdma_ucx_gpu_plan": rdma_ucx_gpu_plan}
