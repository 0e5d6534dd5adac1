"""verify.yml proves cross-instance sharing for real, and fails precisely when the pool is not shared."""
import json
import os
import tempfile

import yaml

from conftest import HOSTVARS, REPO, ansible_playbook


def _run_verify(report, *extra):
    return ansible_playbook("playbooks/verify.yml", "-e", "kvshare_verify_settle_s=0", *extra,
                            timeout=600), report


def _report(path):
    with open(path) as fh:
        return {(p["report"]["worker_a"]["name"], p["report"]["worker_b"]["name"]): p for p in json.load(fh)["pairs"]}


def test_verify_proves_sharing_through_the_pool(tmp_path):
    report = str(tmp_path / "verify.json")
    res, _ = _run_verify(report, "-e", "kvshare_verify_report=%s" % report)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    pairs = _report(report)
    vllm = pairs[("sb2/vllm-a", "sb2/vllm-b")]
    assert vllm["verdict"] == "passed", vllm["reasons"]
    rep = vllm["report"]
    assert rep["prompt_tokens"] >= 1500
    assert rep["a"]["hits"] == 0
    assert rep["b"]["hits"] > 0 and rep["b"]["external_kv_transfer"] > 0
    assert rep["b_hit_rate"] >= 0.5
    assert rep["texts_identical"] is True
    mock = pairs[("sb3/mock-a", "sb3/mock-b")]
    assert mock["verdict"] == "not_applicable"
    assert "B hit rate" in res.stdout and "passed" in res.stdout


def test_verify_is_repeatable_with_the_same_verdict(tmp_path):
    report = str(tmp_path / "again.json")
    res, _ = _run_verify(report, "-e", "kvshare_verify_report=%s" % report)
    assert res.returncode == 0, res.stdout[-3000:]
    assert _report(report)[("sb2/vllm-a", "sb2/vllm-b")]["verdict"] == "passed"


def test_verify_fails_precisely_when_b_uses_another_pool(tmp_path):
    """Point worker B at a different directory (a real reconfiguration and restart), then restore."""
    workers = yaml.safe_load(open(os.path.join(REPO, "inventories", "sandbox", "host_vars", "sb2.yml")))["dynamo_workers"]
    moved = json.loads(json.dumps(workers))
    moved[1]["kv_transfer_config"]["kv_connector_extra_config"]["shared_storage_path"] = "/srv/kvshare/kvpool/elsewhere"
    extra = tmp_path / "moved.json"
    extra.write_text(json.dumps({"dynamo_workers": moved}))
    report = str(tmp_path / "negative.json")
    try:
        res = ansible_playbook("playbooks/site.yml", "--limit", "sb1,sb2", "--tags", "dynamo_worker",
                               "-e", "@%s" % extra)
        assert res.returncode == 0, res.stdout[-3000:]
        # The pair is named explicitly: with different directories the workers no longer share a pool.
        res, _ = _run_verify(report, "-e", "kvshare_verify_report=%s" % report, "-e", "@%s" % extra,
                             "-e", '{"kvshare_verify_pairs": [{"a": "sb2/vllm-a", "b": "sb2/vllm-b"}]}')
        assert res.returncode != 0
        pair = _report(report)[("sb2/vllm-a", "sb2/vllm-b")]
        assert pair["verdict"] == "failed"
        assert any("took 0 of" in r and "same pool" in r for r in pair["reasons"]), pair["reasons"]
    finally:
        res = ansible_playbook("playbooks/site.yml", "--limit", "sb1,sb2", "--tags", "dynamo_worker")
        assert res.returncode == 0, res.stdout[-3000:]
    assert HOSTVARS["sb2"]["dynamo_workers"][1]["name"] == "vllm-b"
