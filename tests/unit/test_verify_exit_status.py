# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""verify.yml's own exit status: it fails when a pair's verdict is `failed`, and passes a shared pool.

Catches: verify.yml failing only on `error` (or on nothing) and not on `failed`. The negative
control of the sandbox checks calls run_check directly, and the disruptive and fault cases that do
run verify.yml are outside CI, so only this test sees the playbook's own exit status.

The real `ansible-playbook verify.yml` runs (connection local: the frontend host and the worker
host are 127.0.0.1) against a stand-in for Dynamo's frontend and two vLLM workers
(tests/doubles/kv_share_stack/kv_share_stack.py) on 127.0.0.1. The two workers share GPU 0 and a
pool declared by hand (ExampleConnector with one shared_storage_path; prefix caching off), so
verify.yml pairs them and kv_share_check applies in full; the pair is not a Maru pair, so verify.yml
neither delegates to A's host nor polls a maru-server. With the pool shared, B's counters show
the external prefix-cache hits: verify.yml exits 0 and reports `passed`. With the pool broken, B
computes the prompt again (no hits): verify.yml exits non-zero, fails in its last task, and its
report (KVSHARE_VERIFY_REPORT) gives the pair the verdict `failed`.
"""
import json
import os
import subprocess
import sys

import pytest

import render_lib
from lib.unit import load_script

pytestmark = pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")

STANDIN = os.path.join(render_lib.REPO, "tests", "doubles", "kv_share_stack", "kv_share_stack.py")
MODEL = "tiny"


@pytest.fixture(name="standin")
def fixture_standin():
    module = load_script(STANDIN)
    stacks = []

    def start(pool):
        stacks.append(module.KvShareStack(pool, model=MODEL))
        return stacks[-1]
    yield start
    for stack in stacks:
        stack.close()


def inventory(stack):
    local = {"ansible_host": "127.0.0.1", "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "kvshare_bind_address": "127.0.0.1"}
    pool = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"shared_storage_path": "/var/lib/kvshare/kv-standin"}}
    workers = [{"name": "vllm-%s" % w.name, "engine": "vllm", "model": "/opt/kvshare/models/tiny-llama",
                "served_model_name": MODEL, "gpus": ["0"], "system_port": stack.system_port(pos), "rpc_port": w.rpc_port,
                "prefix_caching": False, "kv_transfer_config": pool} for pos, w in enumerate(stack.workers)]
    return {"all": {"children": {"dynamo": {"children": {
        "dynamo_frontend": {"hosts": {"fe": dict(local, dynamo_frontend_http_port=stack.frontend_port)}},
        "dynamo_workers": {"hosts": {"gpu": dict(local, dynamo_workers=workers)}}}}}}}


def run_verify(tmp_path, stack):
    (tmp_path / "inventory.json").write_text(json.dumps(inventory(stack)))
    report = tmp_path / "reports" / "verify.json"
    env = render_lib.ansible_env(tmp_path, KVSHARE_VERIFY_REPORT=str(report))
    cmd = [render_lib.ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inventory.json"), "verify.yml",
           "-e", json.dumps({"kvshare_verify_settle_s": 0, "kvshare_verify_request_timeout": 10, "kvshare_verify_diagnose_s": 1})]
    proc = subprocess.run(cmd, cwd=render_lib.REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    output = proc.stdout + proc.stderr
    assert report.exists(), "verify.yml wrote no report:\n" + output[-6000:]
    return proc.returncode, output, json.loads(report.read_text())


def measured(stack):
    """(worker, prompt tokens, external hits) of the measured prompt on A and on B: each worker's last
    request (kv_share_check warms both workers up first, with other prompts of the same length)."""
    return [next(r for r in reversed(stack.requests) if r[0] == name) for name in ("a", "b")]


def test_shared_pool_passes(tmp_path, standin):
    stack = standin("shared")
    rc, output, report = run_verify(tmp_path, stack)
    assert [p["verdict"] for p in report["pairs"]] == ["passed"], output[-6000:]
    assert rc == 0, "verify.yml failed although its one pair passed:\n" + output[-6000:]
    (_a, a_tokens, a_hits), (_b, b_tokens, b_hits) = measured(stack)
    assert a_tokens >= 1500 and a_hits == 0 and b_hits > 0.5 * b_tokens, stack.requests
    assert "gpu/vllm-a -> gpu/vllm-b" in output and "passed" in output


def test_failed_pair_fails_the_playbook(tmp_path, standin):
    stack = standin("broken")
    rc, output, report = run_verify(tmp_path, stack)
    pairs = report["pairs"]
    assert [p["verdict"] for p in pairs] == ["failed"], output[-6000:]
    assert any("worker B took 0 of" in reason for reason in pairs[0]["reasons"]), pairs[0]["reasons"]
    (_a, a_tokens, _a_hits), (_b, _b_tokens, b_hits) = measured(stack)
    assert a_tokens >= 1500 and b_hits == 0, stack.requests
    assert rc != 0, "verify.yml exited 0 although its pair's verdict is failed:\n" + output[-6000:]
    # It fails where it should: in its last task, naming the reason, and not because something else broke.
    tail = output[output.index("TASK [Fail when sharing is not proven]"):]
    assert "fatal: [fe]" in tail and "worker B took 0 of" in tail, output[-6000:]
    assert "fatal:" not in output[:output.index("TASK [Fail when sharing is not proven]")], output[-6000:]
