# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""dynamo_workers_ready against local http.servers serving captured Dynamo answers (no urllib mocks)."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dynamo_fixture_server import (FakeSite, Reply, fixture_text, free_port,  # noqa: E402
                                   json_reply)

from ansible.module_utils.testing import patch_module_args  # noqa: E402
from ansible_collections.kvshare.dynamo.plugins.modules import dynamo_workers_ready as dwr  # noqa: E402

A_ID = 3496660461086300990
B_ID = 3496660461086300987
M_ID = 3496660461086300939
B_NEW_ID = 3496660461086301466
M2_ID = 3496660461086301434
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def metrics_site(pages):
    """A worker system server; pages: list of fixture names, advancing per /metrics call."""
    calls = {"n": 0}

    def handler(method, path, body):
        i = min(calls["n"], len(pages) - 1)
        calls["n"] += 1
        return Reply(200, fixture_text(pages[i]), "text/plain; version=0.0.4")
    return FakeSite(handler)


class Frontend:
    def __init__(self, health_pages, probe=None):
        self.health_pages = health_pages
        self.health_calls = 0
        self.probe = probe or (lambda req, n: json_reply(fixture_text(
            "completion_probe_vllm_200.json")))
        self.probe_calls = {}
        self.site = FakeSite(self._handle)

    def _handle(self, method, path, body):
        if path.startswith("/health"):
            page = self.health_pages[min(self.health_calls, len(self.health_pages) - 1)]
            self.health_calls += 1
            return json_reply(fixture_text(page))
        req = json.loads(body)
        iid = req["nvext"]["backend_instance_id"]
        n = self.probe_calls.get(iid, 0)
        self.probe_calls[iid] = n + 1
        return self.probe(req, n)

    @property
    def url(self):
        return self.site.url


@pytest.fixture
def sites():
    made = []
    yield made
    for s in made:
        (s.site if isinstance(s, Frontend) else s).close()


def run_main(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            dwr.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_all_ready_in_one_round(sites, capsys):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    b = metrics_site(["kv_vllm/metrics_b_0.txt"])
    m = metrics_site(["mocker_worker_metrics_full.txt"])
    sites.extend([fe, a, b, m])
    rc, out = run_main(dict(frontend_url=fe.url, workers=[
        {"name": "A", "model": "tiny", "system_url": a.url, "rpc_port": 28091},
        {"name": "B", "model": "tiny", "system_url": b.url},
        {"name": "M", "model": "tinym", "system_url": m.url}]), capsys)
    assert rc == 0 and out["changed"] is False and not out.get("failed")
    assert out["instance_ids"] == {"A": A_ID, "B": B_ID, "M": M_ID}
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in out["instance_ids"].values())
    assert out["instance_ids_str"] == {"A": str(A_ID), "B": str(B_ID), "M": str(M_ID)}
    assert out["rounds"] == 1 and out["not_ready"] == []
    wa = out["workers"][0]
    assert wa["mapping_method"] == "metrics_worker_id+rpc_port"
    assert wa["registered"] and wa["ready"] and wa["probes"] == 1
    assert wa["last_probe"]["status"] == 200 and "text_completion" in wa["last_probe"]["body"]
    assert 0 <= wa["registered_after_s"] <= wa["ready_after_s"]
    probes = fe.site.posts()
    assert sorted(p["nvext"]["backend_instance_id"] for p in probes) == sorted([A_ID, B_ID, M_ID])
    assert [p for p in probes if p["nvext"]["backend_instance_id"] == A_ID] == [
        {"model": "tiny", "prompt": "hi", "max_tokens": 1, "temperature": 0, "nvext": {"backend_instance_id": A_ID}}]


def test_probes_the_workers_side_by_side(sites, capsys):
    # Each completion is answered only once both have arrived: probed one after the other, the
    # first would wait out the barrier and fail.
    import threading
    barrier = threading.Barrier(2, timeout=5)

    def probe(req, n):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return Reply(503, b"{}", "application/json")
        return json_reply(fixture_text("completion_probe_vllm_200.json"))
    fe = Frontend(["frontend_health_instances.json"], probe=probe)
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    b = metrics_site(["kv_vllm/metrics_b_0.txt"])
    sites.extend([fe, a, b])
    rc, out = run_main(dict(frontend_url=fe.url, timeout=8, workers=[
        {"name": "A", "model": "tiny", "system_url": a.url, "rpc_port": 28091},
        {"name": "B", "model": "tiny", "system_url": b.url}]), capsys)
    assert rc == 0 and not out.get("failed"), out
    assert out["rounds"] == 1 and out["not_ready"] == []
    assert [w["probes"] for w in out["workers"]] == [1, 1]


