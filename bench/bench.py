#!/usr/bin/env python
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Rollout benchmark: ratios against the hand-sequenced floor, and how re-runs and worker starts scale.

Run after `./dev.sh sandbox` (the stack must be up): `./dev.sh bench` or
`.venv/bin/python bench/bench.py [--runs N] [--only rollout,verify,recovery,hosts,workers]`. Every
figure is the median of --runs runs (default 3). Prints the tables and writes reports/bench.json.
The first three parts change the sandbox while they run (stop/start services, kill a worker; with
the stack stopped, restart maru-server when its pool lacks room for the next run's worker starts,
then roll out untimed) and leave the inventory's stack serving; the scaling parts run on a copy of
their own.

  P1  warm site.yml (services stopped, packages installed) / floor (systemctl start in the same
      legal order, readiness polled every 0.1 s)            target <= 1.2 (median), each run <= 1.3
  P1a the floor's sequence run by ansible-core alone (a playbook of builtin modules: a start and a
      readiness task per step, polled on the host) / floor: what any Ansible rollout pays here
  P2  idempotent re-run / warm rollout: 0 changed, no service restarted       target <= 0.30
      with the re-run's time per role (json callback task durations)
  P4  verify.yml wall time minus the requests' own time                       target <= 3 s
  P5  worker kill -9 -> serving again, against RestartSec + that worker's start time + 2 s, where
      the start time is this restart's own (its unit's ExecMainStart to its first answer)
                                                                              target <= 1.1
      P5' is the same without the stop (kill -> ExecMainStart, less RestartSec): the sandbox's
      containers run cgroup v1, where systemd waits out TimeoutStopSec after a kill -9
  hosts    re-run time on a mocker-only copy (127.0.14.N, containers kvshare-b-*) of 3, 6 and 9
           hosts, forks >= hosts, 0 changed                                    target T(9)/T(3) <= 1.5
           H0: ansible-core alone on the same hosts and forks (a play of 1, then 10, ping tasks,
           facts from the cache): the ratio any playbook that touches every host pays here, and
           the machine CPU a task result costs, which prices the re-run's per-host CPU in task results
  workers  N = 1, 4, 8 mockers (a real start time: --startup-time) on one host of the copy, each on
           a GPU of its own and all on one GPU; the time is the readiness tasks' durations (unit
           watch + proof, every wave; json callback)
                                            target separate <= 1.3 x N=1; one GPU ~ N x N=1 (serial)
           Each run also checks the watch's own account of the order: one wave per worker on one
           GPU, each started once the one before had a ready /health. A mocker's /health is ready
           as its process starts (DYN_SYSTEM_STARTING_HEALTH_STATUS=ready; its simulated engine
           start comes after), so one GPU's mockers start one after another but overlap their
           --startup-time; a vLLM engine's /health is ready once the engine is.
