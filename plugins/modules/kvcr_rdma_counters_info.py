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
module: kvcr_rdma_counters_info
short_description: Bytes sent and received by RDMA ports (sysfs port_xmit_data / port_rcv_data)
description:
  - Reads C(/sys/class/infiniband/<dev>/ports/<port>/counters/port_{xmit,rcv}_data), which count
    4-byte words, and returns bytes. Read-only.
  - The ports are O(devices), else the C(UCX_NET_DEVICES) of O(ucx_env_file) (the worker's per-GPU
    file from the rdma_ucx role), else every port of every device.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  devices:
    description: Ports as C(mlx5_3:1) (a bare name means port 1).
    type: list
    elements: str
    default: []
  ucx_env_file:
    description: Environment file whose C(UCX_NET_DEVICES) names the ports; missing file means all ports.
    type: path
  sysfs_root:
    description: Root the C(sys/class/infiniband) tree is read under (tests use a fake tree).
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Read the worker HCA counters
  kvshare.dynamo.kvcr_rdma_counters_info:
    ucx_env_file: /etc/kvshare/ucx/gpu0.env
  register: rdma
"""

RETURN = r"""
xmit_bytes:
  description: Bytes transmitted (sum over the ports), null when no port could be read.
  type: int
  returned: always
rcv_bytes:
  description: Bytes received (sum over the ports), null when no port could be read.
  type: int
  returned: always
ports:
  description: Per port device, port, xmit_bytes, rcv_bytes.
  type: list
  returned: always
errors:
  description: Ports that could not be read.
  type: list
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_rdma


def env_file_devices(path):
    """UCX_NET_DEVICES of an environment file as [(dev, port)] ([] when absent)."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as handle:
        for line in handle:
            key, dummy, value = line.strip().partition("=")
            if key == "UCX_NET_DEVICES":
                return kvcr_rdma.parse_ucx_devices(value.strip().strip('"'))
    return []


def main():
    module = AnsibleModule(
        argument_spec=dict(
            devices=dict(type="list", elements="str", default=[]),
            ucx_env_file=dict(type="path"),
            sysfs_root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    devices = kvcr_rdma.parse_ucx_devices(",".join(p["devices"])) or env_file_devices(p["ucx_env_file"])
    result = kvcr_rdma.rdma_counters(p["sysfs_root"], devices)
    module.exit_json(changed=False, devices=["%s:%s" % d for d in devices], **result)


if __name__ == "__main__":
    main()
