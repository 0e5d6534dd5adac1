"""Helpers of the fault suite: the sandbox copy's hosts, serving checks, "nothing lost" and timing.

Reuses molecule/default/tests/conftest.py (loaded as a module, KVSHARE_INVENTORY pointing at the
copy) for the inventory, the frontend and completion helpers.
"""
import hashlib
import importlib.util
import os
import signal
import subprocess
import time

from sandbox_copy import FAULTS_DIR, REPO, make_copy

# KVSHARE_FAULTS_INVENTORY: an existing, rolled-out sandbox (CI: the molecule scenario's hosts,
# inventories/sandbox) instead of a copy of its own; the run's logs and reports go to RUN_DIR.
TARGET = os.environ.get("KVSHARE_FAULTS_INVENTORY")
if TARGET:
    INVENTORY = os.path.abspath(TARGET)
    RUN_DIR = os.environ.get("KVSHARE_FAULTS_DIR", "/var/tmp/kvshare-faults-run")
else:
    INVENTORY = make_copy()
    RUN_DIR = FAULTS_DIR
    # Ansible's fact cache is keyed by inventory name (sb1..3 here and in the main sandbox): keep ours apart.
    os.environ["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = os.path.join(FAULTS_DIR, "facts")
os.makedirs(RUN_DIR, exist_ok=True)
os.environ["KVSHARE_INVENTORY"] = INVENTORY
os.environ["KVSHARE_VERIFY_REPORT"] = os.path.join(RUN_DIR, "verify.json")

_spec = importlib.util.spec_from_file_location(
    "kvshare_sandbox_helpers", os.path.join(REPO, "molecule", "default", "tests", "conftest.py"))
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)

address, group, workers, instance_of, completion, wait_for = (
    H.address, H.group, H.workers, H.instance_of, H.completion, H.wait_for)
FRONTEND, FRONTEND_URL, HOSTVARS = H.FRONTEND, H.FRONTEND_URL, H.HOSTVARS


def _render(value, hostname=None):
    """The few inventory templates the sandbox uses for paths and names, rendered without Ansible."""
    out = str(value).replace("{{ sandbox_dir }}", H.SANDBOX_DIR)
    out = out.replace("{{ etcd_cluster_name | default('kvshare') }}", "kvshare")
    if hostname:
        out = out.replace("{{ inventory_hostname }}", hostname)
    assert "{{" not in out, "cannot render %r" % value
    return out


_SB = HOSTVARS[group("sandbox")[0]]
# The Maru pool's FS_DAX mount as this machine sees it (sandbox/fake-fsdax.sh): its allocation files.
POOL_HOST_DIR = _render(_SB.get("sandbox_fsdax_dir", "{{ sandbox_dir }}/fakecxl")) + "/pmem0"
PKI_DIR = _render(_SB["etcd_pki_dir"])
SENTINEL_KEY = "kvshare/faults/sentinel"
MARU_SECRET = "/var/lib/maru-resourced/secret"
POLL = 0.5
# Not running: a vLLM worker whose engine processes outlive SIGKILL for TimeoutStopSec ends "failed".
STOPPED = ("inactive", "failed", "unknown")
LOG_DIR = os.path.join(RUN_DIR, "logs")
_RUNS = []
_HOSTS = {}


def host(name):
    if name not in _HOSTS:
        _HOSTS[name] = H.ssh_host(name)
    return _HOSTS[name]


def sh(name, cmd):
    return host(name).check_output(cmd)


def container(name):
    return _render(HOSTVARS[name]["sandbox_container_name"], name)


def etcdctl(name, args, at=None):
    at = at or address(name)
    return sh(name, "set -a; . /etc/etcd/etcdctl.env; set +a; ETCDCTL_ENDPOINTS=https://%s:2379 etcdctl %s" % (at, args))


