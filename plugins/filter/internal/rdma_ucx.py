# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters of the rdma_ucx role; logic in plugins/module_utils/topology.py (the plan) and
plugins/module_utils/rdma_ucx.py (the reports)."""

from __future__ import annotations


def rdma_ucx_gpu_plan(topology, hca_overrides):
    """The per-GPU UCX plan: the topology's GPUs with rdma_ucx_hca_overrides applied (topology.gpu_plan)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import topology as _topology
    return _topology.gpu_plan(topology, hca_overrides)


def rdma_ucx_preflight_report(facts):
    """The preflight report [{check, status, detail}] from the probe results (rdma_ucx.preflight_report)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import rdma_ucx as _rdma_ucx
    return _rdma_ucx.preflight_report(facts)


def rdma_ucx_verify_report(facts):
    """The verification report [{check, status, detail}] from the registered checks (rdma_ucx.verify_report)."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import rdma_ucx as _rdma_ucx
    return _rdma_ucx.verify_report(facts)


class FilterModule:
    """kvshare.dynamo rdma_ucx filters."""

    def filters(self):
        return {"rdma_ucx_gpu_plan": rdma_ucx_gpu_plan, "rdma_ucx_preflight_report": rdma_ucx_preflight_report,
                "rdma_ucx_verify_report": rdma_ucx_verify_report}
