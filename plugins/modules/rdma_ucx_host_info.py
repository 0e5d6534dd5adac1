#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The host state the rdma_ucx preflight reads, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_ucx_host_info
short_description: Read the GPU driver, OFED/DOCA, IOMMU, VFIO, ACS and UCX state of a host in one run
version_added: "0.1.0"
description:
  - Reads what the C(kvshare.dynamo.rdma_ucx) preflight decides the GPUDirect RDMA path from, in one
    module run on the host instead of one C(stat), C(slurp), C(find) or C(command) run per item (each
    starts Python on the host and imports Ansible's module library).
  - C(/proc/driver/nvidia/version), C(/proc/cmdline), whether an OFED/DOCA stack is installed
    (C(/usr/bin/ofed_info) or C(/usr/src/ofa_kernel)), whether C(vfio_pci) is loaded, the number of
    IOMMU groups; C(modprobe -n nvidia_peermem) on OFED/DOCA hosts, C(lspci -vvv) and C(ucx_info -v)
    when asked.
  - Read-only; never reports C(changed). A missing file or program is a value (empty, false,
    a non-zero rc), never a failure.
author:
  - kvshare.dynamo developers (@kvshare)
options:
  root:
    description:
      - Directory the probed paths are read under. C(/) on a real host; a fake tree in tests.
    type: path
    default: /
  probe_peermem:
    description:
      - Run C(modprobe -n nvidia_peermem) when an OFED/DOCA stack is installed.
    type: bool
    default: true
  read_acs:
    description:
      - Run C(lspci -vvv) for the ACS control of every PCI device (worth it only with GPUs and HCAs).
    type: bool
    default: false
  read_ucx_version:
    description:
      - Run C(ucx_info -v) for the UCX library version.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Probe the GPU driver, OFED/DOCA, IOMMU, VFIO, ACS and UCX state
  kvshare.dynamo.rdma_ucx_host_info:
    read_acs: "{{ __rdma_ucx_hw | bool }}"
    read_ucx_version: "{{ rdma_ucx_ucx_version | length == 0 }}"
  register: __rdma_ucx_host
"""

RETURN = r"""
nvidia_version:
  description: Content of C(/proc/driver/nvidia/version); empty without the NVIDIA driver.
  returned: always
  type: str
cmdline:
  description: The kernel command line (C(/proc/cmdline)), stripped.
  returned: always
  type: str
ofed:
  description: Whether an OFED/DOCA stack is installed (C(/usr/bin/ofed_info) or C(/usr/src/ofa_kernel) exists).
  returned: always
  type: bool
vfio:
  description: Whether C(vfio_pci) is loaded (C(/sys/module/vfio_pci) exists).
  returned: always
  type: bool
iommu_groups:
  description: Entries of C(/sys/kernel/iommu_groups); 0 without an IOMMU.
  returned: always
  type: int
peermem_probe:
  description:
    - C(modprobe -n nvidia_peermem) as rc and stderr; only C(skipped=true) without OFED/DOCA or when not asked.
  returned: always
  type: dict
acs_probe:
  description:
    - C(lspci -vvv) as rc, stdout_lines and stderr; only C(skipped=true) when not asked.
  returned: always
  type: dict
ucx_version:
  description: The version C(ucx_info -v) prints as "Library version"; empty when not asked or not installed.
  returned: always
  type: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

UCX_VERSION_RE = re.compile(r"Library version: ([0-9.]+)")


def _path(root, path):
    return os.path.join(root, path.lstrip("/"))


def _read(root, path):
    try:
        with open(_path(root, path)) as handle:
            return handle.read()
    except (IOError, OSError):
        return ""


def _count(root, path):
    try:
        return len(os.listdir(_path(root, path)))
    except OSError:
        return 0


def _run(module, argv):
    """rc, stdout, stderr of argv; rc 127 and a reason when the program is not installed."""
    binary = module.get_bin_path(argv[0])
    if not binary:
        return 127, "", "%s: not installed" % argv[0]
    return module.run_command([binary] + argv[1:], check_rc=False)


def host_info(module, root, probe_peermem=True, read_acs=False, read_ucx_version=True):
    """The state the rdma_ucx preflight reads (see RETURN)."""
    info = {
        "nvidia_version": _read(root, "/proc/driver/nvidia/version"),
        "cmdline": _read(root, "/proc/cmdline").strip(),
        "ofed": any(os.path.exists(_path(root, p)) for p in ("/usr/bin/ofed_info", "/usr/src/ofa_kernel")),
        "vfio": os.path.exists(_path(root, "/sys/module/vfio_pci")),
        "iommu_groups": _count(root, "/sys/kernel/iommu_groups"),
        "peermem_probe": {"skipped": True},
        "acs_probe": {"skipped": True},
        "ucx_version": "",
    }
    if probe_peermem and info["ofed"]:
        rc, _out, err = _run(module, ["modprobe", "-n", "nvidia_peermem"])
        info["peermem_probe"] = {"rc": rc, "stderr": err}
    if read_acs:
        rc, out, err = _run(module, ["lspci", "-vvv"])
        info["acs_probe"] = {"rc": rc, "stdout_lines": out.splitlines(), "stderr": err}
    if read_ucx_version:
        rc, out, _err = _run(module, ["ucx_info", "-v"])
        found = UCX_VERSION_RE.search(out) if rc == 0 else None
        info["ucx_version"] = found.group(1) if found else ""
    return info


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            probe_peermem=dict(type="bool", default=True),
            read_acs=dict(type="bool", default=False),
            read_ucx_version=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(changed=False, **host_info(module, params["root"], params["probe_peermem"],
                                                params["read_acs"], params["read_ucx_version"]))


if __name__ == "__main__":
    main()
