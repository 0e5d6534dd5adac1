# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/modules/rdma_ucx_host_info.py: a fake root tree and fake programs on PATH."""
import os

from ansible_collections.kvshare.dynamo.plugins.modules import rdma_ucx_host_info
from lib.unit import run_module

UCX_INFO_V = """# Library version: 1.21.0
# Library path: /usr/lib/libucs.so.0
# API headers version: 1.21.0
"""
LSPCI = """00:01.0 PCI bridge: Intel Corporation Device 1bbc
\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd- EgressCtrl- DirectTrans-
"""


def write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def program(bindir, name, stdout="", stderr="", rc=0):
    """A program on PATH that prints stdout/stderr and exits rc, recording its arguments."""
    path = os.path.join(bindir, name)
    write(path, "#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %s/calls\nprintf '%%s' '%s'\nprintf '%%s' '%s' >&2\nexit %d\n"
          % (bindir, stdout.replace("'", ""), stderr.replace("'", ""), rc))
    os.chmod(path, 0o755)


def gpu_host(root):
    write(os.path.join(root, "proc/driver/nvidia/version"),
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15\n")
    write(os.path.join(root, "proc/cmdline"), "BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt\n")
    write(os.path.join(root, "usr/bin/ofed_info"), "#!/bin/sh\n")
    os.makedirs(os.path.join(root, "sys/module/vfio_pci"))
    for group in range(3):
        os.makedirs(os.path.join(root, "sys/kernel/iommu_groups", str(group)))


def calls(bindir):
    path = os.path.join(bindir, "calls")
    return open(path).read().splitlines() if os.path.exists(path) else []


def test_gpu_host_with_ofed_reads_everything(tmp_path, capsys, monkeypatch):
    root, bindir = str(tmp_path / "root"), str(tmp_path / "bin")
    gpu_host(root)
    program(bindir, "modprobe", stderr="modprobe: FATAL: Module nvidia_peermem not found", rc=1)
    program(bindir, "lspci", stdout=LSPCI)
    program(bindir, "ucx_info", stdout=UCX_INFO_V)
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ["PATH"])
    rc, out = run_module(rdma_ucx_host_info, {"root": root, "read_acs": True}, capsys)
    assert rc == 0 and out["changed"] is False
    assert "Open Kernel Module" in out["nvidia_version"]
    assert out["cmdline"] == "BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt"
    assert out["ofed"] is True and out["vfio"] is True and out["iommu_groups"] == 3
    assert out["peermem_probe"] == {"rc": 1, "stderr": "modprobe: FATAL: Module nvidia_peermem not found"}
    assert out["acs_probe"]["rc"] == 0 and "ReqRedir+" in out["acs_probe"]["stdout_lines"][1]
    assert out["ucx_version"] == "1.21.0"
    assert calls(bindir) == ["-n nvidia_peermem", "-vvv", "-v"]


def test_bare_host_runs_only_what_is_asked(tmp_path, capsys, monkeypatch):
    root, bindir = str(tmp_path / "root"), str(tmp_path / "bin")
    write(os.path.join(root, "proc/cmdline"), "root=/dev/vda1\n")
    program(bindir, "modprobe")
    program(bindir, "lspci", stdout=LSPCI)
    program(bindir, "ucx_info", stdout=UCX_INFO_V)
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ["PATH"])
    rc, out = run_module(rdma_ucx_host_info, {"root": root, "read_ucx_version": False}, capsys)
    assert rc == 0
    assert out["nvidia_version"] == "" and out["cmdline"] == "root=/dev/vda1"
    assert out["ofed"] is False and out["vfio"] is False and out["iommu_groups"] == 0
    # No OFED/DOCA: nvidia_peermem is not probed; ACS and UCX were not asked for.
    assert out["peermem_probe"] == {"skipped": True} and out["acs_probe"] == {"skipped": True}
    assert out["ucx_version"] == ""
    assert calls(bindir) == []


def test_missing_programs_are_values_not_failures(tmp_path, capsys, monkeypatch):
    root = str(tmp_path / "root")
    gpu_host(root)
    monkeypatch.setattr(rdma_ucx_host_info.AnsibleModule, "get_bin_path", lambda self, *a, **k: None)
    rc, out = run_module(rdma_ucx_host_info, {"root": root, "read_acs": True}, capsys)
    assert rc == 0
    assert out["peermem_probe"] == {"rc": 127, "stderr": "modprobe: not installed"}
    assert out["acs_probe"]["rc"] == 127 and out["acs_probe"]["stdout_lines"] == []
    assert out["ucx_version"] == ""


def test_ucx_info_without_a_version_line(tmp_path, capsys, monkeypatch):
    root, bindir = str(tmp_path / "root"), str(tmp_path / "bin")
    os.makedirs(root)
    program(bindir, "ucx_info", stdout="something else entirely")
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ["PATH"])
    rc, out = run_module(rdma_ucx_host_info, {"root": root}, capsys)
    assert rc == 0 and out["ucx_version"] == ""
