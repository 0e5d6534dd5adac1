# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Run roles/maru_pool against one podman systemd container with the Maru test double.

Only with KVSHARE_INTEGRATION=1 (needs podman, the image localhost/kvshare-sandbox:bookworm, and
127.0.30.1 ports 9850/5555 free). Creates container kvh-maru, runs the role twice (second run must
report changed=0 and keep the RM secret), checks the port-clash preflight, removes the container.
"""
import os
import re
import shutil
import subprocess
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
VENV_BIN = os.path.join(REPO, ".venv", "bin")
NAME = "kvh-maru"
IMAGE = os.environ.get("KVSHARE_SANDBOX_IMAGE", "localhost/kvshare-sandbox:bookworm")

pytestmark = pytest.mark.skipif(os.environ.get("KVSHARE_INTEGRATION") != "1",
                                reason="set KVSHARE_INTEGRATION=1 to run the podman integration test")


def sh(*argv, check=True, **kw):
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kw)


def playbook(artifacts, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), PATH=VENV_BIN + os.pathsep + os.environ["PATH"])
    return subprocess.run(
        [os.path.join(VENV_BIN, "ansible-playbook"), "-i", os.path.join(HERE, "inventory.yml"),
         os.path.join(HERE, "playbook.yml"), "-e", "maru_pool_artifacts_dir=%s" % artifacts] + list(extra),
        cwd=REPO, env=env, capture_output=True, text=True, check=False)


def recap(out):
    match = re.search(r"kvh-maru\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out)
    assert match, out[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    if not shutil.which("podman"):
        pytest.skip("podman not installed")
    if sh("podman", "image", "exists", IMAGE, check=False).returncode != 0:
        pytest.skip("image %s not built (sandbox/build-image.sh)" % IMAGE)
    artifacts = str(tmp_path_factory.mktemp("maru-artifacts") / "out")
    sh("bash", os.path.join(REPO, "tests", "doubles", "maru", "build-artifacts.sh"), artifacts, "3.11")
    sh("podman", "rm", "-f", NAME, check=False)
    sh("podman", "run", "-d", "--name", NAME, "--runtime", "runc", "--network", "host", "--shm-size=256m",
       "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--systemd=always", IMAGE, "/sbin/init")
    try:
        for dummy in range(30):
            state = sh("podman", "exec", NAME, "systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(1)
        yield artifacts
    finally:
        sh("podman", "rm", "-f", NAME, check=False)


def test_role_converges_and_is_idempotent(container):
    first = playbook(container)
    assert first.returncode == 0, first.stdout[-4000:]
    assert recap(first.stdout)["changed"] > 0
    assert "skipped: no CXL hardware" in first.stdout
    secret1 = re.search(r"SECRET_SHA1=(\w+)", first.stdout).group(1)

    second = playbook(container)
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second.stdout)["changed"] == 0, second.stdout[-4000:]
    assert re.search(r"SECRET_SHA1=(\w+)", second.stdout).group(1) == secret1

    units = sh("podman", "exec", NAME, "systemctl", "is-active", "maru-resource-manager", "maru-server").stdout.split()
    assert units == ["active", "active"]
    rules = sh("podman", "exec", NAME, "cat", "/etc/udev/rules.d/70-maru-dax.rules").stdout
    assert 'GROUP="maru", MODE="0660"' in rules


def test_restart_keeps_secret_and_preflight_names_port_holder(container):
    before = sh("podman", "exec", NAME, "sha256sum", "/var/lib/maru-resourced/secret").stdout
    sh("podman", "exec", NAME, "systemctl", "restart", "maru-resource-manager")
    assert sh("podman", "exec", NAME, "sha256sum", "/var/lib/maru-resourced/secret").stdout == before
    sh("podman", "exec", NAME, "systemctl", "stop", "maru-server", "maru-resource-manager")
    sh("podman", "exec", "-d", NAME, "python3", "-m", "http.server", "--bind", "127.0.30.1", "9850")
    time.sleep(1)
    # The listener dies with the container (removed by the fixture).
    run = playbook(container, "--tags", "maru_pool_preflight")
    assert run.returncode != 0
    assert "maru_pool_rm_port 9850 is held by python3" in run.stdout, run.stdout[-3000:]
