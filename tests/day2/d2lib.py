# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Helpers of the day-2 suite: the sandbox copy's inventory, playbooks, hosts, a client loop.

Drives the copy with tests/lib/sandbox.py (a Sandbox: inventory, playbooks, the frontend) and talks
to its hosts with `podman exec kvshare-d-<host>`.
"""
import os
import threading
import time

from lib.sandbox import Sandbox, copy_env, must, podman_exec
from lib.sandbox_copy import DAY2, DAY2_DIR, build_wheelhouse, mocker
from lib.sandbox_copy import day2_copy as make_copy

INVENTORY = os.path.join(DAY2_DIR, "inventory")
ENV = copy_env(DAY2_DIR)
PINS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pins")
LOGS = os.path.join(DAY2_DIR, "logs")
# Every playbook run's output is kept in LOGS/NN-<log or playbook name>.log.
SB = Sandbox(INVENTORY, env=ENV, log_dir=LOGS)
playbook = SB.playbook


def Inv():
    """A snapshot of the copy's inventory (a Sandbox: the suite waits 180 s for every worker to
    serve, 10 s for the frontend's /health, 20 s for a completion)."""
    return Sandbox(INVENTORY, env=ENV, request_timeout=20, health_timeout=10, serve_timeout=180)


def sh(host, cmd, check=True):
    return podman_exec(DAY2["prefix"] + host, cmd, check)


def unit_times(host, unit):
    """systemd's monotonic timestamps (seconds, the host kernel's CLOCK_MONOTONIC) of a unit."""
    out = sh(host, "systemctl show -p ActiveEnterTimestampMonotonic -p ActiveExitTimestampMonotonic -p MainPID "
             "-p ActiveState %s" % unit)
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {"enter": int(props["ActiveEnterTimestampMonotonic"]) / 1e6,
            "exit": int(props["ActiveExitTimestampMonotonic"]) / 1e6,
            "pid": int(props["MainPID"]), "state": props["ActiveState"]}


def worker_units(inv):
    return dict((key, unit_times(h, "dynamo-worker@%s" % w["name"])) for key, (h, w) in inv.worker_map().items())


def etcdctl(host, args):
    return sh(host, "set -a; . /etc/etcd/etcdctl.env; set +a; etcdctl %s" % args)


class ClientLoop(threading.Thread):
    """Direct-routed requests to every worker, round after round, until stopped.

    Each round reads the frontend's instances, then sends one 2-token completion to every listed
    worker's instance. Records every request (start, end, worker, instance, status) and, per
    round, the workers that did not answer (unlisted or failed).
    """

    # A round every ~0.3 s samples each worker many times per restart (a mocker's restart window
    # is seconds long) at a fifth of the requests 0.05 s pauses sent: they cost CI CPU, not proof.
    def __init__(self, inv, pause=0.25):
        super().__init__(daemon=True)
        self.inv = inv
        self.workers = inv.worker_map()
        self.pause = pause
        self.requests = []
        self.rounds = []
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            t_round = time.monotonic()
            ids = self.inv.instance_map()
            down = []
            for key, (_host, worker) in self.workers.items():
                if not ids.get(key):
                    down.append(key)
                    continue
                iid = ids[key][-1]
                t0 = time.monotonic()
                status, body = self.inv.completion(worker, iid)
                self.requests.append({"t0": t0, "t1": time.monotonic(), "worker": key, "instance": iid,
                                      "status": status, "error": None if status == 200 else str(body)[:200]})
                if status != 200:
                    down.append(key)
            self.rounds.append({"t": t_round, "down": down})
            time.sleep(self.pause)

    def stop(self):
        self.stop_event.set()
        self.join(timeout=60)

    def failures(self, windows):
        """(failures outside their worker's restart windows, failures inside them).

        windows: {"host/name": [(start, end), ...]} (monotonic seconds).
        """
        outside, inside = [], []
        for req in self.requests:
            if req["status"] == 200:
                continue
            spans = windows.get(req["worker"], [])
            if any(req["t0"] <= end and req["t1"] >= start for start, end in spans):
                inside.append(req)
            else:
                outside.append(req)
        return outside, inside

    def max_down(self, since=None, until=None):
        rounds = [r for r in self.rounds if (since is None or r["t"] >= since) and (until is None or r["t"] <= until)]
        return max((len(r["down"]) for r in rounds), default=0)

    def first_ok_after(self, worker, t):
        oks = [r["t1"] for r in self.requests if r["worker"] == worker and r["status"] == 200 and r["t0"] >= t]
        return min(oks) if oks else None


def restart_windows(loop, before, after):
    """Per worker whose unit was restarted between `before` and `after` (worker_units snapshots):
    [(stop began, first successful request after the new start)]."""
    windows = {}
    for key, b in before.items():
        a = after.get(key)
        if a is None or a["enter"] == b["enter"]:
            continue
        end = loop.first_ok_after(key, a["enter"]) or time.monotonic()
        windows[key] = [(a["exit"], end)]
    return windows


__all__ = ["DAY2_DIR", "build_wheelhouse", "make_copy", "mocker", "must"]
