# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""rolling_restart.yml under a concurrent direct-routed client loop: zero failed requests to any
worker not being restarted; every worker restarted, at most one step down at a time."""
import time

import d2lib as D


def _run(stack, record, *args, unit="worker", log=None):
    stack.wait_all_serving()
    before_units, before_ids = D.worker_units(stack), stack.serving()
    loop = D.ClientLoop(stack)
    loop.start()
    time.sleep(2)
    t_start = time.monotonic()
    res, took = D.playbook("playbooks/rolling_restart.yml", "-e", "dynamo_worker_rolling_unit=%s" % unit, *args, log=log)
    t_end = time.monotonic()
    time.sleep(2)
    loop.stop()
    D.must(res, "rolling_restart.yml")
    after_units, after_ids = D.worker_units(stack), stack.serving()
    windows = D.restart_windows(loop, before_units, after_units)
    outside, inside = loop.failures(windows)
    figures = {"requests": len(loop.requests), "failed_outside_restart": len(outside),
               "failed_restarting": len(inside), "restarted": sorted(windows), "seconds": round(took, 1),
               "max_workers_down_at_once": loop.max_down(t_start, t_end)}
    record.update(figures)
    return figures, before_ids, after_ids, outside, loop


def test_rolling_restart_one_worker_at_a_time(stack, record):
    figures, before, after, outside, loop = _run(stack, record, log="rolling-worker")
    assert outside == [], "failed requests to workers not being restarted: %s" % outside[:5]
    assert figures["restarted"] == sorted(stack.worker_map())
    assert set(after) == set(stack.worker_map())
    assert all(after[k] != before[k] for k in after), "a worker kept its instance id: not restarted"
    assert figures["max_workers_down_at_once"] <= 1, loop.rounds
    assert figures["requests"] > 50


def test_rolling_restart_by_gpu_group(stack, record):
    # sb2: mock-c and mock-d share GPU 0: stopped together, started one after the other.
    figures, before, after, outside, loop = _run(stack, record, "--limit", "sb2", unit="gpu", log="rolling-gpu")
    assert outside == [], "failed requests to workers not being restarted: %s" % outside[:5]
    assert figures["restarted"] == ["sb2/mock-c", "sb2/mock-d"]
    assert after["sb3/mock-a"] == before["sb3/mock-a"] and after["sb3/mock-b"] == before["sb3/mock-b"]
    assert figures["max_workers_down_at_once"] <= 2