"""
import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
from lib.sandbox import Sandbox, http_json, must, wait_for  # noqa: E402
from lib.sandbox_copy import BENCH, BENCH_DIR, make_copy, mocker  # noqa: E402

POLL = 0.1
PARTS = ("rollout", "verify", "recovery", "hosts", "workers")
# The sandbox: KVSHARE_INVENTORY, else inventories/sandbox (tests/lib/sandbox.py); /health answers
# within 10 s, a completion within 30 s.
SB = Sandbox(health_timeout=10, request_timeout=30)
JSON_ENV = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.timer"}
READINESS_MODULES = ("dynamo_worker_unit_watch", "dynamo_workers_ready")


def run(sb, *args, json_out=False):
    """ansible-playbook on sandbox `sb`: (seconds, the json callback's document or None)."""
    res, elapsed = sb.playbook(*args, timeout=None, env=JSON_ENV if json_out else None)
    must(res, "ansible-playbook " + " ".join(args))
    if not json_out:
        return elapsed, None
    doc, dummy = json.JSONDecoder().raw_decode(res.stdout[res.stdout.index("{"):])
    return elapsed, doc


def cpu_now():
    """(this process's reaped children's CPU seconds, the whole machine's busy CPU seconds): the
    controller is ansible-playbook, a child; the machine adds the sandbox hosts, which share it."""
    children = os.times()
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return children.children_user + children.children_system, (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_since(before, wall):
    """{controller_cpu_s, machine_cpu_s, machine_busy}: CPU seconds since cpu_now() gave `before`."""
    after = cpu_now()
    machine = after[1] - before[1]
    return {"controller_cpu_s": round(after[0] - before[0], 1), "machine_cpu_s": round(machine, 1),
            "machine_busy": round(machine / (wall * (os.cpu_count() or 1)), 2)}


def changed_hosts(doc):
    return {host: stats["changed"] for host, stats in doc["stats"].items() if stats.get("changed")}


def _ts(text):
    """ansible.posix.json timestamps: 2026-11-30T00:57:43.123456Z."""
    main, frac = text.rstrip("Z").split(".")
    return time.mktime(time.strptime(main, "%Y-%m-%dT%H:%M:%S")) + float("0." + frac)


def tasks_of(doc):
    """(play, task) of every task in a json callback document."""
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            yield play, task


def task_seconds(task):
    """A task's duration from the json callback (None when it has none)."""
    dur = task["task"].get("duration", {})
    if not (dur.get("start") and dur.get("end")):
        return None
    return _ts(dur["end"]) - _ts(dur["start"])


def role_profile(doc):
    """Seconds per role (tasks outside roles under their play's name) from the tasks' durations."""
    out = {}
    for play, task in tasks_of(doc):
        took = task_seconds(task)
        if took is None:
            continue
        name = task["task"]["name"]
        role = name.split(" : ", 1)[0].replace("kvshare.dynamo.", "") if " : " in name else "play: " + play["play"]["name"]
        out[role] = out.get(role, 0.0) + took
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# Actions the controller runs alone (no module run on a host).
CONTROLLER_ACTIONS = {"assert", "checks", "set_fact", "debug", "fail", "include_tasks", "include_role", "import_tasks",
                      "validate_argument_spec", "meta", "include_vars", "report_json", "set_stats"}
KINDS = (("watch", "the unit watch: engines start, wave after wave, until /health is ready (what the floor does)"),
         ("proof", "the proof through the frontend: the first completion of every started worker"),
         ("converged", "converged: compare with the last run and record"),
         ("host", "other module runs on the hosts"),
         ("controller", "tasks the controller runs alone (asserts, set_fact, includes, argument specs)"),
         ("skipped", "tasks skipped on every host"),
         ("outside", "outside tasks: start-up, play boundaries, the gaps between tasks"))


def task_kinds(doc, wall):
    """A run's seconds by kind of task (KINDS), from the json callback's task durations: each moment
    of the run counts once, for the first kind (in KINDS' order) of the tasks running then, so tasks
    that overlap (hosts running ahead: the workers play's strategy free) are not counted twice."""
    order = [kind for kind, dummy in KINDS if kind != "outside"]
    out = dict((kind, 0.0) for kind, dummy in KINDS)
    counts = dict((kind, 0) for kind, dummy in KINDS)
    spans = []
    for dummy, task in tasks_of(doc):
        took = task_seconds(task)
        if took is None:
            continue
        results = list(task["hosts"].values())
        actions = set((r.get("action") or "").rsplit(".", 1)[-1] for r in results)
        if results and all(r.get("skipped") for r in results):
            kind = "skipped"
        elif "dynamo_worker_unit_watch" in actions:
            kind = "watch"
        elif "dynamo_workers_ready" in actions:
            kind = "proof"
        elif "converged" in actions:
            kind = "converged"
        elif actions and actions <= CONTROLLER_ACTIONS:
            kind = "controller"
        else:
            kind = "host"
        counts[kind] += 1
        start = _ts(task["task"]["duration"]["start"])
        spans.append((start, start + took, order.index(kind)))
    points = sorted(set([a for a, b, k in spans] + [b for a, b, k in spans]))
    for begin, end in zip(points, points[1:]):
        running = [k for a, b, k in spans if a <= begin and b >= end]
        if running:
            out[order[min(running)]] += end - begin
    out["outside"] = max(wall - sum(out.values()), 0.0)
    return out, counts


def readiness_seconds(doc, host):
    """The readiness tasks' durations (json callback) for `host`'s workers, summed over the waves:
    what the rollout waits, the start of the background watch and the notice of its end included
    (the modules' own elapsed_s left out Ansible's poll of the watch: up to 5 s until 2026-12-05)."""
    total = 0.0
    for dummy, task in tasks_of(doc):
        res = task["hosts"].get(host) or {}
        if (res.get("action") or "").rsplit(".", 1)[-1] in READINESS_MODULES and not res.get("skipped"):
            total += task_seconds(task) or 0.0
    return total


def watch_results(doc, host):
    """The results of the unit watches that ran on `host`."""
    for dummy, task in tasks_of(doc):
        res = task["hosts"].get(host) or {}
        if (res.get("action") or "").rsplit(".", 1)[-1] == "dynamo_worker_unit_watch" and not res.get("skipped"):
            yield res


def started_workers(doc, host):
    """The workers the run's unit watches started or restarted on `host`."""
    return sorted(set(name for res in watch_results(doc, host) for name in res.get("started_units") or []))


def start_order(doc, host):
    """The unit watch's own account of `host`'s start waves: (waves, every unit of wave k+1 started
    after every unit of wave k had a ready /health)."""
    units = [u for res in watch_results(doc, host) for u in res.get("units") or [] if u.get("started_after_s") is not None]
    waves = sorted(set(u["wave"] for u in units))
    ordered = True
    for before, after in zip(waves, waves[1:]):
        ready_at = max(u["started_after_s"] + (u["ready_after_s"] or 0.0) for u in units if u["wave"] == before)
        started_at = min(u["started_after_s"] for u in units if u["wave"] == after)
        ordered = ordered and started_at >= ready_at - 0.01
    return len(waves), ordered


def median(values):
    return statistics.median(values) if values else None


def medians(runs):
    """{key: the median of the runs' values} for a list of dicts with the same keys."""
    return dict((key, median([run[key] for run in runs])) for key in runs[0])


def wait(predicate, timeout=600):
    return wait_for(predicate, timeout, interval=POLL)


# --- P1, P2, P4, P5 on the sandbox ---------------------------------------------------------------
def worker_list(host):
    return SB.hostvars[host].get("dynamo_workers", [])


def serving(host, worker, exclude=()):
    """Instance id when this worker is registered and answers a direct-routed completion."""
    return SB.worker_serving(host, worker, exclude, prompt="hi", max_tokens=1)


def main_pids():
    """MainPID of the frontend and every worker unit: a re-run that restarts one changes it."""
    pids = {}
    for host in SB.group("dynamo_workers") + [SB.frontend]:
        units = ["dynamo-frontend"] if host == SB.frontend else []
        units += ["dynamo-worker@%s" % w["name"] for w in worker_list(host)]
        for unit in units:
            pids["%s/%s" % (host, unit)] = SB.ssh(host, "systemctl show -p MainPID --value %s" % unit).strip()
    return pids


def contract_default(name):
    """A service default as the stack contract (roles/kvshare) defines it."""
    import yaml
    with open(os.path.join(REPO, "roles", "kvshare", "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)["kvshare_service_defaults"][name]


def pool_free(host):
    """(free, total) bytes of the Maru pool on `host`, as its resource manager reports them."""
    port = SB.hostvars[host].get("maru_pool_rm_port") or contract_default("maru_pool_rm_port")
    out = SB.ssh(host, "maru_test_client -H %s -p %s stats" % (SB.address(host), port))
    for line in out.splitlines():
        # "<device>  FS_DAX  <total> (2.00 GiB)  <free> (122.00 MiB)  <align>  <used %>"
        found = re.match(r"^/\S+\s+\S+\s+(\d+)\s+\([^)]*\)\s+(\d+)\s", line.strip())
        if found:
            return int(found.group(2)), int(found.group(1))
    raise AssertionError("no pool in maru_test_client stats on %s: %r" % (host, out))


def pool_room_needed(cycles):
    """Bytes `cycles` starts of the Maru workers take from their pools: upstream's maru-server keeps
    a restarted worker's region (docs/maru.md), so each start of a worker allocates its pool size
    anew (plus a little for its scheduler page)."""
    sys.path.insert(0, os.path.join(REPO, "collections"))
    from ansible_collections.kvshare.dynamo.plugins.module_utils.maru import parse_size
    sizes = []
    for host, worker in SB.workers():
        if worker.get("kv_pool"):
            pool = worker["kv_pool"] if isinstance(worker["kv_pool"], dict) else {"host": host}
            sizes.append(parse_size(SB.hostvars[pool.get("host", host)].get("maru_pool_pool_size", "1G")))
    return int(cycles * sum(sizes) * 1.05)


def ensure_pool_room(cycles):
    """Give each Maru pool room for `cycles` more starts of its workers, untimed: with the stack
    stopped, restart maru-server (which frees every region) and roll out again, so the next timed
    run finds the pool service recorded as converged. Without it the runs after about the fifth
    stop/start cycle start their workers against a full pool (every allocation fails)."""
    needed = pool_room_needed(cycles)
    pools = [host for host in SB.group("maru_pool") if pool_free(host)[0] < needed]
    if not pools:
        return
    stop_stack()
    for host in pools:
        SB.ssh(host, "systemctl restart maru-server")
        wait(lambda: len(set(pool_free(host))) == 1, timeout=120)  # free == total: one stats call a poll
    run(SB, "site.yml")
    print("   (untimed: the Maru pool of %s emptied by a maru-server restart, then site.yml)" % ", ".join(pools),
          flush=True)


def stop_stack():
    threads = []
    for host in SB.group("dynamo_workers"):
        names = " ".join("dynamo-worker@%s" % w["name"] for w in worker_list(host))
        threads.append(threading.Thread(target=SB.ssh, args=(host, "systemctl stop %s" % names)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    SB.ssh(SB.frontend, "systemctl stop dynamo-frontend")
    wait(lambda: http_json(SB.frontend_url + "/live", timeout=10)[0] is None, timeout=60)


def waves(workers):
    sys.path.insert(0, os.path.join(REPO, "collections"))
    from ansible_collections.kvshare.dynamo.plugins.module_utils.workers import start_waves
    return start_waves(workers)


def floor_start():
    """The minimal hand-written sequence: frontend, /live, then each host's waves, readiness polled tightly."""
    t0 = time.monotonic()
    SB.ssh(SB.frontend, "systemctl start dynamo-frontend")
    wait(lambda: http_json(SB.frontend_url + "/live", timeout=10)[0] == 200)
    ready = {}

    def host_seq(host):
        workers = {w["name"]: w for w in worker_list(host)}
        for wave in waves(list(workers.values())):
            SB.ssh(host, "systemctl start --no-block %s" % " ".join("dynamo-worker@%s" % n for n in wave))
            for name in wave:
                wait(lambda: serving(host, workers[name]))
                ready["%s/%s" % (host, name)] = time.monotonic() - t0

    threads = [threading.Thread(target=host_seq, args=(h,)) for h in SB.group("dynamo_workers")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0, ready


@contextlib.contextmanager
def playbook_file(plays):
    """A temporary playbook holding `plays` (JSON is YAML), removed afterwards."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
        json.dump(plays, handle)
    try:
        yield handle.name
    finally:
        os.unlink(handle.name)


# The floor's sequence run by ansible-core alone: one play per step, builtin modules, a task per
# start and a task per wave's readiness (one module run polling on the host, as the worker role's
# watch does). What any Ansible rollout of these services pays beside the floor on this machine.
POLL_HEALTH = "\n".join([
    "import json, sys, time, urllib.request",
    "def ready(url, want_status):",
    "    try:",
    "        with urllib.request.urlopen(url, timeout=2) as r:",
    "            body = json.loads(r.read() or b'{}') if want_status else {}",
    "            return r.status == 200 and (not want_status or body.get('status') in (None, 'ready', 'healthy'))",
    "    except Exception:",
    "        return False",
    "end = time.monotonic() + 600",
    "while not all(ready(u, sys.argv[1] == 'ready') for u in sys.argv[2:]):",
    "    if time.monotonic() > end:",
    "        sys.exit('not ready: ' + ' '.join(sys.argv[2:]))",
    "    time.sleep(" + str(POLL) + ")"])


def ansible_floor_plays():
    """The floor (floor_start) as a playbook of builtin modules: the frontend and its /live, then
    each host's waves, each started once the one before answered a ready /health."""
    tasks = []
    for host in SB.group("dynamo_workers"):
        workers = {w["name"]: w for w in worker_list(host)}
        for number, wave in enumerate(waves(list(workers.values())), 1):
            urls = ["http://%s:%s/health" % (SB.address(host), workers[name]["system_port"]) for name in wave]
            units = ["dynamo-worker@%s" % name for name in wave]
            when = "inventory_hostname == %s" % json.dumps(host)
            tasks += [{"name": "Start wave %d of %s" % (number, host), "when": when, "changed_when": True,
                       "ansible.builtin.command": {"argv": ["systemctl", "start", "--no-block"] + units}},
                      {"name": "Wait for wave %d of %s" % (number, host), "when": when, "changed_when": False,
                       "ansible.builtin.command": {"argv": ["python3", "-c", POLL_HEALTH, "ready"] + urls}}]
    frontend = [{"name": "Start the frontend", "ansible.builtin.systemd_service": {"name": "dynamo-frontend", "state": "started"}},
                {"name": "Wait for /live", "changed_when": False, "ansible.builtin.command": {
                    "argv": ["python3", "-c", POLL_HEALTH, "200", SB.frontend_url + "/live"]}}]
    return [{"name": "Ansible floor: the frontend", "hosts": SB.frontend, "gather_facts": False, "tasks": frontend},
            {"name": "Ansible floor: the workers, wave after wave on each host", "hosts": "dynamo_workers",
             "gather_facts": False, "strategy": "free", "tasks": tasks}]


def ansible_floor_start():
    """ansible_floor_plays() run, then every worker polled until it serves (the floor's end)."""
    with playbook_file(ansible_floor_plays()) as path:
        t0 = time.monotonic()
        run(SB, path)
        for host in SB.group("dynamo_workers"):
            for worker in worker_list(host):
                wait(lambda: serving(host, worker))
        return time.monotonic() - t0


def rollout(runs):
    """P1 and P2: per run the floor, a warm site.yml, then a re-run that must change and restart nothing."""
    floor, warm, rerun, floor_ready, profiles, kinds = [], [], [], [], [], []
    floor_cpu, warm_cpu = [], []
    ansible_floor, ansible_floor_cpu = [], []
    for number in range(runs):
        ensure_pool_room(2)
        stop_stack()
        before = cpu_now()
        took, ready = floor_start()
        floor_cpu.append(cpu_since(before, took))
        floor.append(took)
        floor_ready.append(ready)
        stop_stack()
        before = cpu_now()
        took = ansible_floor_start()
        ansible_floor_cpu.append(cpu_since(before, took))
        ansible_floor.append(took)
        stop_stack()
        before = cpu_now()
        took, doc = run(SB, "site.yml", json_out=True)
        warm_cpu.append(cpu_since(before, took))
        warm.append(took)
        kinds.append(task_kinds(doc, took))
        before = main_pids()
        took, doc = run(SB, "site.yml", json_out=True)
        assert not changed_hosts(doc), "re-run %d changed %s" % (number + 1, changed_hosts(doc))
        after = main_pids()
        assert after == before, "re-run %d restarted %s" % (number + 1, sorted(k for k in before if after[k] != before[k]))
        rerun.append(took)
        profiles.append(role_profile(doc))
        print("   run %d: floor %.1f s, the floor by ansible-core alone %.1f s, warm rollout %.1f s, re-run %.1f s"
              " (0 changed, 0 restarted)" % (number + 1, floor[-1], ansible_floor[-1], warm[-1], took), flush=True)
    roles = sorted({r for p in profiles for r in p})
    profile = dict(sorted(((r, median([p.get(r, 0.0) for p in profiles])) for r in roles), key=lambda kv: -kv[1]))
    return {"floor_s": median(floor), "warm_rollout_s": median(warm), "rerun_s": median(rerun),
            "floor_runs_s": floor, "warm_runs_s": warm, "rerun_runs_s": rerun, "rerun_profile_s": profile,
            "floor_ready": floor_ready,
            "floor_cpu": medians(floor_cpu), "warm_cpu": medians(warm_cpu),
            "ansible_floor_s": median(ansible_floor), "ansible_floor_runs_s": ansible_floor,
            "ansible_floor_cpu": medians(ansible_floor_cpu),
            "warm_kinds_s": dict((k, median([run_kinds[0][k] for run_kinds in kinds])) for k, dummy in KINDS),
            "warm_kind_tasks": kinds[0][1] if kinds else {}}


def verify_overhead():
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "verify.json")
        wall, dummy = run(SB, "verify.yml", "-e", "kvshare_verify_report=%s" % report, "-e", "kvshare_verify_settle_s=0")
        with open(report) as handle:
            pairs = json.load(handle)["pairs"]
    return wall, request_seconds(pairs)


def request_seconds(pairs):
    """The seconds verify.yml's requests (warm-ups, A's, B's) took, overlaps counted once: the two
    warm-ups of a pair go out together, and pairs that share nothing run side by side. Each request's
    interval is [started_at, started_at + its time] (epoch seconds, the kv_share_check report)."""
    spans = []
    for pair in pairs:
        rep = pair["report"]
        reqs = [(rep.get(key) or {}, "total_s") for key in ("request_a", "request_b")]
        reqs += [(warm or {}, "elapsed_s") for warm in (rep.get("warmup") or {}).values()]
        for req, took in reqs:
            if req.get("started_at") is not None and req.get(took):
                spans.append((req["started_at"], req["started_at"] + req[took]))
    total, end = 0.0, None
    for lo, hi in sorted(spans):
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total


# The unit's own timestamps split P5 into its phases. CLOCK_MONOTONIC is one clock for this machine
# and the sandbox containers (no time namespace), so systemd's *TimestampMonotonic values compare
# directly with time.monotonic() here.
UNIT_TIMESTAMPS = ("ExecMainExitTimestampMonotonic", "InactiveEnterTimestampMonotonic",
                   "InactiveExitTimestampMonotonic", "ExecMainStartTimestampMonotonic",
                   "ActiveEnterTimestampMonotonic")


def recovery(floor_ready):
    """P5 once: kill -9 a vLLM worker; seconds until it serves again, split by the unit's timestamps."""
    host = next(h for h in SB.group("dynamo_workers") if any(w["engine"] == "vllm" for w in worker_list(h)))
    worker = next(w for w in worker_list(host) if w["engine"] == "vllm")
    unit = "dynamo-worker@%s" % worker["name"]
    old = wait(lambda: serving(host, worker))
    pid = SB.ssh(host, "systemctl show -p MainPID --value %s" % unit).strip()
    t0 = time.monotonic()
    SB.ssh(host, "kill -9 %s" % pid)
    wait(lambda: serving(host, worker, exclude=(old,)))
    took = time.monotonic() - t0
    props = dict(line.split("=", 1) for line in SB.ssh(
        host, "systemctl show -p RestartUSec -p %s %s" % (" -p ".join(UNIT_TIMESTAMPS), unit)).split())
    restart_sec = float(props.get("RestartUSec", "0").rstrip("s") or 0)
    # Seconds after the kill at which the unit passed each point (those before the kill are left out:
    # a unit in auto-restart never enters inactive, so that stamp may be the last stop's).
    points = {k[:-len("TimestampMonotonic")]: int(props[k]) / 1e6 - t0 for k in UNIT_TIMESTAMPS
              if int(props.get(k) or 0) / 1e6 > t0}
    # The engine's start measured on this restart: its process's start to its first answer.
    start = took - points["ExecMainStart"] if "ExecMainStart" in points else None
    floor_start = median([r["%s/%s" % (host, worker["name"])] for r in floor_ready]) if floor_ready else None
    return {"recovery_s": took, "restart_sec": restart_sec, "worker_start_s": start,
            "floor_worker_start_s": floor_start, "points_s": points}


# --- scaling, on a mocker-only copy --------------------------------------------------------------
# The sandbox's mockers run at --speedup-ratio 10, which shortens their simulated timings; the
# bench's run at 1. Measured 2026-12-01 (--startup-time 4): one worker ready in 2.2 s at ratio 1
# against 1.3 s at 10, so the readiness figure sees only part of the simulated start (not explained yet).
STARTUP_ARGS = ["--speedup-ratio", "1", "--startup-time"]


def bench_mockers(count, distinct_gpus, startup):
    return [mocker("bench-%d" % i, str(i if distinct_gpus else 0), 100 + i, STARTUP_ARGS + [str(startup)])
            for i in range(count)]


# The same hosts and forks with ansible-core alone: BARE_TASKS trivial tasks (ansible.builtin.ping,
# a module run each) on every host, facts from the same cache. What any playbook that touches each
# host pays on this machine, where the hosts share the controller's cores.
BARE_TASKS = (1, 10)


def bare_runs(sb, forks, runs):
    """{tasks per host: {s, runs_s, controller_cpu_s, machine_cpu_s}} of the bare playbooks."""
    out = {}
    for count in BARE_TASKS:
        plays = [{"name": "Bare ansible-core (bench): %d module run(s) per host" % count, "hosts": "sandbox",
                  "gather_facts": True, "tasks": [{"name": "Module run %d" % (n + 1), "ansible.builtin.ping": None}
                                                  for n in range(count)]}]
        times, cpu = [], []
        with playbook_file(plays) as path:
            for dummy in range(runs):
                before = cpu_now()
                took = run(sb, path, forks)[0]
                cpu.append(cpu_since(before, took))
                times.append(took)
        out[count] = dict(medians(cpu), s=median(times), runs_s=times)
    print("   bare ansible-core on the same hosts: %s" % "; ".join(
        "%d task(s) a host %.1f s (CPU s controller %.1f, machine %.1f)"
        % (count, row["s"], row["controller_cpu_s"], row["machine_cpu_s"]) for count, row in out.items()), flush=True)
    return out


def host_scaling(sizes, runs, startup):
    """{size: re-run seconds (median) and runs}; the copy grows in place (create.yml adds the hosts)."""
    out, sb = {}, None
    for size in sizes:
        make_copy(BENCH_DIR, BENCH["subnet"], BENCH["prefix"], mockers_only=True, extra_hosts=size - 3,
                  mocker_args=STARTUP_ARGS + [str(startup)])
        sb = Sandbox.of_copy(BENCH_DIR, request_timeout=30, health_timeout=10)
        assert len(sb.group("sandbox")) == size, sb.group("sandbox")
        forks = "--forks=%d" % max(20, size)
        must(sb.playbook("sandbox/create.yml", timeout=None)[0], "sandbox/create.yml (%d hosts)" % size)
        converge = run(sb, "site.yml", forks)[0]
        times, cpu = [], []
        for number in range(runs):
            before = cpu_now()
            took, doc = run(sb, "site.yml", forks, json_out=True)
            cpu.append(cpu_since(before, took))
            assert not changed_hosts(doc), "%d hosts, re-run %d changed %s" % (size, number + 1, changed_hosts(doc))
            times.append(took)
        out[size] = {"rerun_s": median(times), "runs_s": times, "converge_s": converge, "cpu": cpu,
                     "bare": bare_runs(sb, forks, runs) if runs else {}}
        out[size].update((key, median([c[key] for c in cpu])) for key in ("controller_cpu_s", "machine_cpu_s", "machine_busy"))
        print("   %d hosts: converge %.1f s (untimed for the ratio), re-runs %s s (0 changed); CPU s controller %s,"
              " machine %s (busy %s of %d cores)"
              % (size, converge, ", ".join("%.1f" % t for t in times), out[size]["controller_cpu_s"],
                 out[size]["machine_cpu_s"], out[size]["machine_busy"], os.cpu_count() or 1), flush=True)
    return out, sb


def worker_scaling(sb, counts, runs, startup):
    """{layout: {N: readiness seconds}} on the copy's last host: each run from every worker stopped."""
    host = sb.group("dynamo_workers")[-1]
    out = {"host": host, "separate": {}, "one_gpu": {}}
    for key, distinct in (("separate", True), ("one_gpu", False)):
        for count in counts:
            layout = bench_mockers(count, distinct, startup)
            # Extra vars: an overlay inventory would lose to the copy's host_vars/<host>.yml. Every
            # host of the run gets its own list (the frontend host none; --limit keeps the rest out).
            extra = {"kvshare_bench_workers": {host: layout},
                     "dynamo_workers": "{{ kvshare_bench_workers[inventory_hostname] | default([]) }}"}
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
                json.dump(extra, handle)
                path = handle.name
            times = []
            try:
                for dummy in range(runs):
                    sb.ssh(host, "systemctl stop 'dynamo-worker@*'")
                    doc = run(sb, "site.yml", "--limit", "%s,%s" % (sb.frontend, host), "--tags", "dynamo_worker",
                              "-e", "@" + path, json_out=True)[1]
                    names = started_workers(doc, host)
                    assert names == sorted(w["name"] for w in layout), "started %s, not the bench's workers" % names
                    times.append(readiness_seconds(doc, host))
                    waves, ordered = start_order(doc, host)
                    assert waves == (1 if distinct else count) and ordered, \
                        "%s, N=%d: %d start waves, in order: %s" % (key, count, waves, ordered)
            finally:
                os.unlink(path)
            out[key][count] = {"ready_s": median(times), "runs_s": times, "start_waves": 1 if distinct else count}
            print("   %s, N=%d: %s s (%d start wave(s), each started once the one before had a ready /health)"
                  % (key, count, ", ".join("%.1f" % t for t in times), out[key][count]["start_waves"]), flush=True)
    # The host's own workers again (the bench-* units stay stopped).
    sb.ssh(host, "systemctl stop 'dynamo-worker@bench-*'")
    run(sb, "site.yml", "--limit", "%s,%s" % (sb.frontend, host), "--tags", "dynamo_worker")
    return out


# --- report --------------------------------------------------------------------------------------
def fmt(value, spec="%.2f"):
    return "-" if value is None else spec % value


def ratio(a, b):
    return a / b if a is not None and b else None


def sec(v):
    return "-" if v is None else "%.1f s" % v


def each_ratio(tops, bottoms):
    """Each run's own ratio, side by side (its two sides measured back to back)."""
    return ", ".join(fmt(ratio(a, b)) for a, b in zip(tops, bottoms))


def table(res):
    rows = []
    if "rollout" in res:
        ro = res["rollout"]
        # The ratio of the medians, and each run's own ratio: the engines' start time drifts with
        # the machine's load over a session, and a run's two sides are measured back to back.
        rows += [("P1", "warm rollout / floor", ratio(ro["warm_rollout_s"], ro["floor_s"]), "<= 1.2",
                  "%s / %s; per run %s" % (sec(ro["warm_rollout_s"]), sec(ro["floor_s"]),
                                           each_ratio(ro["warm_runs_s"], ro["floor_runs_s"]))),
                 ("P1a", "the floor by ansible-core alone / floor", ratio(ro.get("ansible_floor_s"), ro["floor_s"]), "-",
                  "%s / %s; per run %s" % (sec(ro.get("ansible_floor_s")), sec(ro["floor_s"]),
                                           each_ratio(ro.get("ansible_floor_runs_s", []), ro["floor_runs_s"]))),
                 ("P2", "re-run / warm rollout", ratio(ro["rerun_s"], ro["warm_rollout_s"]), "<= 0.30",
                  "%s / %s; per run %s" % (sec(ro["rerun_s"]), sec(ro["warm_rollout_s"]),
                                           each_ratio(ro["rerun_runs_s"], ro["warm_runs_s"])))]
    if "verify" in res:
        v = res["verify"]
        rows.append(("P4", "verify overhead (s)", v["wall_s"] - v["request_s"], "<= 3 s",
                     "%.1f s wall - %.1f s requests" % (v["wall_s"], v["request_s"])))
    if "recovery" in res:
        r = res["recovery"]
        bound = r["restart_sec"] + r["worker_start_s"] + 2 if r["worker_start_s"] is not None else None
        # What the bound leaves out: kill -> the new process's start, minus RestartSec.
        stops = [p["points_s"]["ExecMainStart"] - r["restart_sec"] for p in r["runs"] if "ExecMainStart" in p["points_s"]]
        rows.append(("P5", "recovery / (RestartSec + start + 2 s)", ratio(r["recovery_s"], bound), "<= 1.1",
                     "%s / (%s + %s + 2 s); stop before RestartSec %s" % (
                         sec(r["recovery_s"]), sec(r["restart_sec"]), sec(r["worker_start_s"]), sec(median(stops)))))
        # The same without the stop (kill -> ExecMainStart, less RestartSec): in the sandbox that is
        # TimeoutStopSec waited out (cgroup v1 in a container: systemd never hears the cgroup empty)
        # plus ExecStartPre; on a cgroup v2 host the stop ends with the process.
        if stops and bound:
            rows.append(("P5'", "the same without the stop", ratio(r["recovery_s"] - median(stops), bound), "<= 1.1",
                         "(%s - %s) / %s" % (sec(r["recovery_s"]), sec(median(stops)), sec(bound))))
    if "hosts" in res:
        h = res["hosts"]
        small, big = min(h, key=int), max(h, key=int)
        rows.append(("H", "re-run T(%s hosts) / T(%s hosts)" % (big, small), ratio(h[big]["rerun_s"], h[small]["rerun_s"]),
                     "<= 1.5", "%s / %s" % (sec(h[big]["rerun_s"]), sec(h[small]["rerun_s"]))))
        # ansible-core alone on the same hosts: the part of the ratio no playbook escapes here.
        for count in BARE_TASKS:
            top, bottom = bare_of(h[big], count), bare_of(h[small], count)
            if top and bottom:
                rows.append(("H0", "ansible-core alone, %d task(s) a host" % count, ratio(top["s"], bottom["s"]), "-",
                             "T(%s) / T(%s): %s / %s" % (big, small, sec(top["s"]), sec(bottom["s"]))))
    if "workers" in res:
        w = res["workers"]
        for key, target in (("separate", "<= 1.3"), ("one_gpu", "~ N")):
            one = w[key][min(w[key])]["ready_s"]
            for count in sorted(w[key])[1:]:
                rows.append(("W", "%d workers %s / 1" % (count, "on separate GPUs" if key == "separate" else "on one GPU"),
                             ratio(w[key][count]["ready_s"], one), target.replace("N", str(count)),
                             "%s / %s" % (sec(w[key][count]["ready_s"]), sec(one))))
    return rows


def bare_of(row, count):
    """A size's bare figures for `count` tasks a host (int keys in a run, str keys from a saved report)."""
    bare = row.get("bare", {})
    return bare.get(count, bare.get(str(count)))


def print_report(res):
    rows = table(res)
    res["table"] = [{"id": r[0], "figure": r[1], "value": r[2], "target": r[3], "detail": r[4]} for r in rows]
    print("\n%-3s %-40s %8s  %-8s %s" % ("", "figure", "value", "target", "measured"))
    for r in rows:
        print("%-3s %-40s %8s  %-8s %s" % (r[0], r[1], fmt(r[2]), r[3], r[4]))
    if "hosts" in res:
        print("\nre-run of site.yml, mocker-only copy (median of %d; converge untimed)" % res["runs"])
        print("CPU: seconds of the controller (ansible-playbook) and of the whole machine (controller and hosts,"
              " which share its %d cores), and the machine's busy share of the run" % (os.cpu_count() or 1))
        print("%6s %10s %15s %12s %6s  %s" % ("hosts", "re-run", "controller CPU", "machine CPU", "busy", "runs"))
        for size, row in sorted(res["hosts"].items(), key=lambda kv: int(kv[0])):
            cells = (size, row["rerun_s"], fmt(row.get("controller_cpu_s"), "%.1f"), fmt(row.get("machine_cpu_s"), "%.1f"),
                     fmt(row.get("machine_busy")), ", ".join("%.1f" % t for t in row["runs_s"]))
            print("%6s %9.1fs %14ss %11ss %6s  %s" % cells)
        # Per host and per task result, from the bare runs: the machine CPU ansible-core spends, and
        # how many such results a host's share of the re-run is worth.
        sizes = sorted(res["hosts"], key=int)
        if len(sizes) > 1 and all(bare_of(res["hosts"][s], max(BARE_TASKS)) for s in sizes):
            small, big = sizes[0], sizes[-1]
            hosts = int(big) - int(small)
            one, many = min(BARE_TASKS), max(BARE_TASKS)
            slope = {count: (bare_of(res["hosts"][big], count)["machine_cpu_s"]
                             - bare_of(res["hosts"][small], count)["machine_cpu_s"]) / hosts for count in (one, many)}
            per_result = (slope[many] - slope[one]) / (many - one)
            site = (res["hosts"][big]["machine_cpu_s"] - res["hosts"][small]["machine_cpu_s"]) / hosts
            print("per added host (%s -> %s hosts), machine CPU-s: the re-run %.2f; bare ansible-core %.2f with %d task,"
                  " %.2f with %d; so %.3f s a task result, and the re-run's per-host CPU is worth %.0f bare task results"
                  % (small, big, site, slope[one], one, slope[many], many, per_result,
                     (site / per_result) if per_result > 0 else float("nan")))
    if "workers" in res:
        w = res["workers"]
        print("\nworker start, readiness tasks' seconds (host %s, --startup-time %s s)" % (w["host"], res["startup_s"]))
        print("%3s %14s %14s" % ("N", "separate GPUs", "one GPU"))
        for count in sorted(w["separate"]):
            print("%3d %13.1fs %13.1fs" % (count, w["separate"][count]["ready_s"], w["one_gpu"][count]["ready_s"]))
    if "rollout" in res:
        ro = res["rollout"]
        print("\nwhere the warm rollout's time goes (median of %d; json callback task durations): %.1f s in all,"
              " the floor %.1f s" % (res["runs"], ro["warm_rollout_s"], ro["floor_s"]))
        for kind, text in KINDS:
            tasks = ro["warm_kind_tasks"].get(kind)
            print("  %-100s %6.1f s%s" % (text, ro["warm_kinds_s"][kind], "" if kind == "outside" else "  (%d tasks)" % tasks))
        # On this machine the hosts share the controller's cores: every CPU-second Ansible spends
        # (the controller, and its module runs on the hosts) is taken from the engines' start.
        fc, wc, cores = ro["floor_cpu"], ro["warm_cpu"], os.cpu_count() or 1
        added = wc["machine_cpu_s"] - fc["machine_cpu_s"]
        print("  CPU (medians): the floor %.1f s of the machine (%.2f of %d cores busy, the controller %.1f s);"
              " the warm rollout %.1f s (%.2f busy), the controller %.1f s of it; Ansible's added %.1f CPU-s"
              " are %.1f s of the %d cores"
              % (fc["machine_cpu_s"], fc["machine_busy"], cores, fc["controller_cpu_s"],
                 wc["machine_cpu_s"], wc["machine_busy"], wc["controller_cpu_s"], added, added / cores, cores))
        if ro.get("ansible_floor_cpu"):
            ac = ro["ansible_floor_cpu"]
            print("  the floor by ansible-core alone: %.1f s of the machine (%.2f busy), the controller %.1f s"
                  % (ac["machine_cpu_s"], ac["machine_busy"], ac["controller_cpu_s"]))
        rest = ro["warm_rollout_s"] - ro["warm_kinds_s"]["watch"]
        print("  beside the unit watch: %.1f s; the floor's target 1.2 leaves %.1f s beside a watch as long as the floor"
              % (rest, 0.2 * ro["floor_s"]))
        print("\nre-run time per role (median of %d; json callback task durations)" % res["runs"])
        for role, seconds in list(res["rollout"]["rerun_profile_s"].items())[:15]:
            print("  %-50s %6.1f s" % (role, seconds))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    ap.add_argument("--only", default=",".join(PARTS), help="parts to run: %s" % ",".join(PARTS))
    ap.add_argument("--hosts", default="3,6,9", help="host counts of the scaling copy (3 or more)")
    ap.add_argument("--workers", default="1,4,8", help="worker counts of the worker scaling")
    ap.add_argument("--startup-time", type=float, default=4.0, help="the mockers' --startup-time (s)")
    ap.add_argument("--keep-copy", action="store_true", help="leave the scaling copy's hosts running")
    args = ap.parse_args()
    parts = [p for p in args.only.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error("unknown parts %s (known: %s)" % (", ".join(unknown), ", ".join(PARTS)))
    res = {"runs": args.runs, "startup_s": args.startup_time}
    floor_ready = []
    if "rollout" in parts:
        print("== P1/P2: floor, warm rollout, idempotent re-run (%d runs)" % args.runs, flush=True)
        res["rollout"] = rollout(args.runs)
        floor_ready = res["rollout"].pop("floor_ready")
    if "verify" in parts:
        print("== P4: verify overhead", flush=True)
        p4 = [verify_overhead() for dummy in range(args.runs)]
        res["verify"] = {"wall_s": median([w for w, dummy in p4]), "request_s": median([r for dummy, r in p4])}
    if "recovery" in parts:
        print("== P5: recovery after kill -9", flush=True)
        ensure_pool_room(args.runs)
        p5 = [recovery(floor_ready) for dummy in range(args.runs)]
        for n, p in enumerate(p5, 1):
            print("   run %d: %.1f s; after the kill: %s; serving %.1f s" % (n, p["recovery_s"], ", ".join(
                "%s %.1f s" % kv for kv in sorted(p["points_s"].items(), key=lambda kv: kv[1])), p["recovery_s"]),
                flush=True)
        res["recovery"] = {"recovery_s": median([p["recovery_s"] for p in p5]), "runs": p5,
                           "restart_sec": p5[0]["restart_sec"],
                           "worker_start_s": median([p["worker_start_s"] for p in p5 if p["worker_start_s"] is not None])}
    sb = None
    try:
        if "hosts" in parts or "workers" in parts:
            sizes = [int(x) for x in args.hosts.split(",")] if "hosts" in parts else [3]
            print("== scaling copy: %s hosts (127.0.14.N)" % ",".join(map(str, sizes)), flush=True)
            hosts, sb = host_scaling(sizes, args.runs if "hosts" in parts else 0, args.startup_time)
            if "hosts" in parts:
                res["hosts"] = {str(k): v for k, v in hosts.items()}
        if "workers" in parts:
            print("== worker scaling: %s mockers, separate GPUs and one GPU" % args.workers, flush=True)
            res["workers"] = worker_scaling(sb, [int(x) for x in args.workers.split(",")], args.runs, args.startup_time)
    finally:
        if sb is not None and not args.keep_copy:
            sb.playbook("sandbox/destroy.yml", timeout=None)
    print_report(res)
    os.makedirs(os.path.join(REPO, "reports"), exist_ok=True)
    with open(os.path.join(REPO, "reports", "bench.json"), "w") as fh:
        json.dump(res, fh, indent=2)
    print("\nreport: reports/bench.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
