#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_topology_facts
short_description: Discover GPUs, RDMA HCAs and CXL DAX devices and pick the GPU-local HCA per GPU
version_added: "0.1.0"
description:
  - Reads C(nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader), C(/sys/class/infiniband),
    C(/sys/bus/dax/devices) and C(/sys/bus/pci/devices) and computes, for each GPU, the nearest ACTIVE
    RDMA port by the common ancestor of their sysfs paths (classes C(PIX) < C(PXB) < C(PHB) < C(NODE) < C(SYS),
    as C(nvidia-smi topo -m) uses them).
  - When C(nvidia-smi topo -m) output is available the sysfs class is cross-checked against it and
    disagreements are reported as warnings.
  - Read-only; never reports C(changed). A host without GPU or HCA is not an error; it yields warnings.
  - See C(docs/topology.md) for the algorithm and its limits.
author:
  - kvshare.dynamo developers (@kvshare)
options:
  sysfs_root:
    description:
      - Directory that contains C(sys/). C(/) on a real host; a fake tree in tests.
    type: path
    default: /
  nvidia_smi_query_output:
    description:
      - Captured output of C(nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader).
      - When omitted and O(use_nvidia_smi=true), the module runs C(nvidia-smi) itself if it is installed.
    type: str
  nvidia_smi_topo_output:
    description:
      - Captured output of C(nvidia-smi topo -m) (ANSI escapes allowed).
      - When omitted and O(use_nvidia_smi=true), the module runs C(nvidia-smi topo -m) itself if it is installed.
    type: str
  use_nvidia_smi:
    description:
      - Run C(nvidia-smi) for outputs that were not given. Set to V(false) to work purely from the given inputs.
    type: bool
    default: true
  exclude_bond_devices:
    description:
      - Never pick C(mlx5_bond_*) devices (LAG). Bonded devices can have LID 0, which breaks UCX UD wireup.
    type: bool
    default: true
  link_layer:
    description:
      - Only consider ports with this link layer.
    type: str
    choices: [InfiniBand, Ethernet, any]
    default: any
  hca_overrides:
    description:
      - Map of GPU index to C(mlx5_k:port) (port defaults to 1). Overrides the discovered choice.
      - An override naming an RDMA device or port that does not exist fails the module.
    type: dict
    default: {}
notes:
  - Supports check mode; the module changes nothing.
  - GPU indices are C(nvidia-smi) indices (PCI bus order). Workers must run with C(CUDA_DEVICE_ORDER=PCI_BUS_ID)
    or C(CUDA_VISIBLE_DEVICES=GPU-<uuid>) for the mapping to hold inside the process.
attributes:
  check_mode:
    description: Can run in check mode and return the same result (it only reads).
    support: full
  diff_mode:
    description: Returns no diff.
    support: none
"""

EXAMPLES = r"""
- name: Discover the GPU-local HCA for each GPU
  kvshare.dynamo.gpu_topology_facts:
    link_layer: InfiniBand
  register: topo

- name: Show the UCX device per GPU
  ansible.builtin.debug:
    msg: "GPU {{ item.index }} -> {{ item.ucx_net_devices }} ({{ item.path_class }})"
  loop: "{{ ansible_facts.kvshare_gpu_topology.gpus }}"

- name: Pin GPU 3 to mlx5_5 port 1 whatever discovery says
  kvshare.dynamo.gpu_topology_facts:
    hca_overrides:
      "3": "mlx5_5:1"

- name: Work on a captured fake sysfs tree (tests)
  kvshare.dynamo.gpu_topology_facts:
    sysfs_root: /tmp/fixtures/dgx_h100/root
    nvidia_smi_query_output: "{{ lookup('file', 'query_gpu.txt') }}"
    nvidia_smi_topo_output: "{{ lookup('file', 'topo_m.txt') }}"
    use_nvidia_smi: false
