# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Renders the rdma_ucx per-GPU UCX env files for a two-node KVCR-like inventory from fixture facts.

1. gpu.env.j2 rendered with plain Jinja2 (plus Ansible's `comment` filter) from facts that
   topology.discover() computes on the fake sysfs trees in tests/fixtures/topology.
2. The whole role run by ansible-playbook against two `connection: local` hosts with
   rdma_ucx_require_hardware=false and every path redirected into pytest's tmp dir
   (no packages, no modules, nothing outside tmp is written).
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import jinja2
import pytest
from ansible.plugins.filter.core import comment

from ansible_collections.kvshare.dynamo.plugins.module_utils.topology import discover

import render_lib

REPO = render_lib.REPO
ROLE = os.path.join(REPO, "roles", "rdma_ucx")
FIXTURES = os.path.join(REPO, "tests", "fixtures", "topology")
_spec = importlib.util.spec_from_file_location("build_sysfs", os.path.join(FIXTURES, "build_sysfs.py"))
build_sysfs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_sysfs)


def facts(case, tmp_path, **kwargs):
    root, query, topo = build_sysfs.build_case(case, str(tmp_path / ("sys_" + case)))
    return discover(root, query, topo, **kwargs)


def env_lines(text):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def render(gpu, **overrides):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             trim_blocks=True, lstrip_blocks=False, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["comment"] = comment
    ctx = {"ansible_managed": "Ansible managed", "rdma_ucx_env_dir": "/etc/kvshare/ucx",
           "__rdma_ucx_systemd_limit_memlock": "infinity", "rdma_ucx_set_cuda_visible_devices": False,
           "rdma_ucx_tls": "", "rdma_ucx_gpu_direct_rdma": "yes", "rdma_ucx_gid_index": "",
           "__rdma_ucx_max_hca_auto": True, "rdma_ucx_extra_env": {}, "gpu": gpu}
    ctx.update(overrides)
    return env.get_template("gpu.env.j2").render(ctx)


def test_jinja_node1_dgx(tmp_path):
    gpus = facts("dgx_h100", tmp_path)["gpus"]
    out = render(gpus[7])
    assert out.startswith("#\n# Ansible managed\n#\n")
    assert env_lines(out) == [
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "UCX_NET_DEVICES=mlx5_11:1",
        "UCX_TLS=rc_x,cuda",
        "UCX_IB_GPU_DIRECT_RDMA=yes",
        "UCX_MAX_HCA_PER_GPU=auto",
    ]
    assert "# HCA mlx5_11:1 (discovered, path PXB, InfiniBand)" in out
    assert "EnvironmentFile=-/etc/kvshare/ucx/gpu%i.env" in out


def test_jinja_node2_roce_non_mlx5_old_ucx(tmp_path):
    gpus = facts("two_socket", tmp_path)["gpus"]
    out = render(gpus[1], __rdma_ucx_max_hca_auto=False, rdma_ucx_gid_index="3",
                 rdma_ucx_set_cuda_visible_devices=True, rdma_ucx_extra_env={"UCX_RNDV_SCHEME": "get_zcopy"})
    assert env_lines(out) == [
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES=%s" % gpus[1]["uuid"],
        "UCX_NET_DEVICES=bnxt_re0:1",
        "UCX_TLS=rc_v,cuda",
        "UCX_IB_GPU_DIRECT_RDMA=yes",
        "UCX_IB_GID_INDEX=3",
        "UCX_RNDV_SCHEME=get_zcopy",
    ]


