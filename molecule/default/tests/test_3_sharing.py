# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""verify.yml proves cross-instance sharing through the real Maru pool, on one host and across hosts,
and fails precisely when the pool is not shared or its data is not what A stored."""
import json
import os

import pytest
import yaml

from conftest import HOSTVARS, INVENTORY, address, ansible_playbook


def _run_verify(report, *extra):
    return ansible_playbook("playbooks/verify.yml", *extra, timeout=600), report


def _report(path):
    with open(path) as fh:
        return {(p["report"]["worker_a"]["name"], p["report"]["worker_b"]["name"]): p for p in json.load(fh)["pairs"]}


def test_verify_proves_sharing_through_the_pool(tmp_path):
    report = str(tmp_path / "verify.json")
    res, dummy = _run_verify(report, "-e", "kvshare_verify_report=%s" % report)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    pairs = _report(report)
    # The same pool (sb2's maru-server) on one host and across hosts.
    for key in (("sb2/vllm-a", "sb2/vllm-b"), ("sb2/vllm-a", "sb3/vllm-c")):
        vllm = pairs[key]
        assert vllm["verdict"] == "passed", (key, vllm["reasons"])
        assert vllm["pool"] == "maru:tcp://%s:5555" % address("sb2")
        rep = vllm["report"]
        assert rep["prompt_tokens"] >= 1500
        assert rep["a"]["hits"] == 0
        assert rep["b"]["hits"] >= rep["prompt_tokens"] / 2 and rep["b"]["external_kv_transfer"] > 0
        assert rep["b_hit_rate"] >= 0.5
        assert rep["texts_identical"] is True
        # A's KV was seen landing in Maru (polled through maru-server), not waited for blindly.
        assert rep["store"]["error"] is None and rep["store"]["after"] > rep["store"]["before"], rep["store"]
        assert any(c["name"] == "a_stored" and c["ok"] for c in rep["checks"])
    mock = pairs[("sb3/mock-a", "sb3/mock-b")]
    assert mock["verdict"] == "not_applicable"
    assert "B hit rate" in res.stdout and "passed" in res.stdout


@pytest.mark.disruptive
def test_verify_fails_precisely_when_b_uses_another_pool(tmp_path):
    """Point worker B at another pool (vLLM's ExampleConnector on a directory of its own: a real
    reconfiguration and restart), then restore."""
    workers = {h: yaml.safe_load(open(os.path.join(INVENTORY, "host_vars", "%s.yml" % h)))["dynamo_workers"]
               for h in ("sb2", "sb3")}
    moved = json.loads(json.dumps(workers))
    moved["sb2"][1].pop("kv_pool")  # no longer fed by the Maru pool
    moved["sb2"][1]["kv_transfer_config"] = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                                             "kv_connector_extra_config": {"shared_storage_path": "/var/lib/dynamo/elsewhere"}}
    extra = tmp_path / "moved.json"
    # Extra vars apply to every host: each host gets its own list (the cross-host checks read them all).
    extra.write_text(json.dumps({"kvshare_test_workers": moved,
                                 "dynamo_workers": "{{ kvshare_test_workers[inventory_hostname] | default([]) }}"}))
    report = str(tmp_path / "negative.json")
    try:
        res = ansible_playbook("playbooks/site.yml", "--limit", "sb1,sb2", "--tags", "dynamo_worker",
                               "-e", "@%s" % extra)
        assert res.returncode == 0, res.stdout[-3000:]
        # The pair is named explicitly: with different directories the workers no longer share a pool.
        res, dummy = _run_verify(report, "-e", "kvshare_verify_report=%s" % report, "-e", "@%s" % extra,
                                 "-e", '{"kvshare_verify_pairs": [{"a": "sb2/vllm-a", "b": "sb2/vllm-b"}]}')
        assert res.returncode != 0
        pair = _report(report)[("sb2/vllm-a", "sb2/vllm-b")]
        assert pair["verdict"] == "failed"
        assert any("took 0 of" in r and "same pool" in r for r in pair["reasons"]), pair["reasons"]
    finally:
        res = ansible_playbook("playbooks/site.yml", "--limit", "sb1,sb2", "--tags", "dynamo_worker")
        assert res.returncode == 0, res.stdout[-3000:]
    assert HOSTVARS["sb2"]["dynamo_workers"][1]["name"] == "vllm-b"