def playbook(*args, timeout=1500):
    """ansible-playbook against the copy: (CompletedProcess, seconds)."""
    t0 = time.monotonic()
    res = H.ansible_playbook(*args, timeout=timeout)
    took = time.monotonic() - t0
    # Whole output kept for the post-mortem (assertion messages show only its tail).
    os.makedirs(LOG_DIR, exist_ok=True)
    _RUNS.append(args)
    name = "%02d-%s.log" % (len(_RUNS), os.path.basename(args[0]).replace(".yml", ""))
    with open(os.path.join(LOG_DIR, name), "w") as handle:
        handle.write("# ansible-playbook %s\n# rc=%d, %.1f s\n%s%s" % (" ".join(args), res.returncode, took, res.stdout, res.stderr))
    return res, took


def worker_serving(hostname, worker, exclude=()):
    """An instance id of this worker that answers a direct-routed completion, or None."""
    try:
        for iid in instance_of(hostname, worker):
            if iid not in exclude and completion(worker, iid)[0] == 200:
                return iid
    except (OSError, AssertionError, ValueError):
        return None
    return None


def serving_map(only=None):
    """{host/worker: instance id} when every worker (or those in `only`) serves, else None."""
    out = {}
    for hostname, worker in workers():
        key = "%s/%s" % (hostname, worker["name"])
        if only is not None and key not in only:
            continue
        iid = worker_serving(hostname, worker)
        if iid is None:
            return None
        out[key] = iid
    return out


def wait_all_serving(timeout=300, only=None):
    """Seconds until every worker serves through the frontend (polled every POLL s)."""
    t0 = time.monotonic()
    wait_for(lambda: serving_map(only), timeout=timeout, interval=POLL, what="every worker to serve")
    return time.monotonic() - t0


def unit_state(name, unit):
    return sh(name, "systemctl is-active %s || true" % unit).strip()


def pool_files():
    count = 0
    for dummy, dummy, files in os.walk(POOL_HOST_DIR):
        count += len(files)
    return count


def maru_secret_digest():
    pool = group("maru_pool")[0]
    return sh(pool, "sha256sum %s | cut -d' ' -f1" % MARU_SECRET).strip()


def baseline():
    """What must survive every fault: an etcd key, the pool's files, the Maru RM secret."""
    value = "kept-%d" % time.time()
    etcdctl(group("etcd")[0], "put %s %s" % (SENTINEL_KEY, value))
    return {"sentinel": value, "pool_files": pool_files(), "maru_secret": maru_secret_digest()}


def assert_nothing_lost(base):
    for member in group("etcd"):
        got = etcdctl(member, "get --print-value-only %s" % SENTINEL_KEY).strip()
        assert got == base["sentinel"], "etcd key %s lost on %s: %r" % (SENTINEL_KEY, member, got)
    # The FS_DAX pool's files are the RM's region allocations: freed when maru-server or the host
    # stops (the KV cache is volatile by design, as CXL memory is across a power cycle), allocated
    # again by the workers. What must survive is the RM's state (its secret, below).
    assert pool_files() > 0 or base["pool_files"] == 0, "no region allocated in the pool after recovery"
    assert maru_secret_digest() == base["maru_secret"], "Maru RM secret changed"
    assert serving_map() is not None, "not every worker serves"


def verify():
    """verify.yml passes again (real cross-instance KV sharing)."""
    res, took = playbook("verify.yml", timeout=600)
    assert res.returncode == 0, "verify.yml failed:\n" + res.stdout[-4000:]
    return took


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def popen_playbook(*args):
    cmd = [os.path.join(H.BIN, "ansible-playbook"), "-i", INVENTORY] + list(args)
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "PYTHONUNBUFFERED": "1",
           "PATH": H.BIN + os.pathsep + os.environ["PATH"]}
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)


def podman(*args, check=True):
    return subprocess.run(["podman"] + list(args), capture_output=True, text=True, check=check)


def sha256(data):
    return hashlib.sha256(data).hexdigest()