def test_jinja_no_hca_gpu(tmp_path):
    gpus = facts("no_hca", tmp_path)["gpus"]
    out = render(gpus[0])
    assert env_lines(out) == ["CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    assert "No RDMA port for this GPU" in out


def test_jinja_explicit_tls(tmp_path):
    gpus = facts("dgx_h100", tmp_path)["gpus"]
    assert "UCX_TLS=rc,cuda_copy,cuda_ipc\n" in render(gpus[0], rdma_ucx_tls="rc,cuda_copy,cuda_ipc")


# ---------------------------------------------------------------- whole role, two local hosts

PLAYBOOK = """
- name: Render rdma_ucx for a two-node KVCR-like inventory (files only, tmp dir)
  hosts: kvcr
  gather_facts: true
  roles:
    - role: kvshare.dynamo.rdma_ucx
"""


def host_vars(tmp, name, topology, **extra):
    base = str(tmp / name)
    hv = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "rdma_ucx_require_hardware": False,
        "rdma_ucx_install_packages": False,
        "rdma_ucx_topology_facts": topology,
        "rdma_ucx_env_dir": base + "/etc/kvshare/ucx",
        "__rdma_ucx_modules_load_file": base + "/etc/modules-load.d/kvshare-rdma.conf",
        "__rdma_ucx_limits_file": base + "/etc/security/limits.d/90-kvshare-rdma.conf",
        "__rdma_ucx_acs_script": base + "/usr/local/libexec/kvshare/acs-clear.sh",
        "__rdma_ucx_acs_unit": "kvshare-test-never-installed-%s.service" % name,
        "__rdma_ucx_grub_dropin": base + "/etc/default/grub.d/90-kvshare-gpudirect.cfg",
        "__rdma_ucx_state_dir": base + "/var/lib/kvshare",
        "__rdma_ucx_systemd_unit_dir": base + "/etc/systemd/system",
        "kvshare_converged_dir": base + "/var/lib/kvshare/converged",
    }
    hv.update(extra)
    return hv


@pytest.mark.skipif(shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) is None,
                    reason="ansible-playbook not in the venv")
def test_role_two_nodes(tmp_path):
    node1 = facts("dgx_h100", tmp_path)
    node2 = facts("two_socket", tmp_path)
    inventory = {"all": {"children": {"kvcr": {"hosts": {
        "node1": host_vars(tmp_path, "node1", node1, rdma_ucx_ucx_version="1.22.0"),
        "node2": host_vars(tmp_path, "node2", node2, rdma_ucx_ucx_version="1.18.1",
                           rdma_ucx_hca_overrides={"0": "mlx5_0:1", "7": "mlx5_0"}, rdma_ucx_gid_index="3"),
    }}}}}
    proc = run_playbook(tmp_path, inventory)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    def read(host, rel):
        return (tmp_path / host / rel).read_text()

    n1 = [env_lines(read("node1", "etc/kvshare/ucx/gpu%d.env" % i)) for i in range(8)]
    assert [line for line in n1[0] if line.startswith("UCX_NET_DEVICES")] == ["UCX_NET_DEVICES=mlx5_0:1"]
    assert [lines[1] for lines in n1] == ["UCX_NET_DEVICES=%s:1" % h for h in
                                          ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]]
    assert n1[3] == ["CUDA_DEVICE_ORDER=PCI_BUS_ID", "UCX_NET_DEVICES=mlx5_5:1", "UCX_TLS=rc_x,cuda",
                     "UCX_IB_GPU_DIRECT_RDMA=yes", "UCX_MAX_HCA_PER_GPU=auto"]
    n2 = [env_lines(read("node2", "etc/kvshare/ucx/gpu%d.env" % i)) for i in range(4)]
    # override on GPU0 (bnxt_re0 discovered -> mlx5_0 forced), UCX 1.18 -> no MAX_HCA_PER_GPU
    assert n2[0] == ["CUDA_DEVICE_ORDER=PCI_BUS_ID", "UCX_NET_DEVICES=mlx5_0:1", "UCX_TLS=rc_x,cuda",
                     "UCX_IB_GPU_DIRECT_RDMA=yes", "UCX_IB_GID_INDEX=3"]
    assert n2[1][1:3] == ["UCX_NET_DEVICES=bnxt_re0:1", "UCX_TLS=rc_v,cuda"]
    # path class of an override is only known when the module computed it (hardware mode)
    assert "# HCA mlx5_0:1 (override, InfiniBand)" in read("node2", "etc/kvshare/ucx/gpu0.env")
    # override for a GPU the facts do not have still gets a file (no-hardware mode)
    assert env_lines(read("node2", "etc/kvshare/ucx/gpu7.env"))[1] == "UCX_NET_DEVICES=mlx5_0:1"
    # other files written, none of the hardware-only ones
    limits = read("node1", "etc/security/limits.d/90-kvshare-rdma.conf")
    assert "kvshare  hard  memlock  unlimited" in limits
    mods = read("node1", "etc/modules-load.d/kvshare-rdma.conf")
    assert "rdma_ucm" in mods and "\nnvidia_peermem" not in mods
    assert not (tmp_path / "node1" / "usr/local/libexec/kvshare/acs-clear.sh").exists()
    assert not (tmp_path / "node1" / "var/lib/kvshare/reboot-required.rdma_ucx").exists()
    # hardware checks are reported as skipped, never passed
    out = proc.stdout
    assert "skipped | gpus | rdma_ucx_require_hardware=false: topology from rdma_ucx_topology_facts" in out
    assert "skipped | ibv_devinfo" in out
    assert "passed | gpus" not in out


