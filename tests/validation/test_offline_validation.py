# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Offline validation of the example inventories for real hosts (no host is contacted).

`ansible-playbook -i <inventory> playbooks/validate.yml -e kvshare_validate_offline=true` must pass
on the controller for inventories/single_node, inventories/two_node_kvcr, inventories/sample and
inventories/multi_node_maru (a pool host and two worker hosts), run only
controller-side validation (changed=0 everywhere), and report each host probe as
"skipped offline: ...". site.yml must pass --syntax-check with each of them.
"""
import os
import re
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
INVENTORIES = ["single_node", "two_node_kvcr", "sample", "multi_node_maru"]

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="ansible-playbook not in the venv")


def run(tmp_path, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default")
    return subprocess.run([os.path.join(BIN, "ansible-playbook")] + list(args), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_offline_validation_passes(tmp_path, inventory):
    proc = run(tmp_path, "-i", os.path.join("inventories", inventory), "playbooks/validate.yml",
               "-e", "kvshare_validate_offline=true")
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:] + proc.stderr[-2000:]
    recaps = re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)
    assert recaps and all(r[1:] == ("0", "0", "0") for r in recaps), recaps
    assert "TASK [Gathering Facts]" not in out
    assert "Validating arguments against arg spec 'preflight'" in out
    # every host probe reports itself skipped offline, none reports passed
    assert "skipped offline: etcd_client_port/etcd_peer_port" in out
    assert "skipped offline: dynamo_frontend_http_port" in out
    assert "skipped offline: dynamo_workers on" in out
    if inventory in ("single_node", "sample"):
        assert "skipped offline: maru_pool on gpu-node-1" in out
    if inventory == "multi_node_maru":
        assert "skipped offline: maru_pool on cxl-pool-1" in out


def closed_loopback_port():
    """A loopback TCP port bound but not listening: a connection to it is refused at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def test_offline_flag_unset_keeps_gathering(tmp_path):
    proc = run(tmp_path, "-i", "inventories/single_node", "playbooks/validate.yml", "--list-tasks")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with closed_loopback_port() as sock:
        port = sock.getsockname()[1]
        proc = run(tmp_path, "-i", "inventories/single_node", "playbooks/validate.yml", "--check",
                   "-e", "ansible_host=127.0.0.1", "-e", "ansible_port=%d" % port,
                   "-e", "ansible_ssh_common_args='-o ConnectTimeout=1'", "-e", "ansible_ssh_retries=0")
    # The default mode contacts the host (here a closed loopback port): never local.
    assert "TASK [Gathering Facts]" in proc.stdout
    assert re.search(r"gpu-node-1\s*:\s*ok=0\s+changed=0\s+unreachable=1", proc.stdout), proc.stdout[-3000:]
    assert "port %d: Connection refused" % port in proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_site_syntax_check(tmp_path, inventory):
    proc = run(tmp_path, "-i", os.path.join("inventories", inventory), "playbooks/site.yml", "--syntax-check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
