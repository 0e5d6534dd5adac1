"""KVCR memory-service variant on two podman systemd containers (CPU only), through site.yml.

Only with KVSHARE_INTEGRATION=1 (needs podman, the image localhost/kvshare-sandbox:bookworm, the
sandbox wheelhouse plus kvcr 0.1.1 / nixl 1.5.0 / nixl-cu12 1.5.0 wheels in $KVH_KVCR_DIR/wheelhouse,
and 127.0.40.1-2 free). Creates kvh-kvcr-1/2, runs site.yml twice (the second run must change
nothing), runs checks.yml (systemd-analyze verify, socket, pool, state agent in etcd, worker kill,
BindsTo=), removes the containers. The vLLM side of KVCR needs CUDA: a dynamo.mocker stands in.
"""
import os
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
VENV_BIN = os.path.join(REPO, ".venv", "bin")

pytestmark = pytest.mark.skipif(os.environ.get("KVSHARE_INTEGRATION") != "1",
                                reason="set KVSHARE_INTEGRATION=1 to run the podman integration test")


def playbook(path):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               PATH=VENV_BIN + os.pathsep + os.environ["PATH"])
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", os.path.join(HERE, "inventory.yml"), path],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)


def recap(out):
    found = dict((h, dict(zip(("ok", "changed", "failed"), map(int, m))))
                 for h, *m in re.findall(r"(kvh\d)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out))
    assert set(found) == {"kvh1", "kvh2"}, out[-3000:]
    return found


def test_memory_service_variant_on_cpu():
    try:
        assert playbook(os.path.join(HERE, "create.yml")).returncode == 0
        first = playbook(os.path.join(REPO, "site.yml"))
        assert first.returncode == 0, first.stdout[-6000:]
        second = playbook(os.path.join(REPO, "site.yml"))
        assert second.returncode == 0, second.stdout[-6000:]
        assert all(r["changed"] == 0 for r in recap(second.stdout).values()), second.stdout[-6000:]
        checks = playbook(os.path.join(HERE, "checks.yml"))
        assert checks.returncode == 0, checks.stdout[-6000:]
        assert "NRestarts 0 -> 0" in checks.stdout
    finally:
        playbook(os.path.join(HERE, "destroy.yml"))
