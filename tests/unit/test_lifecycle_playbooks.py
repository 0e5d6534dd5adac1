# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""teardown.yml's confirmation and status.yml's exit status, offline.

teardown.yml asks for "yes" before it stops anything; without a terminal the question gets no
answer and the run stops in its first play, before any host is contacted. Every caller in the test
suites passes teardown_skip_confirmation=true (CI has no stdin): a caller without it would fail.

status.yml fails at its end, after the table and the JSON report (0600), naming what is not healthy:
here a host whose units and worker are not running (connection local: this machine runs no
systemd, every unit reads "unknown"; the worker's system port and the frontend are closed
loopback ports) and a host that cannot be reached (SSH to a closed loopback port). The day-2 suite
checks the healthy stack (exit 0) and a stopped worker on real hosts (tests/day2/test_1_observe.py).
"""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

import render_lib

pytestmark = pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")

CALLER_TREES = ("tests", "molecule", "bench", "sandbox", "tools", ".ci")


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(tmp_path, playbook, inventory, *extra):
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    cmd = [render_lib.ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inventory.json"), playbook] + list(extra)
    proc = subprocess.run(cmd, cwd=render_lib.REPO, env=render_lib.ansible_env(tmp_path), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def unreachable(port):
    return {"ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "nobody",
            "ansible_ssh_common_args": "-o BatchMode=yes -o ConnectTimeout=5"}


def test_teardown_asks_and_stops_before_any_change_without_an_answer(tmp_path):
    port = closed_port()
    inventory = {"all": {"children": {"dynamo": {"children": {"dynamo_workers": {"hosts": {"w1": unreachable(port)}}}},
                                      "etcd": {"hosts": {"w1": {}}}}}}
    rc, out = run(tmp_path, "playbooks/teardown.yml", inventory, "-e", "teardown_etcd=true")
    assert rc != 0, out[-4000:]
    assert "Teardown stopped before any change: the answer was not 'yes'" in out, out[-4000:]
    assert "Not waiting for response to prompt as stdin is not interactive" in out, out[-4000:]
    # The first play ended the run: no host was contacted, no role was included.
    assert "PLAY [Stop and remove the workers]" not in out and "UNREACHABLE" not in out, out[-4000:]
    # Skipped confirmation: the run goes on to the workers (and fails there: the host is unreachable).
    rc, out = run(tmp_path, "playbooks/teardown.yml", inventory, "-e", "teardown_skip_confirmation=true")
    # The workers' role starts with its liveness timer (it restarts workers), before any worker.
    assert rc != 0 and ("TASK [kvshare.dynamo.dynamo_worker : Stop and disable the workers' liveness timer and probe]"
                        in out), out[-4000:]
    assert "UNREACHABLE" in out, out[-4000:]


@pytest.mark.parametrize("playbook,skip", [("teardown.yml", "teardown_skip_confirmation=true"),
                                           ("remove_host.yml", "remove_host_skip_confirmation=true")])
def test_every_caller_skips_the_confirmation(playbook, skip):
    """A test, benchmark or CI script that runs teardown.yml or remove_host.yml passes the playbook's
    skip variable in the same call (else it stops at the question, or hangs on a terminal)."""
    callers = []
    name = re.escape(playbook)
    python_call = re.compile(r"playbook\((?:[^()]|\([^()]*\))*\)")
    shell_call = re.compile(r"ansible-playbook[^\n]*\b%s[^\n]*" % name)
    for tree in CALLER_TREES:
        for root, dirs, files in os.walk(os.path.join(render_lib.REPO, tree)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "fixtures")]
            for fname in files:
                path = os.path.join(root, fname)
                if not fname.endswith((".py", ".sh", ".yml", ".cfg")) and not os.access(path, os.X_OK):
                    continue
                with open(path, errors="replace") as fh:
                    text = fh.read()
                for call in [c for c in python_call.findall(text) if re.search(r"\b%s" % name, c)] + shell_call.findall(text):
                    callers.append((os.path.relpath(path, render_lib.REPO), call))
    assert len(callers) >= 3, "the scan found too few callers of %s (it is broken): %s" % (playbook, callers)
    missing = [(path, call) for path, call in callers if skip not in call]
    assert not missing, missing


def test_status_fails_naming_what_is_not_healthy_after_the_report(tmp_path):
    port = closed_port()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "kvshare_bind_address": "127.0.0.1"}
    inventory = {"all": {"children": {"dynamo": {"children": {
        "dynamo_frontend": {"hosts": {"fe": dict(local, dynamo_frontend_http_port=port)}},
        "dynamo_workers": {"hosts": {
            "gpu": dict(local, dynamo_workers=[{"name": "w0", "engine": "mocker", "model": "m", "gpus": ["0"],
                                                "system_port": port}]),
            "gone": unreachable(port)}}}}}}}
    report = tmp_path / "status.json"
    rc, out = run(tmp_path, "playbooks/status.yml", inventory, "-e", "status_report=%s" % report)
    assert rc != 0, out[-4000:]
    failure = re.search(r"The stack is not healthy: (.*)", out)
    assert failure, out[-4000:]
    for problem in ("fe: dynamo-frontend.service is unknown", "gpu: dynamo-worker@w0.service is unknown",
                    "gpu: worker w0 is not ready: worker /metrics at http://127.0.0.1:%d" % port, "gone: could not be read"):
        assert problem in failure.group(1), (problem, failure.group(1))
    # The table came first, and the report was written, private.
    assert "TASK [Show the stack]" in out and re.search(r"gpu\s+dynamo-worker@w0\.service\s+unknown\s+w0", out), out[-4000:]
    assert os.stat(report).st_mode & 0o777 == 0o600
    doc = json.loads(report.read_text())
    assert doc["summary"]["healthy"] is False and [h["host"] for h in doc["hosts"]] == ["fe", "gpu"]
    assert any(p.startswith("gone: could not be read") for p in doc["problems"]), doc["problems"]
