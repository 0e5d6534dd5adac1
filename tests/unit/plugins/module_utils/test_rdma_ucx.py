# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for the rdma_ucx verification report (plugins/module_utils/rdma_ucx.py).

The preflight report's tests stay in test_topology.py, beside the fake sysfs trees they discover.
"""
import json
import os

import pytest

from ansible_collections.kvshare.dynamo.plugins.filter.internal.rdma_ucx import rdma_ucx_verify_report
from ansible_collections.kvshare.dynamo.plugins.module_utils.rdma_ucx import verify_report

CASES_FILE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "rdma_ucx",
                          "verify_report_cases.json")
with open(CASES_FILE, encoding="utf-8") as _handle:
    CASES = dict((case["name"], case) for case in json.load(_handle)["cases"])

UCX_INFO = """#
# Memory domain: mlx5_0
#         memory types: host (access,reg,cache), cuda (access,reg)
#
# Memory domain: mlx5_10
#         memory types: host (access,reg,cache)
#
# Memory domain: mlx5x1
#         memory types: host (access,reg,cache), cuda (access,reg)
"""


def by_check(report):
    return dict((entry["check"], (entry["status"], entry["detail"])) for entry in report)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_report_is_what_the_former_template_rendered(name):
    """Every case's report, entry for entry, as verify_report.json.j2 rendered it (fixture)."""
    case = CASES[name]
    assert rdma_ucx_verify_report(case["facts"]) == case["report"]


def test_without_hardware_both_hardware_checks_are_skipped_with_the_reason():
    report = verify_report({"require_hardware": "no", "no_hw_reason": "no HCA found\n", "hw": "False",
                            "devinfo": {"results": [{"item": "mlx5_0", "rc": 0, "stdout": "state: PORT_ACTIVE"}]},
                            "ucx_info": {"rc": 0, "stdout": UCX_INFO}, "gpus": [{"hca": "mlx5_0"}]})
    why = "rdma_ucx_require_hardware=false: no HCA found"
    assert report == [{"check": "ibv_devinfo", "status": "skipped", "detail": why},
                      {"check": "ucx cuda memory", "status": "skipped", "detail": why}]


def test_ports_and_ucx_memory_domains_with_hardware():
    devinfo = {"results": [
        {"item": "mlx5_0", "rc": 0, "stdout": "port: 1\n\tstate: PORT_ACTIVE (4)\n\tmax_mtu: 4096 (5)\n"
                                              "\tactive_mtu: 4096 (5)\n\tlink_layer: InfiniBand"},
        {"item": "mlx5_1", "rc": 0, "stdout": "\tstate: PORT_INIT (2)\n\tlink_layer: Ethernet"},
        {"item": "mlx5_2", "rc": 255, "stderr": "\nibv_devinfo: no device\n"},
    ]}
    gpus = [{"hca": "mlx5_1"}, {"hca": "mlx5_0"}, {"hca": None}, {"hca": "mlx5_1"}, {"hca": "mlx5_10"}]
    report = verify_report({"require_hardware": True, "hw": True, "devinfo": devinfo, "gpus": gpus,
                            "ucx_info": {"rc": 0, "stdout": UCX_INFO, "stderr": ""}})
    checks = by_check(report)
    # stdout_lines absent: stdout's lines; only the state, link layer and active MTU lines, trimmed
    assert checks["ibv_devinfo mlx5_0"] == ("passed", "state: PORT_ACTIVE (4); active_mtu: 4096 (5); link_layer: InfiniBand")
    assert checks["ibv_devinfo mlx5_1"] == ("failed", "state: PORT_INIT (2); link_layer: Ethernet")
    assert checks["ibv_devinfo mlx5_2"] == ("failed", "ibv_devinfo: no device")
    # each HCA of the plan once, in plan order; mlx5_1 is not mistaken for mlx5_10
    assert [entry["check"] for entry in report][3:] == ["ucx cuda memory mlx5_1", "ucx cuda memory mlx5_0",
                                                        "ucx cuda memory mlx5_10"]
    assert checks["ucx cuda memory mlx5_1"] == ("failed", "no UCX memory domain for mlx5_1")
    assert checks["ucx cuda memory mlx5_0"] == ("passed", "memory types: host (access,reg,cache), cuda (access,reg)")
    assert checks["ucx cuda memory mlx5_10"][0] == "warning"
    assert "GPUDirect RDMA not proven" in checks["ucx cuda memory mlx5_10"][1]


def test_an_hca_name_is_matched_literally():
    """A '.' in an HCA name matches only a '.' (the template put the name into the regex unescaped)."""
    report = verify_report({"hw": True, "gpus": [{"hca": "mlx5.1"}], "ucx_info": {"rc": 0, "stdout": UCX_INFO}})
    assert report == [{"check": "ucx cuda memory mlx5.1", "status": "failed",
                       "detail": "no UCX memory domain for mlx5.1"}]


def test_ucx_info_not_runnable_is_a_warning_with_its_error():
    prefix = "ucx_info not runnable (the NIXL wheel bundles UCX without ucx_info): "
    missing = verify_report({"hw": True, "gpus": [{"hca": "mlx5_0"}],
                             "ucx_info": {"rc": 2, "msg": "[Errno 2] No such file or directory: b'ucx_info'"}})
    assert missing == [{"check": "ucx_info -d", "status": "warning",
                        "detail": prefix + "[Errno 2] No such file or directory: b'ucx_info'"}]
    # stderr, even empty, wins over msg (the template's default() applied to an absent stderr only)
    empty = verify_report({"hw": True, "ucx_info": {"rc": 1, "stderr": "", "msg": "non-zero return code"}})
    assert empty[0]["detail"] == prefix
    # not run at all (no rc): not runnable either
    assert verify_report({"hw": True, "ucx_info": {}})[0]["check"] == "ucx_info -d"


def test_memlock_of_each_unit():
    units = {"results": [{"item": "a.service", "status": {"LimitMEMLOCK": "infinity"}},
                         {"item": "b.service", "status": {"LimitMEMLOCK": "18446744073709551615"}},
                         {"item": "c.service", "status": {"LimitMEMLOCK": "65536"}},
                         {"item": "d.service", "failed": True, "msg": "no systemd"},
                         {"item": "e.service", "status": None}]}
    report = verify_report({"hw": False, "unit_memlock": units})
    assert report[2:] == [
        {"check": "LimitMEMLOCK a.service", "status": "passed", "detail": "infinity"},
        {"check": "LimitMEMLOCK b.service", "status": "passed", "detail": "18446744073709551615"},
        {"check": "LimitMEMLOCK c.service", "status": "warning", "detail": "65536"},
        {"check": "LimitMEMLOCK d.service", "status": "warning", "detail": "unknown"},
        {"check": "LimitMEMLOCK e.service", "status": "warning", "detail": "unknown"},
    ]