def run_playbook(tmp_path, inventory, *extra):
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    env = render_lib.ansible_env(tmp_path)
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inv), str(play)] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.skipif(shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) is None,
                    reason="ansible-playbook not in the venv")
def test_role_bad_input_fails_in_preflight(tmp_path):
    root, dummy, dummy = build_sysfs.build_case("dgx_h100", str(tmp_path / "dgx"))
    node = facts("two_socket", tmp_path)
    hosts = {
        # hardware required: the override is validated against the (fixture) sysfs by the module
        "bad_override": host_vars(tmp_path, "bad_override", {}, rdma_ucx_require_hardware=True,
                                  __rdma_ucx_sysfs_root=root, rdma_ucx_hca_overrides={"0": "mlx5_42:1"}),
        "bad_tls": host_vars(tmp_path, "bad_tls", node, rdma_ucx_tls="rc_x,ud_x"),
        "forced_peermem": host_vars(tmp_path, "forced_peermem", node, rdma_ucx_peermem=True),
        "no_hardware": host_vars(tmp_path, "no_hardware", {}, rdma_ucx_require_hardware=True,
                                 __rdma_ucx_sysfs_root=str(tmp_path / "empty")),
    }
    if os.path.exists("/usr/bin/ofed_info") or os.path.exists("/usr/src/ofa_kernel"):
        del hosts["forced_peermem"]
    proc = run_playbook(tmp_path, {"all": {"children": {"kvcr": {"hosts": hosts}}}})
    out = proc.stdout
    assert proc.returncode != 0
    assert "names RDMA device 'mlx5_42', which does not exist" in out
    assert "rdma_ucx_tls='rc_x,ud_x' has no CUDA transport" in out
    if "forced_peermem" in hosts:
        assert "rdma_ucx_peermem=true but no OFED/DOCA stack is installed" in out
    assert "rdma_ucx_require_hardware is true but" in out
    for host in hosts:
        # nothing was written for any failing host
        assert not (tmp_path / host / "etc").exists(), host


@pytest.mark.skipif(shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) is None,
                    reason="ansible-playbook not in the venv")
def test_role_is_idempotent(tmp_path):
    hosts = {"node1": host_vars(tmp_path, "node1", facts("dgx_h100", tmp_path), rdma_ucx_ucx_version="1.21.0",
                                rdma_ucx_iommu_passthrough=False)}
    inventory = {"all": {"children": {"kvcr": {"hosts": hosts}}}}
    first = run_playbook(tmp_path, inventory)
    assert first.returncode == 0, first.stdout[-4000:]
    # The role's whole body again (the fast re-run off): nothing to change.
    second = run_playbook(tmp_path, inventory, "-e", "kvshare_fast_rerun=false")
    assert second.returncode == 0, second.stdout[-4000:]
    recap = [line for line in second.stdout.splitlines() if line.startswith("node1 ")]
    assert recap and "changed=0" in recap[0], recap
    # The fast re-run: the record of the whole run matches, so the body is skipped.
    third = run_playbook(tmp_path, inventory)
    assert third.returncode == 0, third.stdout[-4000:]
    body = third.stdout.split("Run the body of rdma_ucx]", 1)[1]
    assert body.lstrip("* \n").startswith("skipping: [node1]"), body[:400]
