#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Report DAX devices as XCENA Maru's resource manager would see them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: devdax_info
short_description: Report DAX devices as XCENA Maru's resource manager sees them
version_added: "0.1.0"
description:
  - Runs C(daxctl list) (or takes its JSON output) and walks C(<sysfs_root>/sys/bus/dax/devices)
    the way Maru's resource manager does, then classifies every device.
  - A device is claimed by Maru when it is in devdax mode, its sysfs path contains C(region<N>),
    and C(/dev/daxX.Y) exists. Maru writes a header on every such device, so devices that are
    not in O(dedicated) are reported as errors unless O(allow_undedicated=true).
  - Also lists C(<sysfs_root>/sys/class/block/pmem*) and C(<sysfs_root>/proc/mounts) the way the
    resource manager finds FS_DAX pools (real persistent memory or CXL memory in fsdax mode). A
    pmem device mounted with the C(dax) option is a pool (O(dedicated) may name it, e.g. C(pmem0)).
  - Read-only; never changes the host. Supports check mode.
options:
  sysfs_root:
    description: Directory that contains C(sys/) and C(dev/) (C(/) on a real host; a fake tree in tests).
    type: path
    default: /
  daxctl_json:
    description:
      - Output of C(daxctl list) to use instead of running it.
      - When omitted, C(daxctl list) is run if the binary exists; otherwise only sysfs is used.
    type: str
  dedicated:
    description: Device names (C(dax0.0), C(pmem0)) or paths (C(/dev/dax0.0)) the inventory dedicates to Maru.
    type: list
    elements: str
    default: []
  allow_undedicated:
    description: Report claimed devices outside O(dedicated) as warnings instead of errors.
    type: bool
    default: false
author:
  - kvshare.dynamo developers (@kvshare)
"""

EXAMPLES = r"""
- name: Find the DAX devices Maru will claim
  kvshare.dynamo.devdax_info:
    dedicated: [dax0.0, dax1.0]
  register: __dax

- name: Fail on problems
  ansible.builtin.assert:
    that: __dax.errors | length == 0
    fail_msg: "{{ __dax.errors | join('; ') }}"
"""

RETURN = r"""
devices:
  description: Every DAX device found, merged from daxctl and sysfs.
  returned: always
  type: list
  elements: dict
  sample:
    - name: dax0.0
      mode: devdax
      in_region: true
      region_id: 0
      size: 68719476736
      align: 2097152
      chardev: /dev/dax0.0
      chardev_exists: true
      sysfs_target: ../../../devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0
maru_devices:
  description: Names of devices Maru's resource manager will claim as pools.
  returned: always
  type: list
  elements: str
  sample: [dax0.0]
fsdax:
  description: Every pmem block device with its dax mount (C(mount) null when not mounted with dax).
  returned: always
  type: list
  elements: dict
  sample:
    - name: pmem0
      region_id: 0
      mount: /mnt/pmem0
      fstype: ext4
      options: rw,relatime,dax=always
      size: 68719476736
      usable: true
fsdax_pools:
  description: Names of the pmem devices the resource manager will use as FS_DAX pools.
  returned: always
  type: list
  elements: str
  sample: [pmem0]
skipped:
  description: Devices Maru will not use, with the reason.
  returned: always
  type: list
  elements: dict
undedicated:
  description: Devices Maru will claim that are not in O(dedicated).
  returned: always
  type: list
  elements: str
missing:
  description: Entries of O(dedicated) that Maru will not claim.
  returned: always
  type: list
  elements: str
errors:
  description: Problems that should stop a rollout.
  returned: always
  type: list
  elements: str
warnings_list:
  description: Problems that do not stop a rollout (also emitted as module warnings).
  returned: always
  type: list
  elements: str
daxctl_available:
  description: Whether C(daxctl) was found (or its JSON was given).
  returned: always
  type: bool
daxctl_stderr:
  description: Standard error of C(daxctl list), when it was run.
  returned: when daxctl was run
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils.devdax import (
    merge,
    parse_daxctl_list,
    scan_fsdax,
    scan_sysfs,
    verdict,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/"),
            daxctl_json=dict(type="str"),
            dedicated=dict(type="list", elements="str", default=[]),
            allow_undedicated=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False)
    text = params["daxctl_json"]
    daxctl_available = text is not None
    if text is None:
        daxctl = module.get_bin_path("daxctl")
        if daxctl:
            daxctl_available = True
            rc, out, err = module.run_command([daxctl, "list"])
            result["daxctl_stderr"] = err
            if rc != 0:
                module.fail_json(msg="daxctl list failed (rc=%d): %s" % (rc, err.strip()), **result)
            text = out
    try:
        daxctl_devices = parse_daxctl_list(text or "")
    except ValueError as exc:
        module.fail_json(msg="cannot parse daxctl list output: %s" % exc, **result)
    devices = merge(daxctl_devices, scan_sysfs(params["sysfs_root"]))
    fsdax = scan_fsdax(params["sysfs_root"])
    ver = verdict(devices, params["dedicated"], params["allow_undedicated"], fsdax)
    for warning in ver["warnings"]:
        module.warn(warning)
    result.update(
        devices=devices,
        maru_devices=ver["maru_devices"],
        fsdax=fsdax,
        fsdax_pools=ver["fsdax_pools"],
        skipped=ver["skipped"],
        undedicated=ver["undedicated"],
        missing=ver["missing"],
        errors=ver["errors"],
        warnings_list=ver["warnings"],
        daxctl_available=daxctl_available,
    )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
