# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR (KV Cache Runner) variant: bytes the HCA ports moved, read from sysfs on the host.

Stdlib only (kvcr_rdma_counters_info runs it on managed hosts); imports nothing of the collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

# sysfs port counters port_xmit_data / port_rcv_data count 4-byte words.
RDMA_COUNTER_UNIT = 4


def parse_ucx_devices(value):
    """UCX_NET_DEVICES ("mlx5_3:1,mlx5_4:1") -> [(device, port)]; bare names mean port 1."""
    out = []
    for item in str(value or "").split(","):
        item = item.strip()
        if not item or item == "all":
            continue
        dev, dummy, port = item.partition(":")
        out.append((dev, port or "1"))
    return out


def rdma_counters(sysfs_root="/", devices=None):
    """Bytes sent and received by HCA ports, from sysfs (counters are in 4-byte words).

    devices: [(device, port)] to read, or None/[] for every port of every device.
    Returns {"ports": [{"device", "port", "xmit_bytes", "rcv_bytes"}], "xmit_bytes", "rcv_bytes",
    "errors": [...]}; the totals are None when no port could be read.
    """
    base = os.path.join(sysfs_root, "sys/class/infiniband")
    wanted = list(devices or [])
    if not wanted:
        try:
            for dev in sorted(os.listdir(base)):
                ports_dir = os.path.join(base, dev, "ports")
                for port in sorted(os.listdir(ports_dir)):
                    wanted.append((dev, port))
        except OSError:
            pass
    result = {"ports": [], "errors": [], "xmit_bytes": None, "rcv_bytes": None}
    for dev, port in wanted:
        counters_dir = os.path.join(base, dev, "ports", str(port), "counters")
        entry = {"device": dev, "port": str(port)}
        try:
            for key, fname in (("xmit_bytes", "port_xmit_data"), ("rcv_bytes", "port_rcv_data")):
                with open(os.path.join(counters_dir, fname)) as handle:
                    entry[key] = int(handle.read().strip()) * RDMA_COUNTER_UNIT
        except (OSError, ValueError) as exc:
            result["errors"].append("%s:%s: %s" % (dev, port, exc))
            continue
        result["ports"].append(entry)
    if result["ports"]:
        result["xmit_bytes"] = sum(p["xmit_bytes"] for p in result["ports"])
        result["rcv_bytes"] = sum(p["rcv_bytes"] for p in result["ports"])
    elif not wanted:
        result["errors"].append("no RDMA device under %s" % base)
    return result