def test_waits_for_registration_then_503_then_ready(sites):
    # restarted B: metrics before registration, then registered, first probe 503, then 200
    fe = Frontend(["frontend_health_b_not_registered.json"] * 4
                  + ["frontend_health_with_dead_mocker.json"],
                  probe=lambda req, n: json_reply(fixture_text("error_503_dead_worker.json"), 503)
                  if n == 0 else json_reply(fixture_text("completion_probe_vllm_200.json")))
    b = metrics_site(["vllm_worker_metrics_preregistration.txt"] * 4
                     + ["vllm_worker_metrics_after_restart.txt"])
    sites.extend([fe, b])
    res = dwr.wait_for_workers(fe.url, [{"name": "B", "model": "tiny", "system_url": b.url}],
                               timeout=10, interval=0.05, request_timeout=2)
    (w,) = res["workers"]
    assert w["ready"] and w["instance_id"] == B_NEW_ID
    assert w["probes"] == 2 and w["last_probe"]["status"] == 200
    assert res["rounds"] == 6
    assert 0 < w["registered_after_s"] < w["ready_after_s"]


def test_timeout_names_every_worker_and_last_answer(sites, capsys):
    fe = Frontend(["frontend_health_with_dead_mocker.json"],
                  probe=lambda req, n: json_reply(fixture_text("error_503_dead_worker.json"), 503))
    never = metrics_site(["kv_vllm/metrics_b_0.txt"])      # old B id: not registered
    dead = metrics_site(["kv_mocker/metrics_b_0.txt"])     # M2: registered, answers 503
    sites.extend([fe, never, dead])
    rc, out = run_main(dict(frontend_url=fe.url, timeout=0.4, interval=0.1, workers=[
        {"name": "never", "model": "tiny", "system_url": never.url},
        {"name": "dead", "model": "tinym", "system_url": dead.url},
        {"name": "gone", "model": "tiny", "system_url": "http://127.0.0.1:%d" % free_port()}]),
        capsys)
    assert rc == 1 and out["failed"] is True
    assert out["not_ready"] == ["never", "dead", "gone"]
    msg = out["msg"]
    assert msg.startswith("3 of 3 Dynamo worker(s) not ready after 0.4s: ")
    assert ("never (instance %d, registered=False): instance %d is not (yet) among the frontend's "
            "generate instances; last probe answer: no probe sent" % (B_ID, B_ID)) in msg
    assert ("dead (instance %d, registered=True): completion probe: HTTP 503" % M2_ID) in msg
    assert 'HTTP 503 {"message":"Service temporarily unavailable"' in msg
    assert "gone (instance None, registered=False): worker /metrics at" in msg
    dead_w = out["workers"][1]
    assert dead_w["probes"] >= 2 and dead_w["last_probe"]["status"] == 503


def test_registration_only_without_probe(sites):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.extend([fe, a])
    res = dwr.wait_for_workers(fe.url, [{"name": "A", "model": "tiny", "system_url": a.url}],
                               timeout=5, completion_probe=False)
    assert res["workers"][0]["ready"] and res["workers"][0]["probes"] == 0
    assert fe.site.posts() == []


def test_mixed_list_probes_only_the_workers_that_ask_for_it(sites, capsys):
    # a re-run: A was restarted (completion required), M kept running (its registration suffices)
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    m = metrics_site(["mocker_worker_metrics_full.txt"])
    sites.extend([fe, a, m])
    rc, out = run_main(dict(frontend_url=fe.url, workers=[
        {"name": "A", "model": "tiny", "system_url": a.url},
        {"name": "M", "model": "tinym", "system_url": m.url, "completion_probe": False}]), capsys)
    assert rc == 0 and out["not_ready"] == []
    wa, wm = out["workers"]
    assert (wa["completion_probe"], wa["probes"]) == (True, 1)
    assert (wm["completion_probe"], wm["probes"], wm["registered"], wm["ready"]) == (False, 0, True, True)
    assert [p["nvext"]["backend_instance_id"] for p in fe.site.posts()] == [A_ID]