"""

RETURN = r"""
gpus:
  description: One entry per GPU, in index order.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: nvidia-smi index.
      type: int
    uuid:
      description: GPU UUID (C(GPU-...))
      type: str
    bus_id:
      description: "PCI address C(0000:17:00.0)."
      type: str
    numa_node:
      description: NUMA node from sysfs (C(-1) unknown).
      type: int
    hca:
      description: Chosen RDMA device or null.
      type: str
    port:
      description: Chosen port or null.
      type: int
    ucx_net_devices:
      description: "Value for C(UCX_NET_DEVICES) (C(mlx5_k:1)) or null."
      type: str
    path_class:
      description: PIX, PXB, PHB, NODE or SYS.
      type: str
    topo_class:
      description: Class nvidia-smi topo -m reports for the pair, if known.
      type: str
    link_layer:
      description: Link layer of the chosen port.
      type: str
    netdevs:
      description: Netdevs of the chosen HCA.
      type: list
      elements: str
    hca_is_mlx5:
      description: Whether the chosen HCA is driven by mlx5 (C(rc_x) works).
      type: bool
    acs_bridges:
      description: PCI bridges between GPU and HCA (only for PIX/PXB paths).
      type: list
      elements: str
    source:
      description: C(discovered) or C(override).
      type: str
    warnings:
      description: Problems with this GPU's choice.
      type: list
      elements: str
  sample:
    - index: 0
      uuid: GPU-5a1c0e0e-0000-0000-0000-000000000000
      bus_id: "0000:18:00.0"
      numa_node: 0
      hca: mlx5_0
      port: 1
      ucx_net_devices: "mlx5_0:1"
      path_class: PIX
      warnings: []
hcas:
  description: All RDMA devices under /sys/class/infiniband with their ports, PCI path, netdevs.
  returned: always
  type: list
  elements: dict
dax_devices:
  description: DAX devices under /sys/bus/dax/devices (name, path, region, numa_node, target_node).
  returned: always
  type: list
  elements: dict
topology_warnings:
  description: Host-level warnings (no HCA, poor best path, sysfs/topo disagreement, ...).
  returned: always
  type: list
  elements: str
nvidia_smi_present:
  description: Whether nvidia-smi was found (only meaningful when outputs were not given).
  returned: always
  type: bool
ansible_facts:
  description: Facts.
  returned: always
  type: dict
  contains:
    kvshare_gpu_topology:
      description: Everything above under one fact (C(gpus), C(hcas), C(dax_devices), C(warnings)).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils.topology import (
    TopologyError,
    discover,
)


def _run(module, nvsmi, args, what, warnings):
    rc, out, err = module.run_command([nvsmi] + args, check_rc=False)
    if rc != 0:
        warnings.append("%s failed (rc=%d): %s" % (what, rc, (err or out).strip()[:300]))
        return None
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/"),
            nvidia_smi_query_output=dict(type="str"),
            nvidia_smi_topo_output=dict(type="str"),
            use_nvidia_smi=dict(type="bool", default=True),
            exclude_bond_devices=dict(type="bool", default=True),
            link_layer=dict(type="str", default="any", choices=["InfiniBand", "Ethernet", "any"]),
            hca_overrides=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    query, topo = p["nvidia_smi_query_output"], p["nvidia_smi_topo_output"]
    pre_warnings = []
    nvsmi = module.get_bin_path("nvidia-smi") if p["use_nvidia_smi"] else None
    if nvsmi:
        if query is None:
            query = _run(module, nvsmi, ["--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"],
                         "nvidia-smi --query-gpu", pre_warnings)
        if topo is None:
            topo = _run(module, nvsmi, ["topo", "-m"], "nvidia-smi topo -m", pre_warnings)
    elif p["use_nvidia_smi"] and query is None:
        pre_warnings.append("nvidia-smi not found: no GPUs discovered")

    try:
        result = discover(
            sysfs_root=p["sysfs_root"],
            query_gpu_output=query,
            topo_output=topo,
            exclude_bond_devices=p["exclude_bond_devices"],
            hca_overrides=p["hca_overrides"],
            link_layer=p["link_layer"],
        )
    except TopologyError as exc:
        module.fail_json(msg=str(exc))

    warnings = pre_warnings + result["warnings"]
    for w in warnings:
        module.warn(w)
    fact = dict(result)
    fact["warnings"] = warnings
    module.exit_json(
        changed=False,
        gpus=result["gpus"],
        hcas=result["hcas"],
        dax_devices=result["dax_devices"],
        topology_warnings=warnings,
        nvidia_smi_present=bool(nvsmi),
        ansible_facts={"kvshare_gpu_topology": fact},
    )


if __name__ == "__main__":
    main()
