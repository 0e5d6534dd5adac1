# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Filters of the rdma_ucx role; logic in plugins/module_utils/topology.py."""

from __future__ import annotations

from ansible_collections.kvshare.dynamo.plugins.module_utils import topology as _topology


def rdma_ucx_gpu_plan(topology, hca_overrides):
    """The per-GPU UCX plan: the topology's GPUs with rdma_ucx_hca_overrides applied (topology.gpu_plan)."""
    return _topology.gpu_plan(topology, hca_overrides)


def rdma_ucx_preflight_report(facts):
    """The preflight report [{check, status, detail}] from the probe results (topology.preflight_report)."""
    return _topology.preflight_report(facts)


class FilterModule:
    """kvshare.dynamo rdma_ucx filters."""

    def filters(self):
        return {"rdma_ucx_gpu_plan": rdma_ucx_gpu_plan, "rdma_ucx_preflight_report": rdma_ucx_preflight_report}
