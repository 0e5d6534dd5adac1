#!/usr/bin/env python
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Rollout benchmark on the sandbox hosts: ratios against the hand-sequenced floor.

Run after `./dev.sh sandbox` (the stack must be up): `./dev.sh bench` or
`.venv/bin/python bench/bench.py [--runs N] [--skip-scaling]`. Every figure is the median of
--runs runs. Prints a table of ratios and writes reports/bench.json. It changes the sandbox while
it runs (stops/starts services, swaps mocker workers on the mocker host) and restores the
inventory's stack at the end.

  P1  warm site.yml (services stopped, packages installed) / floor (systemctl start in the same
      legal order, readiness polled every 0.1 s)                                  target <= 1.2
  P2  idempotent re-run / warm rollout                                             target <= 0.30
  P3  mocker workers: T(4 on 4 GPUs) / T(1)  target <= 1.3;  T(4 on 1 GPU) / T(1)  expected ~4
  P4  verify.yml wall time minus the requests' own time                           target <= 3 s
  P5  worker kill -9 -> serving again, against RestartSec + that worker's start time
  and rollout time for 1, 2, 4, 8 mocker workers on one host and across two hosts.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
from lib.sandbox import Sandbox, http_json, wait_for  # noqa: E402

POLL = 0.1
# The sandbox: KVSHARE_INVENTORY, else inventories/sandbox (tests/lib/sandbox.py); /health answers
# within 10 s, a completion within 30 s.
SB = Sandbox(health_timeout=10, request_timeout=30)
HV = SB.hostvars
FRONTEND, FRONTEND_URL = SB.frontend, SB.frontend_url
WORKER_HOSTS = SB.group("dynamo_workers")
ssh = SB.ssh


def playbook(*args, json_out=False):
    env = {}
    if json_out:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
        env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.timer"
    res, elapsed = SB.playbook(*args, timeout=None, env=env)
    if res.returncode != 0:
        raise RuntimeError("ansible-playbook %s failed:\n%s" % (" ".join(args), (res.stdout + res.stderr)[-4000:]))
    return elapsed, res.stdout


def http(url, payload=None, timeout=10):
    return http_json(url, payload, timeout=timeout)


def worker_list(host):
    return HV[host].get("dynamo_workers", [])


def serving(host, worker, exclude=()):
    """Instance id when this worker is registered and answers a direct-routed completion."""
    return SB.worker_serving(host, worker, exclude, prompt="hi", max_tokens=1)


def wait(predicate, timeout=600):
    return wait_for(predicate, timeout, interval=POLL)


