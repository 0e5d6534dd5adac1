# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR memory-service variant on two podman systemd containers (CPU only), end to end.

Only with KVSHARE_INTEGRATION=1 (needs podman, the image localhost/kvshare-sandbox:bookworm and the sandbox's
wheelhouse and model in $KVSHARE_SANDBOX_DIR (default /var/tmp/kvshare-sandbox): `molecule create` or
sandbox/create.yml builds them; 127.0.13.1-2 free). First prepare.py fills $KVH_KVCR_DIR (default
/var/tmp/kvshare-k; cached): hard links to the sandbox wheels and model plus kvcr 0.1.1 / nixl 1.5.0 /
nixl-cu12 1.5.0 from PyPI (the pip steps of group_vars/dynamo.yml). Then removes any kvshare-k-1/2 left
by an earlier run, creates them and:
  site.yml twice (the second run must change nothing), checks.yml (systemd-analyze verify, socket,
  pool, state agent in etcd, worker kill, BindsTo=);
  standin.yml: the KVCR worker test double (tests/doubles/kvcr_engine) replaces the dynamo.mocker;
  playbooks/guard_recovery.yml, twice (a repeat recovery between the same memory services): hold,
  SIGKILL of the engine process only, memory service same PID, real Guard promotion in the real
  kvcr-service's journal, resend answered identically by the target, hold released, source worker
  ready again (the vLLM KVCR counters are the double's);
  supervision.yml: agent crash restarts worker 0 (PartOf=), the health timer restarts a hung agent
  and a memory service that lost its socket;
  attached.yml after each of: those agent restarts; a plain agent restart (kvh2's engine, attached
  to the old agent incarnation, must be restarted by kvh2's attachment probe: "re-attach" in its
  journal); kvh2's worker started while the agent is stopped (it serves without an attachment, as
  dynamo.vllm does after 30 s; its probe must restart it once the agent is back); both hosts
  rebooted with kvh2 (no agent, no etcd) up first; both rebooted with kvh1 up first: the real agent
  has both slots active again and both workers are ready;
  playbooks/status.yml and playbooks/verify.yml on this KVCR topology (verify again after the reboots);
  playbooks/teardown.yml, then after_teardown.yml (no KVCR unit runs, data kept);
