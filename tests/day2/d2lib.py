"""Helpers of the day-2 suite: the sandbox copy's inventory, playbooks, hosts, a client loop.

Talks to the copy's hosts with `podman exec kvshare-d-<host>` and to the frontend over HTTP.
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from sandbox_copy import CONTAINER_PREFIX, DAY2_DIR, REPO, make_copy

BIN = os.path.dirname(sys.executable)
INVENTORY = os.path.join(DAY2_DIR, "inventory")
ENV = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "PATH": BIN + os.pathsep + os.environ["PATH"],
       # Ansible's fact cache is keyed by inventory name (sb1..3 in every sandbox copy): keep ours apart.
       "ANSIBLE_CACHE_PLUGIN_CONNECTION": os.path.join(DAY2_DIR, "facts"),
       "KVSHARE_VERIFY_REPORT": os.path.join(DAY2_DIR, "verify.json")}
PINS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pins")
LOGS = os.path.join(DAY2_DIR, "logs")


def playbook(*args, timeout=1500, log=None):
    """ansible-playbook against the copy: (CompletedProcess, seconds); output kept in LOGS/<log>.log."""
    t0 = time.monotonic()
    res = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", INVENTORY] + list(args), cwd=REPO,
                         capture_output=True, text=True, timeout=timeout, env=ENV, check=False)
    os.makedirs(LOGS, exist_ok=True)
    name = log or os.path.basename(args[0]).replace(".yml", "")
    with open(os.path.join(LOGS, name + ".log"), "w") as fh:
        fh.write(res.stdout + res.stderr)
    return res, time.monotonic() - t0


def must(res, what):
    assert res.returncode == 0, "%s failed:\n%s" % (what, (res.stdout + res.stderr)[-5000:])


def inventory():
    out = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", INVENTORY, "--list"], check=True,
                         capture_output=True, text=True, cwd=REPO, env=ENV).stdout
    return json.loads(out)


class Inv:
    """A snapshot of the copy's inventory."""

    def __init__(self):
        self.data = inventory()
        self.hostvars = self.data["_meta"]["hostvars"]

    def group(self, name):
        return self.data.get(name, {}).get("hosts", [])

    def address(self, host):
        return self.hostvars[host]["kvshare_bind_address"]

    @property
    def frontend_url(self):
        return "http://%s:8000" % self.address(self.group("dynamo_frontend")[0])

    def workers(self):
        """{"host/name": (host, worker)} for every worker."""
        out = {}
        for host in self.group("dynamo_workers"):
            for worker in self.hostvars[host].get("dynamo_workers", []):
                out["%s/%s" % (host, worker["name"])] = (host, worker)
        return out

    def by_rpc(self):
        return dict(("%s:%s" % (self.address(h), w["rpc_port"]), key) for key, (h, w) in self.workers().items())


def http_json(url, payload=None, timeout=30):
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:300]
    except (OSError, ValueError) as exc:
        return None, str(exc)[:300]


def instances(inv):
    """{"host/name": instance id} of the workers the frontend lists (generate endpoints)."""
    status, body = http_json(inv.frontend_url + "/health?instances=true", timeout=10)
    if status != 200 or not isinstance(body, dict):
        return {}
    rpc = inv.by_rpc()
    out = {}
    for inst in body.get("instances", []):
        if inst.get("endpoint") != "generate":
            continue
        key = rpc.get(((inst.get("transport") or {}).get("tcp") or "").split("/", 1)[0])
        if key:
            out.setdefault(key, []).append(int(inst["instance_id"]))
    return out


def completion(inv, worker, instance_id, timeout=20):
    return http_json(inv.frontend_url + "/v1/completions", {
        "model": worker.get("served_model_name", worker["model"]), "prompt": "hello world", "max_tokens": 2,
        "temperature": 0, "nvext": {"backend_instance_id": instance_id}}, timeout=timeout)


def serving(inv):
    """{"host/name": instance id} of the workers answering a direct-routed completion."""
    out = {}
    ids = instances(inv)
    for key, (host, worker) in inv.workers().items():
        for iid in ids.get(key, []):
            if completion(inv, worker, iid)[0] == 200:
                out[key] = iid
                break
    return out


def wait_all_serving(inv, timeout=180):
    deadline = time.monotonic() + timeout
    got = {}
    while time.monotonic() < deadline:
        got = serving(inv)
        if set(got) == set(inv.workers()):
            return got
        time.sleep(0.5)
    raise AssertionError("not every worker serves after %ss: %s of %s" % (timeout, sorted(got), sorted(inv.workers())))


def sh(host, cmd, check=True):
    res = subprocess.run(["podman", "exec", CONTAINER_PREFIX + host, "bash", "-c", cmd], capture_output=True, text=True, check=False)
    if check:
        assert res.returncode == 0, "%s: %s: %s" % (host, cmd, res.stderr)
    return res.stdout


def unit_times(host, unit):
    """systemd's monotonic timestamps (seconds, the host kernel's CLOCK_MONOTONIC) of a unit."""
    out = sh(host, "systemctl show -p ActiveEnterTimestampMonotonic -p ActiveExitTimestampMonotonic -p MainPID "
             "-p ActiveState %s" % unit)
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {"enter": int(props["ActiveEnterTimestampMonotonic"]) / 1e6,
            "exit": int(props["ActiveExitTimestampMonotonic"]) / 1e6,
            "pid": int(props["MainPID"]), "state": props["ActiveState"]}


def worker_units(inv):
    return dict((key, unit_times(h, "dynamo-worker@%s" % w["name"])) for key, (h, w) in inv.workers().items())


def etcdctl(host, args):
    return sh(host, "set -a; . /etc/etcd/etcdctl.env; set +a; etcdctl %s" % args)


class ClientLoop(threading.Thread):
    """Direct-routed requests to every worker, round after round, until stopped.

    Each round reads the frontend's instances, then sends one 2-token completion to every listed
    worker's instance. Records every request (start, end, worker, instance, status) and, per
    round, the workers that did not answer (unlisted or failed).
    """

    def __init__(self, inv, pause=0.05):
        super().__init__(daemon=True)
        self.inv = inv
        self.workers = inv.workers()
        self.pause = pause
        self.requests = []
        self.rounds = []
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            t_round = time.monotonic()
            ids = instances(self.inv)
            down = []
            for key, (_host, worker) in self.workers.items():
                if not ids.get(key):
                    down.append(key)
                    continue
                iid = ids[key][-1]
                t0 = time.monotonic()
                status, body = completion(self.inv, worker, iid)
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


__all__ = ["make_copy", "REPO", "DAY2_DIR"]
