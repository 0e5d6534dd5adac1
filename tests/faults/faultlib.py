# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Helpers of the fault suite: the sandbox copy's hosts, serving checks, "nothing lost" and timing.

Drives the copy (or KVSHARE_FAULTS_INVENTORY's hosts) with tests/lib/sandbox.py; the names the
cases use (F.sh, F.workers, F.wait_all_serving, ...) are that Sandbox's.
"""
import hashlib
import os
import signal
import time

from lib import sandbox, sandbox_copy
from lib.sandbox import Sandbox

# The cases use these as F.<name>.
REPO, podman, wait_for = sandbox.REPO, sandbox.podman, sandbox.wait_for

# KVSHARE_FAULTS_INVENTORY: an existing, rolled-out sandbox (CI: the day-2 copy, for the
# cases not marked kv; ./dev.sh faults_kv: the molecule scenario's hosts, for the kv ones) instead of a copy of its
# own; the run's logs and reports go to RUN_DIR.
TARGET = os.environ.get("KVSHARE_FAULTS_INVENTORY")
if TARGET:
    INVENTORY = os.path.abspath(TARGET)
    RUN_DIR = os.environ.get("KVSHARE_FAULTS_DIR", "/var/tmp/kvshare-faults-run")
    # A sandbox copy given as the target (CI's mocker lane: the day-2 copy) brings its own fact
    # cache (its hosts are named sb1..3 too): ANSIBLE_CACHE_PLUGIN_CONNECTION, set by the caller.
else:
    INVENTORY = sandbox_copy.faults_copy()
    RUN_DIR = sandbox_copy.FAULTS_DIR
    # Ansible's fact cache is keyed by inventory name (sb1..3 here and in the main sandbox): keep ours apart.
    os.environ["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = os.path.join(RUN_DIR, "facts")
os.makedirs(RUN_DIR, exist_ok=True)
os.environ["KVSHARE_INVENTORY"] = INVENTORY
os.environ["KVSHARE_VERIFY_REPORT"] = os.path.join(RUN_DIR, "verify.json")
LOG_DIR = os.path.join(RUN_DIR, "logs")
SB = Sandbox(INVENTORY, log_dir=LOG_DIR)

address, group, workers, completion = SB.address, SB.group, SB.workers, SB.completion
instance_of, generate_instances = SB.instance_of, SB.generate_instances
host, forget_host, container, worker_serving = SB.ssh_host, SB.forget_host, SB.container, SB.worker_serving
# ansible-playbook against the copy; whole output kept in LOG_DIR for the post-mortem (assertion
# messages show only its tail).
playbook, popen_playbook = SB.playbook, SB.popen_playbook
FRONTEND, FRONTEND_URL, HOSTVARS = SB.frontend, SB.frontend_url, SB.hostvars

# The Maru pool's FS_DAX mount as this machine sees it (sandbox/fake-fsdax.sh): its allocation files.
POOL_HOST_DIR = SB.render(SB.sandbox_var("sandbox_fsdax_dir", "{{ sandbox_dir }}/fakecxl")) + "/pmem0"
PKI_DIR = SB.render(SB.sandbox_var("etcd_pki_dir"))
SENTINEL_KEY = "kvshare/faults/sentinel"
MARU_SECRET = "/var/lib/maru-resourced/secret"
POLL = 0.5
# Not running: a vLLM worker whose engine processes outlive SIGKILL for TimeoutStopSec ends "failed".
STOPPED = ("inactive", "failed", "unknown")


def config_dir(name):
    """Where the host keeps the Dynamo units' files: the inventory's dynamo_runtime_config_dir (the
    day-2 copy sets one), else the role default."""
    return HOSTVARS[name].get("dynamo_runtime_config_dir", "/etc/dynamo")


def sh(name, cmd):
    return host(name).check_output(cmd)


def etcdctl(name, args, at=None):
    at = at or address(name)
    return sh(name, "set -a; . /etc/etcd/etcdctl.env; set +a; ETCDCTL_ENDPOINTS=https://%s:2379 etcdctl %s" % (at, args))


def serving_map(only=None):
    """{host/worker: instance id} when every worker (or those in `only`) serves, else None."""
    return SB.serving(only, need_all=True)


def wait_all_serving(timeout=300, only=None):
    """{host/worker: instance id} once every worker serves through the frontend (polled every POLL s)."""
    return SB.wait_all_serving(timeout, only, interval=POLL)


def unit_state(name, unit):
    return sh(name, "systemctl is-active %s || true" % unit).strip()


def pool_files():
    count = 0
    for dummy, dummy, files in os.walk(POOL_HOST_DIR):
        count += len(files)
    return count


def has_pool():
    """True when the target has a Maru pool (the KV lane: the molecule hosts); the mocker lane has none."""
    return bool(group("maru_pool"))


def maru_secret_digest():
    if not has_pool():
        return None
    pool = group("maru_pool")[0]
    return sh(pool, "sha256sum %s | cut -d' ' -f1" % MARU_SECRET).strip()


def baseline():
    """What must survive every fault: an etcd key, and where there is a pool, its files and the Maru RM secret."""
    value = "kept-%d" % time.time()
    etcdctl(group("etcd")[0], "put %s %s" % (SENTINEL_KEY, value))
    return {"sentinel": value, "pool_files": pool_files() if has_pool() else 0, "maru_secret": maru_secret_digest()}


def assert_nothing_lost(base):
    for member in group("etcd"):
        got = etcdctl(member, "get --print-value-only %s" % SENTINEL_KEY).strip()
        assert got == base["sentinel"], "etcd key %s lost on %s: %r" % (SENTINEL_KEY, member, got)
    # The FS_DAX pool's files are the RM's region allocations: freed when maru-server or the host
    # stops (the KV cache is volatile by design, as CXL memory is across a power cycle), allocated
    # again by the workers. What must survive is the RM's state (its secret, below).
    assert not has_pool() or pool_files() > 0 or base["pool_files"] == 0, "no region allocated in the pool after recovery"
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


def sha256(data):
    return hashlib.sha256(data).hexdigest()
