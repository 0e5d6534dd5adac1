# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.kvcr_process: the engine processes in a worker unit's cgroup, and killing them."""
import signal

import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_process


def test_engine_pids_in_unit_cgroup_only(tmp_path):
    cg = tmp_path / "cg/system.slice/dynamo-worker@kvcr.service"
    (cg / "child").mkdir(parents=True)
    (cg / "cgroup.procs").write_text("100\n101\n")
    (cg / "child" / "cgroup.procs").write_text("102\n")
    proc = tmp_path / "proc"
    for pid, cmd, comm in ((100, b"python3\0-m\0dynamo.vllm\0", "python3"), (101, b"VLLM::EngineCore\0", "VLLM::EngineCor"),
                           (102, b"", "VLLM::EngineCore"), (200, b"VLLM::EngineCore\0", "x")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(cmd)
        (proc / str(pid) / "comm").write_text(comm + "\n")
    found = kvcr_process.engine_pids(str(cg), proc_root=str(proc))
    assert found == [(101, "VLLM::EngineCore"), (102, "VLLM::EngineCore")]  # pid 200 is another unit's


def test_kill_pids():
    sent = []

    def fake_kill(pid, sig):
        if pid == 2:
            raise ProcessLookupError
        sent.append((pid, sig))
    assert kvcr_process.kill_pids([1, 2], kill=fake_kill) == ([1], [2])
    assert sent == [(1, signal.SIGKILL)]


# ---------------------------------------------------------------- cgroup layouts

@pytest.mark.parametrize("sub", ["", "unified", "systemd"])
def test_unit_cgroup_dirs_finds_v2_and_hybrid_layouts(tmp_path, sub):
    cg = tmp_path / sub / "system.slice" / "dynamo-worker@kvcr.service"
    cg.mkdir(parents=True)
    (cg / "cgroup.procs").write_text("12\n")
    assert kvcr_process.unit_cgroup_dirs(str(tmp_path), "/system.slice/dynamo-worker@kvcr.service") == [str(cg).replace("//", "/")]
    assert kvcr_process.unit_cgroup_dirs(str(tmp_path), "") == []