then removes the containers (unless KVH_KVCR_KEEP=1). Prints the time of every step.
"""
import os
import re
import subprocess
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
VENV_BIN = os.path.join(REPO, ".venv", "bin")

pytestmark = pytest.mark.skipif(os.environ.get("KVSHARE_INTEGRATION") != "1",
                                reason="set KVSHARE_INTEGRATION=1 to run the podman integration test")

TIMES = []


def playbook(path, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=VENV_BIN + os.pathsep + os.environ["PATH"],
               KVSHARE_VERIFY_REPORT=os.path.join(os.environ.get("KVH_KVCR_DIR", "/var/tmp/kvshare-k"), "verify.json"))
    t0 = time.monotonic()
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", os.path.join(HERE, "inventory.yml"), path]
                          + list(extra), cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    TIMES.append((os.path.relpath(path, REPO), time.monotonic() - t0, proc.returncode))
    log = os.environ.get("KVH_KVCR_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write("==== %s rc=%s started %s, %.1f s\n%s\n%s\n" % (path, proc.returncode, time.strftime(
                "%H:%M:%S", time.localtime(time.time() - TIMES[-1][1])), TIMES[-1][1], proc.stdout, proc.stderr))
    return proc


def prepare():
    """$KVH_KVCR_DIR from the sandbox build plus the KVCR wheels (prepare.py; cached)."""
    t0 = time.monotonic()
    proc = subprocess.run([os.path.join(VENV_BIN, "python"), os.path.join(HERE, "prepare.py")], cwd=REPO,
                          capture_output=True, text=True, timeout=1800, check=False)
    TIMES.append((os.path.relpath(os.path.join(HERE, "prepare.py"), REPO), time.monotonic() - t0, proc.returncode))
    print(proc.stdout.strip())
    return proc


def recap(out):
    found = dict((h, dict(zip(("ok", "changed", "failed"), map(int, m))))
                 for h, *m in re.findall(r"(kvh\d)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out))
    assert set(found) == {"kvh1", "kvh2"}, out[-3000:]
    return found


def ok(proc):
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    return proc.stdout


def podman(*args):
    return subprocess.run(["podman"] + list(args), capture_output=True, text=True, timeout=300, check=False)


def booted(container, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = podman("exec", container, "systemctl", "is-system-running").stdout.strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(1)
    raise AssertionError("%s did not finish booting in %d s" % (container, timeout))


def reboot_both(first, second):
    """Power both hosts off, boot `first`, let it run alone until its worker has tried to start,
    then boot `second` (the step's duration goes to TIMES)."""
    t0 = time.monotonic()
    for name in ("kvshare-k-1", "kvshare-k-2"):
        assert podman("stop", "--time", "5", name).returncode == 0
    assert podman("start", first).returncode == 0
    booted(first)
    deadline = time.monotonic() + 120
    while podman("exec", first, "systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value",
                 "dynamo-worker@kvcr.service").stdout.strip() in ("", "0") and time.monotonic() < deadline:
        time.sleep(1)
    assert podman("start", second).returncode == 0
    booted(second)
    TIMES.append(("reboot %s first, then %s" % (first, second), time.monotonic() - t0, 0))


def attached(since):
    return ok(playbook(os.path.join(HERE, "attached.yml"), "-e", "kvh_since='%s'" % since))


def test_memory_service_variant_on_cpu():
    pb = os.path.join(REPO, "playbooks")
    try:
        ok(prepare())
        # Hosts left by an interrupted earlier run are in an unknown state (one that was shutting
        # down made create.yml fail, unreachable, in CI): start from none.
        ok(playbook(os.path.join(HERE, "destroy.yml")))
        ok(playbook(os.path.join(HERE, "create.yml")))
        for name in ("kvshare-k-1", "kvshare-k-2"):  # create.yml's limit (its comment says why)
            assert podman("inspect", "--format", "{{.HostConfig.NanoCpus}}", name).stdout.strip() == "250000000"
        ok(playbook(os.path.join(REPO, "site.yml")))
        second = ok(playbook(os.path.join(REPO, "site.yml")))
        assert all(r["changed"] == 0 for r in recap(second).values()), second[-6000:]
        assert "NRestarts 0 -> 0" in ok(playbook(os.path.join(HERE, "checks.yml")))

        ok(playbook(os.path.join(HERE, "standin.yml")))
        # Twice: a repeat recovery between the same memory services (a promoted Guard claimed again).
        for dummy in range(2):
            guard = ok(playbook(os.path.join(pb, "guard_recovery.yml")))
            # source and target told apart by the (double's) counters, identical answer after the kill
            assert re.search(r"source kvh\d \(engine killed, restart held\), target kvh\d", guard), guard[-6000:]
            assert "identical answer: True" in guard
            for task in ("Kill the source engine (VLLM::EngineCore in the worker's cgroup only)",
                         "Check that the memory service neither stopped nor restarted",
                         "Wait for the Guard promotion in the memory service journal",
                         "Resend; require the same answer and remote delivery on the target",
                         "Release the hold", "Wait until the source worker is ready again"):
                assert "TASK [%s]" % task in guard, task
            assert not re.search(r"failed=[1-9]", guard)

        sup = ok(playbook(os.path.join(HERE, "supervision.yml")))
        assert "restarted after 3 failed probes" in sup, sup[-4000:]
        attached("-15min")

        # A restarted state agent is a new incarnation: kvh2's engine must be made to attach again.
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        assert podman("exec", "kvshare-k-1", "systemctl", "restart", "kvcr-state-agent.service").returncode == 0
        out = attached(since)
        assert re.search(r"re-attach: restarted after \d+ failed probes, last: worker [0-9a-f]+ attached to "
                         r"state-agent host [0-9a-f]+, the live host is [0-9a-f]+", out), out[-4000:]

        # An engine that starts while no agent is live gives up after 30 s and serves without an
        # attachment (dynamo.vllm does): once the agent is back, kvh2's probe must restart it.
        # The stopped agent's advertisement stays in etcd until its lease expires (about 30 s); an
        # engine started before that attaches to it (the stale case above), so wait for it to go.
        assert podman("exec", "kvshare-k-1", "systemctl", "stop", "kvcr-state-agent.service").returncode == 0
        deadline = time.monotonic() + 120
        while podman("exec", "kvshare-k-1", "sh", "-c", "set -a; . /etc/etcd/etcdctl.env; etcdctl get --prefix --keys-only "
                     "v1/event_sources/namespace/dynamo/component/kv_state_agent/topic/kv-state-hosts-v2/").stdout.strip():
            assert time.monotonic() < deadline, "the stopped agent's advertisement stayed in etcd"
            time.sleep(1)
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        assert podman("exec", "kvshare-k-2", "systemctl", "restart", "dynamo-worker@kvcr.service").returncode == 0
        deadline = time.monotonic() + 120
        while "KV routing remains disabled" not in podman(
                "exec", "kvshare-k-2", "journalctl", "-u", "dynamo-worker@kvcr.service", "--since", since, "-o", "cat").stdout:
            assert time.monotonic() < deadline, "kvh2's worker did not give up its attachment"
            time.sleep(1)
        assert podman("exec", "kvshare-k-1", "systemctl", "start", "kvcr-state-agent.service",
                      "dynamo-worker@kvcr.service").returncode == 0
        out = attached(since)
        assert re.search(r"re-attach: restarted after \d+ failed probes, last: worker [0-9a-f]+ serves without a "
                         r"state-agent attachment \(registered, no intent\)", out), out[-4000:]

        status = ok(playbook(os.path.join(pb, "status.yml")))
        assert "dynamo-worker@kvcr.service" in status and "kvcr_worker_kv_transfer_config" not in status
        assert re.search(r"kvh1\s+kvcr-state-agent\.service\s+active", status), status[-3000:]
        assert re.search(r"kvh2\s+kvcr-service\.service\s+active", status), status[-3000:]
        ok(playbook(os.path.join(pb, "verify.yml")))

        # Reboots in both orders (kvh1 holds etcd and the agent): every engine attached again.
        reboot_both("kvshare-k-2", "kvshare-k-1")
        attached("-10min")
        reboot_both("kvshare-k-1", "kvshare-k-2")
        attached("-10min")
        ok(playbook(os.path.join(pb, "verify.yml")))

        ok(playbook(os.path.join(pb, "teardown.yml"), "-e", "teardown_skip_confirmation=true"))
        ok(playbook(os.path.join(HERE, "after_teardown.yml")))
    finally:
        # KVH_KVCR_KEEP=1 keeps the hosts (rerun single playbooks against them while debugging).
        if os.environ.get("KVH_KVCR_KEEP") != "1":
            playbook(os.path.join(HERE, "destroy.yml"))
        print("\nstep times:")
        for name, secs, rc in TIMES:
            print("  %-45s %6.1f s  rc=%s" % (name, secs, rc))
        print("  %-45s %6.1f s" % ("total", sum(t for dummy, t, dummy in TIMES)))