def test_registration_alone_is_not_enough_when_unregistered(sites):
    # completion_probe false never passes a worker the frontend does not list
    fe = Frontend(["frontend_health_b_not_registered.json"])
    b = metrics_site(["vllm_worker_metrics_preregistration.txt"])
    sites.extend([fe, b])
    res = dwr.wait_for_workers(fe.url, [{"name": "B", "model": "tiny", "system_url": b.url,
                                         "completion_probe": False}],
                               timeout=0.3, interval=0.1, request_timeout=1)
    assert res["not_ready"] == ["B"] and not res["workers"][0]["registered"]
    assert fe.site.posts() == []


def test_frontend_down(sites):
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.append(a)
    res = dwr.wait_for_workers("http://127.0.0.1:%d" % free_port(),
                               [{"name": "A", "model": "tiny", "system_url": a.url}],
                               timeout=0.2, interval=0.1, request_timeout=1)
    w = res["workers"][0]
    assert not w["ready"] and w["instance_id"] == A_ID
    assert "frontend /health" in w["last_error"] and res["frontend_error"]


def test_worker_restart_changes_id(sites):
    # the worker's id changes between rounds (restart): registration is re-evaluated
    fe = Frontend(["frontend_health_instances.json", "frontend_health_instances.json",
                   "frontend_health_with_dead_mocker.json"],
                  probe=lambda req, n: json_reply(fixture_text("error_503_dead_worker.json"), 503)
                  if req["nvext"]["backend_instance_id"] == B_ID
                  else json_reply(fixture_text("completion_probe_vllm_200.json")))
    b = metrics_site(["kv_vllm/metrics_b_0.txt", "kv_vllm/metrics_b_0.txt",
                      "vllm_worker_metrics_after_restart.txt"])
    sites.extend([fe, b])
    res = dwr.wait_for_workers(fe.url, [{"name": "B", "model": "tiny", "system_url": b.url}],
                               timeout=5, interval=0.05)
    w = res["workers"][0]
    assert w["ready"] and w["instance_id"] == B_NEW_ID and res["rounds"] == 3


@pytest.mark.parametrize("bad,msg", [
    ({"interval": 1.5}, "interval must be > 0 and <= 1"),
    ({"interval": 0}, "interval must be > 0 and <= 1"),
    ({"timeout": -1}, "timeout must be >= 0"),
    ({"request_timeout": 0}, "request_timeout must be > 0"),
    ({"workers": []}, "workers must not be empty"),
])
def test_validation(bad, msg, capsys):
    args = dict(frontend_url="http://127.0.0.1:1",
                workers=[{"name": "a", "model": "m", "system_url": "http://x"}])
    args.update(bad)
    rc, out = run_main(args, capsys)
    assert rc == 1 and msg in out["msg"]


def test_duplicate_names_and_missing_suboption(capsys):
    rc, out = run_main(dict(frontend_url="http://127.0.0.1:1", workers=[
        {"name": "a", "model": "m", "system_url": "http://x"},
        {"name": "a", "model": "m", "system_url": "http://y"}]), capsys)
    assert rc == 1 and "unique" in out["msg"]
    rc, out = run_main(dict(frontend_url="http://127.0.0.1:1",
                            workers=[{"name": "a", "model": "m"}]), capsys)
    assert rc == 1 and "system_url" in out["msg"]


def test_check_mode_runs_and_probes(sites, capsys):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.extend([fe, a])
    rc, out = run_main(dict(frontend_url=fe.url, _ansible_check_mode=True,
                            workers=[{"name": "A", "model": "tiny", "system_url": a.url}]), capsys)
    assert rc == 0 and out["instance_ids"] == {"A": A_ID} and len(fe.site.posts()) == 1


def test_runs_as_a_standalone_module_with_exact_ids(sites, tmp_path):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.extend([fe, a])
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "frontend_url": fe.url,
        "workers": [{"name": "A", "model": "tiny", "system_url": a.url}]}}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections"))
    proc = subprocess.run(
        [sys.executable, "-m", "ansible_collections.kvshare.dynamo.plugins.modules."
         "dynamo_workers_ready", str(args)], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert '"A": 3496660461086300990' in proc.stdout
    assert json.loads(proc.stdout)["instance_ids"]["A"] == A_ID