def stop_stack():
    threads = []
    for host in WORKER_HOSTS:
        names = " ".join("dynamo-worker@%s" % w["name"] for w in worker_list(host))
        threads.append(threading.Thread(target=ssh, args=(host, "systemctl stop %s" % names)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ssh(FRONTEND, "systemctl stop dynamo-frontend")
    wait(lambda: http(FRONTEND_URL + "/live")[0] is None, timeout=60)


def waves(workers):
    sys.path.insert(0, os.path.join(REPO, "collections"))
    from ansible_collections.kvshare.dynamo.plugins.module_utils.workers import start_waves
    return start_waves(workers)


def floor_start():
    """The minimal hand-written sequence: frontend, /live, then each host's waves, readiness polled tightly."""
    t0 = time.monotonic()
    ssh(FRONTEND, "systemctl start dynamo-frontend")
    wait(lambda: http(FRONTEND_URL + "/live")[0] == 200)
    ready = {}

    def host_seq(host):
        workers = {w["name"]: w for w in worker_list(host)}
        for wave in waves(list(workers.values())):
            ssh(host, "systemctl start --no-block %s" % " ".join("dynamo-worker@%s" % n for n in wave))
            for name in wave:
                wait(lambda: serving(host, workers[name]))
                ready["%s/%s" % (host, name)] = time.monotonic() - t0

    threads = [threading.Thread(target=host_seq, args=(h,)) for h in WORKER_HOSTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0, ready


def median(values):
    return statistics.median(values) if values else None


def _ts(text):
    """ansible.posix.json timestamps: 2026-11-30T00:57:43.123456Z."""
    main, frac = text.rstrip("Z").split(".")
    return time.mktime(time.strptime(main, "%Y-%m-%dT%H:%M:%S")) + float("0." + frac)


def wave_seconds(json_stdout):
    """Seconds spent starting and proving workers (wave tasks), from the json callback."""
    data, dummy = json.JSONDecoder().raw_decode(json_stdout[json_stdout.index("{"):])
    total = 0.0
    for play in data.get("plays", []):
        for task in play.get("tasks", []):
            name = task["task"]["name"]
            # Role tasks are named "<role> : <task>".
            if any(key in name for key in ("Start the workers of wave", "Prove ready (registered")):
                dur = task["task"].get("duration", {})
                if dur.get("start") and dur.get("end"):
                    total += _ts(dur["end"]) - _ts(dur["start"])
    return total


def mockers(count, distinct_gpus, prefix="bench"):
    return [{"name": "%s-%d" % (prefix, i), "engine": "mocker", "model": "/opt/kvshare/models/tiny-llama",
             "served_model_name": "tiny-bench", "endpoint": "dyn://dynamo.bench.generate",
             "gpus": [str(i if distinct_gpus else 0)], "system_port": 18181 + i, "rpc_port": 19181 + i,
             "extra_args": ["--speedup-ratio", "10"]} for i in range(count)]


def worker_phase(layout):
    """Apply {host: workers} over the inventory (an overlay inventory: later sources win), run the
    worker play for those hosts, and return the seconds of the wave tasks (start + prove)."""
    overlay = {"all": {"hosts": {}}}
    for host, workers in layout.items():
        # Keep the host's venv (its id depends on the engines it was installed for).
        overlay["all"]["hosts"][host] = {"dynamo_workers": workers,
                                         "dynamo_runtime_engines": sorted({w["engine"] for w in worker_list(host)})}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as fh:
        yaml.safe_dump(overlay, fh)
        path = fh.name
    try:
        dummy, out = playbook("-i", path, "site.yml", "--limit", ",".join([FRONTEND] + sorted(layout)),
                              "--tags", "dynamo_worker", json_out=True)
    finally:
        os.unlink(path)
    return wave_seconds(out)


def verify_overhead():
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "verify.json")
        wall, dummy = playbook("verify.yml", "-e", "kvshare_verify_report=%s" % report, "-e", "kvshare_verify_settle_s=0")
        pairs = json.load(open(report))["pairs"]
    request_s = 0.0
    for pair in pairs:
        rep = pair["report"]
        for key in ("request_a", "request_b"):
            request_s += (rep.get(key) or {}).get("total_s") or 0.0
        for warm in (rep.get("warmup") or {}).values():
            request_s += (warm or {}).get("elapsed_s") or 0.0
    return wall, request_s


def recovery(floor_ready):
    host = next(h for h in WORKER_HOSTS if any(w["engine"] == "vllm" for w in worker_list(h)))
    worker = next(w for w in worker_list(host) if w["engine"] == "vllm")
    old = serving(host, worker)
    pid = ssh(host, "systemctl show -p MainPID --value dynamo-worker@%s" % worker["name"]).strip()
    t0 = time.monotonic()
    ssh(host, "kill -9 %s" % pid)
    wait(lambda: serving(host, worker, exclude=(old,)))
    took = time.monotonic() - t0
    restart_sec = float(ssh(host, "systemctl show -p RestartUSec --value dynamo-worker@%s" % worker["name"])
                        .strip().rstrip("s") or 0)
    # The worker's own start time, from the floor runs (the first worker of its wave starts at ~0).
    start = median([r["%s/%s" % (host, worker["name"])] for r in floor_ready]) if floor_ready else None
    return took, restart_sec, start


def fmt(value, spec="%.2f"):
    return "-" if value is None else spec % value


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs per figure (median)")
    ap.add_argument("--skip-scaling", action="store_true", help="skip the worker-count table")
    ap.add_argument("--scaling", default="1,2,4,8", help="worker counts for the scaling table")
    ap.add_argument("--skip-rollout", action="store_true", help="skip P1/P2 (and P5's reference start time)")
    args = ap.parse_args()
    res = {"runs": args.runs}
    print("== P1/P2: floor, warm rollout, idempotent re-run (%d runs each)" % args.runs, flush=True)
    warm, floor, rerun, floor_ready = [], [], [], []
    for dummy in range(0 if args.skip_rollout else args.runs):
        stop_stack()
        t, ready = floor_start()
        floor.append(t)
        floor_ready.append(ready)
        stop_stack()
        warm.append(playbook("site.yml")[0])
        rerun.append(playbook("site.yml")[0])
    res.update(floor_s=median(floor), warm_rollout_s=median(warm), rerun_s=median(rerun))
    if not args.skip_rollout:
        print("   floor %.1f s, warm rollout %.1f s, re-run %.1f s" % (res["floor_s"], res["warm_rollout_s"],
                                                                       res["rerun_s"]), flush=True)
    print("== P3: mocker workers on one host", flush=True)
    mock_host = next(h for h in WORKER_HOSTS if all(w["engine"] == "mocker" for w in worker_list(h)))
    other_host = next(h for h in WORKER_HOSTS if h != mock_host)
    p3 = {"1": [], "4x4gpu": [], "4x1gpu": []}
    for dummy in range(args.runs):
        for key, layout in (("1", mockers(1, True)), ("4x4gpu", mockers(4, True)), ("4x1gpu", mockers(4, False))):
            worker_phase({mock_host: []})
            p3[key].append(worker_phase({mock_host: layout}))
    res["p3"] = {k: median(v) for k, v in p3.items()}
    print("   worker phase: %s" % json.dumps(res["p3"]), flush=True)
    scaling = {}
    if not args.skip_scaling:
        print("== scaling: %s mocker workers, one host and two hosts" % args.scaling, flush=True)
        for n in [int(x) for x in args.scaling.split(",")]:
            worker_phase({mock_host: [], other_host: []})
            one = worker_phase({mock_host: mockers(n, True)})
            worker_phase({mock_host: [], other_host: []})
            half = mockers(n, True)
            two = worker_phase({mock_host: half[: (n + 1) // 2],
                                other_host: [dict(w, name=w["name"] + "-b") for w in half[(n + 1) // 2:]]})
            scaling[n] = {"one_host_s": one, "two_hosts_s": two}
            print("   N=%d: one host %.1f s, two hosts %.1f s" % (n, one, two), flush=True)
        res["scaling"] = scaling
    print("== restoring the inventory's stack", flush=True)
    worker_phase({mock_host: [], other_host: []})
    playbook("site.yml")
    print("== P4: verify overhead", flush=True)
    p4 = [verify_overhead() for dummy in range(args.runs)]
    res["verify_wall_s"], res["verify_request_s"] = median([w for w, dummy in p4]), median([r for dummy, r in p4])
    print("== P5: recovery after kill -9", flush=True)
    p5 = [recovery(floor_ready) for dummy in range(args.runs)]
    res["recovery_s"] = median([p[0] for p in p5])
    res["restart_sec"] = p5[0][1]
    res["worker_start_s"] = p5[0][2]

    base = res["p3"]["1"] or None

    def ratio(a, b):
        return a / b if a is not None and b else None

    def sec(v):
        return "-" if v is None else "%.1f s" % v

    rows = [
        ("P1", "warm rollout / floor", ratio(res["warm_rollout_s"], res["floor_s"]), "<= 1.2",
         "%s / %s" % (sec(res["warm_rollout_s"]), sec(res["floor_s"]))),
        ("P2", "re-run / warm rollout", ratio(res["rerun_s"], res["warm_rollout_s"]), "<= 0.30",
         "%s / %s" % (sec(res["rerun_s"]), sec(res["warm_rollout_s"]))),
        ("P3", "4 workers on 4 GPUs / 1 worker", res["p3"]["4x4gpu"] / base if base else None, "<= 1.3",
         "%.1f s / %.1f s" % (res["p3"]["4x4gpu"], res["p3"]["1"])),
        ("P3", "4 workers on 1 GPU / 1 worker", res["p3"]["4x1gpu"] / base if base else None, "~ 4",
         "%.1f s / %.1f s" % (res["p3"]["4x1gpu"], res["p3"]["1"])),
        ("P4", "verify overhead (s)", res["verify_wall_s"] - res["verify_request_s"], "<= 3 s",
         "%.1f s wall - %.1f s requests" % (res["verify_wall_s"], res["verify_request_s"])),
        ("P5", "recovery / (RestartSec + start)",
         ratio(res["recovery_s"], (res["restart_sec"] + res["worker_start_s"]) if res["worker_start_s"] else None),
         "~ 1", "%s / (%s + %s)" % (sec(res["recovery_s"]), sec(res["restart_sec"]), sec(res["worker_start_s"]))),
    ]
    res["table"] = [{"id": r[0], "figure": r[1], "value": r[2], "target": r[3], "detail": r[4]} for r in rows]
    print("\n%-3s %-34s %8s  %-8s %s" % ("", "figure", "value", "target", "measured"))
    for r in rows:
        print("%-3s %-34s %8s  %-8s %s" % (r[0], r[1], fmt(r[2]), r[3], r[4]))
    if scaling:
        print("\nworker phase (start + prove) for N mocker workers, one GPU each")
        print("%3s %12s %12s" % ("N", "one host", "two hosts"))
        for n, row in scaling.items():
            print("%3d %11.1fs %11.1fs" % (n, row["one_host_s"], row["two_hosts_s"]))
    os.makedirs(os.path.join(REPO, "reports"), exist_ok=True)
    with open(os.path.join(REPO, "reports", "bench.json"), "w") as fh:
        json.dump(res, fh, indent=2)
    print("\nreport: reports/bench.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
