# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.kvcr_rdma: HCA port byte counters read from sysfs."""

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_rdma


def make_ib(root, dev, port, xmit, rcv):
    d = root / "sys/class/infiniband" / dev / "ports" / str(port) / "counters"
    d.mkdir(parents=True)
    (d / "port_xmit_data").write_text("%d\n" % xmit)
    (d / "port_rcv_data").write_text("%d\n" % rcv)


def test_rdma_counters_fake_sysfs(tmp_path):
    make_ib(tmp_path, "mlx5_0", 1, 10, 20)
    make_ib(tmp_path, "mlx5_3", 1, 1000, 2000)
    all_ports = kvcr_rdma.rdma_counters(str(tmp_path))
    assert all_ports["xmit_bytes"] == 4040 and all_ports["rcv_bytes"] == 8080 and len(all_ports["ports"]) == 2
    one = kvcr_rdma.rdma_counters(str(tmp_path), kvcr_rdma.parse_ucx_devices("mlx5_3:1"))
    assert (one["xmit_bytes"], one["rcv_bytes"]) == (4000, 8000)
    missing = kvcr_rdma.rdma_counters(str(tmp_path), [("mlx5_9", "1")])
    assert missing["xmit_bytes"] is None and "mlx5_9:1" in missing["errors"][0]
    assert kvcr_rdma.rdma_counters(str(tmp_path / "nothing"))["errors"] == [
        "no RDMA device under %s" % (tmp_path / "nothing/sys/class/infiniband")]
    assert kvcr_rdma.parse_ucx_devices("mlx5_3:1, mlx5_4") == [("mlx5_3", "1"), ("mlx5_4", "1")]
