# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The unit watch's own wait for its background job (plugins/action/dynamo_worker_unit_watch.py).

The wait command runs here for real in /bin/sh against job files written as async_wrapper writes
them; the whole plugin runs in every rollout (roles/dynamo_worker/tasks/wave.yml: async, poll 0).
"""
import json
import os
import subprocess
import threading
import time

from ansible_collections.kvshare.dynamo.plugins.action.dynamo_worker_unit_watch import (
    DONE, RUNNING, parse_wait, progress_line, wait_command)

RUNNING_JOB = {"started": True, "finished": False, "ansible_job_id": "j1"}


def write_job(path, data):
    """As async_wrapper's jwrite: the whole file at once (a rename)."""
    with open(str(path) + ".tmp", "w") as handle:
        handle.write(json.dumps(data))
    os.rename(str(path) + ".tmp", str(path))


def sh(command):
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True).stdout


def test_a_running_job_is_waited_for_one_slice_then_reported_running(tmp_path):
    job = tmp_path / "j1"
    write_job(job, RUNNING_JOB)
    t0 = time.monotonic()
    out = sh(wait_command(str(job), [], 0.6))
    took = time.monotonic() - t0
    assert out.splitlines()[0] == RUNNING
    assert parse_wait(out) == (False, None, [])
    assert took >= 0.5, "the wait returned before its slice (%.2f s) with the job still running" % took
    assert job.exists(), "a running job's file was removed"


def test_the_slice_is_a_clock_not_a_count_of_rounds(tmp_path):
    """A loaded host stretches every round (here each round sleeps 5 s): the wait still returns
    after its slice, so the progress lines keep their interval (issue 34: at least every 10 s)."""
    job = tmp_path / "j1"
    write_job(job, RUNNING_JOB)
    t0 = time.monotonic()
    out = sh(wait_command(str(job), [], 1.0, step_s=5))
    took = time.monotonic() - t0
    assert out.splitlines()[0] == RUNNING
    assert took < 4, "a 1 s slice took %.1f s: the wait counted rounds" % took


def test_a_job_that_ends_mid_slice_is_read_at_once_and_its_file_removed(tmp_path):
    job = tmp_path / "j1"
    write_job(job, RUNNING_JOB)
    result = {"changed": True, "ready": ["a"], "started_units": ["a"], "elapsed_s": 0.3}
    timer = threading.Timer(0.3, write_job, (job, result))
    timer.start()
    t0 = time.monotonic()
    out = sh(wait_command(str(job), [], 30))
    took = time.monotonic() - t0
    timer.join()
    ended, text, states = parse_wait(out)
    assert ended and states == [] and json.loads(text) == result
    assert took < 15, "the wait did not end with the job (%.1f s of a 30 s slice)" % took
    assert not job.exists(), "the job file was left behind"


def test_a_job_that_failed_in_the_wrapper_counts_as_ended(tmp_path):
    job = tmp_path / "j1"
    write_job(job, {"failed": 1, "finished": 1, "msg": "Timeout exceeded"})
    ended, text, dummy = parse_wait(sh(wait_command(str(job), [], 5)))
    assert ended and json.loads(text)["msg"] == "Timeout exceeded"


def test_a_missing_job_file_is_a_failed_wait_not_a_result(tmp_path):
    out = sh(wait_command(str(tmp_path / "gone"), [], 5))
    assert out.splitlines() == [DONE]
    assert parse_wait(out) == (True, None, [])
    assert parse_wait("") == (True, None, [])
    assert parse_wait("sh: 1: syntax error\n") == (True, None, [])


def test_units_states_are_read_in_order_for_the_progress_line(tmp_path):
    job = tmp_path / "j 1"
    write_job(job, RUNNING_JOB)
    units = ["dynamo-worker@a.service", "dynamo-worker@b'c.service"]
    command = wait_command(str(job), units, 0.2)
    # The unit names reach systemctl quoted, each as one argument.
    assert "systemctl is-active dynamo-worker@a.service 'dynamo-worker@b'\"'\"'c.service'" in command
    out = RUNNING + "\nactive\nactivating\n"
    ended, text, states = parse_wait(out)
    assert (ended, text, states) == (False, None, ["active", "activating"])
    line = progress_line("node-1", 10.4, 370, units, states)
    assert line == ("WATCH node-1: 10 s of at most 370 s; dynamo-worker@a.service active, "
                    "dynamo-worker@b'c.service activating")
    assert progress_line("node-1", 3, 60, units, []).endswith("no unit state read")
