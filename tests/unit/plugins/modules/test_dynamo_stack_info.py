# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""dynamo_stack_info against local http.servers serving captured Dynamo answers (no urllib mocks)."""
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dynamo_fixture_server import FakeSite, Reply, fixture_text, json_reply  # noqa: E402

from ansible.module_utils.testing import patch_module_args  # noqa: E402
from ansible_collections.kvshare.dynamo.plugins.modules import dynamo_stack_info as dss  # noqa: E402

VLLM_A_ID = 3496660461086300990  # worker_id 3086a229cb33db3e, request plane :28091


def worker_site(metrics="vllm_worker_metrics_full.txt", health_status=200):
    def handler(method, path, body):
        if path == "/metrics":
            return Reply(200, fixture_text(metrics), "text/plain; version=0.0.4")
        return json_reply(fixture_text("worker_health_vllm_ready.json"), health_status)
    return FakeSite(handler)


def frontend_site(page="frontend_health_instances.json"):
    return FakeSite(lambda method, path, body: json_reply(fixture_text(page)))


@pytest.fixture
def sites():
    made = []
    yield made
    for s in made:
        s.close()


def test_worker_targets_from_inventory_entries():
    got = dss.worker_targets([{"name": "w0", "engine": "vllm", "system_port": 18081, "rpc_port": 19081, "gpus": ["0", "1"]},
                              {"name": "m0", "system_port": "18082", "gpus": 3}], "10.0.0.2")
    assert got == [{"name": "w0", "system_url": "http://10.0.0.2:18081", "rpc_port": 19081, "gpu": "0,1", "engine": "vllm"},
                   {"name": "m0", "system_url": "http://10.0.0.2:18082", "rpc_port": None, "gpu": "3", "engine": "vllm"}]


def test_unit_states_from_systemctl_show():
    answers = {"etcd.service": (0, "ActiveState=active\nSubState=running\nLoadState=loaded\n", ""),
               "gone.service": (0, "ActiveState=inactive\nSubState=dead\nLoadState=not-found\n", ""),
               "err.service": (1, "", "boom")}
    got = dss.unit_states(lambda argv: answers[argv[-1]], ["etcd.service", "gone.service", "err.service"])
    assert [(u["unit"], u["state"]) for u in got] == [("etcd.service", "active"), ("gone.service", "not-found"),
                                                      ("err.service", "unknown")]


def test_registered_worker_is_ready_with_hit_rate(sites):
    worker, frontend = worker_site(), frontend_site()
    sites += [worker, frontend]
    _res, instances, err = dss.dynamo_http.fetch_instances(frontend.url, 5)
    got = dss.worker_status({"name": "a", "system_url": worker.url, "rpc_port": 28091, "gpu": "0"}, instances, err, 5)
    assert got["instance_id"] == str(VLLM_A_ID) and got["registered"] and got["ready"] and got["health"] == 200
    assert got["queries"] is not None and got["error"] is None


def test_unhealthy_or_unregistered_worker_is_not_ready(sites):
    worker, frontend = worker_site(health_status=503), frontend_site()
    sites += [worker, frontend]
    _res, instances, err = dss.dynamo_http.fetch_instances(frontend.url, 5)
    got = dss.worker_status({"name": "a", "system_url": worker.url, "rpc_port": 28091, "gpu": "0"}, instances, err, 5)
    assert got["registered"] and not got["ready"] and "503" in got["error"]
    got = dss.worker_status({"name": "a", "system_url": worker.url, "rpc_port": 28091, "gpu": "0"}, None,
                            "frontend /health: connection refused", 5)
    assert not got["registered"] and not got["ready"] and "connection refused" in got["error"]


class Journal:
    """systemctl and journalctl of a host whose worker unit runs invocation INVOCATION and logged
    ``lines``; ``grep``: whether journalctl supports --grep (a build without pattern matching refuses it)."""
    INVOCATION = "5b1f0c4e8d2a4f6f9a7c3e1d2b4a6c8e"

    def __init__(self, lines, grep=True):
        self.lines, self.grep, self.calls = lines, grep, []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        if argv[0] == "systemctl" and "--property=InvocationID" in argv:
            return 0, self.INVOCATION + "\n", ""
        if argv[0] == "systemctl":
            return 0, "ActiveState=active\nSubState=running\nLoadState=loaded\n", ""
        assert argv[0] == "journalctl" and "_SYSTEMD_INVOCATION_ID=%s" % self.INVOCATION in argv, argv
        if "--grep" in argv:
            if not self.grep:
                return 1, "", "Compiled without pattern matching support"
            pattern = re.compile(argv[argv.index("--grep") + 1])
            found = [line for line in self.lines if pattern.search(line)]
            return (0 if found else 1), "".join(line + "\n" for line in found), ""
        return 0, "".join(line + "\n" for line in self.lines), ""


def journal_lines():
    """A vLLM worker's journal while its pool was full (tests/fixtures/dynamo/README.md: captured in
    the sandbox, fault case 12)."""
    return fixture_text("worker_journal_maru_pool_full.txt").splitlines()


@pytest.mark.parametrize("grep", [True, False], ids=["journalctl_grep", "filtered_here"])
def test_kv_errors_counts_the_failed_stores_of_the_current_invocation(grep):
    journal = Journal(journal_lines(), grep=grep)
    assert len(journal_lines()) > 200
    got = dss.kv_errors(journal, "dynamo-worker@vllm-a.service")
    # The capture: 29 skipped stores and loads in 15 s, and nothing else of the kinds counted.
    assert got == {"save": 0, "store": 0, "load": 0, "connect": 29, "handler": 0, "total": 29,
                   "last": "2026-12-03T20:36:57+0000 sb2 python[5164]: Failed to connect to MaruServer at tcp://127.0.10.2:5555"}, got
    assert dss.kv_errors(Journal(["INFO worker started", "INFO 12 requests"], grep=grep), "u")["total"] == 0


def test_kv_errors_of_a_unit_that_is_not_running_is_none():
    assert dss.kv_errors(lambda argv, **kw: (0, "\n", ""), "dynamo-worker@a.service") is None


def test_main_names_a_worker_whose_kv_stores_fail(sites, capsys, monkeypatch):
    worker, frontend = worker_site(), frontend_site()
    sites += [worker, frontend]
    host, port = worker.url.rsplit("/", 1)[-1].split(":")
    journal = Journal(journal_lines())
    monkeypatch.setattr(dss.AnsibleModule, "run_command", lambda self, argv, **kw: journal(argv, **kw))
    args = {"frontend_url": frontend.url, "units": [], "address": host,
            "workers": [{"name": "a", "system_port": int(port), "rpc_port": 28091, "gpus": ["0"], "engine": "vllm"},
                        {"name": "m", "system_port": int(port), "rpc_port": 28091, "engine": "mocker"}]}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            dss.main()
    out = json.loads(capsys.readouterr().out)
    assert out["workers"][0]["ready"] and out["workers"][0]["kv_errors"]["total"] > 0
    assert out["workers"][1]["kv_errors"] is None  # a mocker has no KV connector: its journal is not read
    assert [p for p in out["problems"] if p.startswith("worker a cannot use its KV pool: ")], out["problems"]
    assert not [c for c in journal.calls if "dynamo-worker@m.service" in c]


def test_main_is_read_only(sites, capsys, monkeypatch):
    monkeypatch.setattr(dss.AnsibleModule, "run_command", lambda self, argv, **kw: Journal(["INFO up"])(argv, **kw))
    worker, frontend = worker_site(), frontend_site()
    sites += [worker, frontend]
    host, port = worker.url.rsplit("/", 1)[-1].split(":")
    args = {"frontend_url": frontend.url, "units": [], "address": host,
            "workers": [{"name": "a", "system_port": int(port), "rpc_port": 28091, "gpus": ["0"], "engine": "vllm"}]}
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            dss.main()
    out = json.loads(capsys.readouterr().out)
    assert out["changed"] is False and out["workers"][0]["ready"] and out["workers"][0]["gpu"] == "0"
    assert out["problems"] == []


def test_problems_name_every_unit_not_active_and_every_worker_not_ready():
    units = [{"unit": "etcd.service", "state": "active"}, {"unit": "dynamo-worker@a.service", "state": "inactive"},
             {"unit": "maru-server.service", "state": "not-found"}]
    workers = [{"name": "a", "ready": False, "error": "worker /metrics at http://h:1: connection refused"},
               {"name": "b", "ready": True, "error": None}, {"name": "c", "ready": False, "error": None}]
    assert dss.problems(units, workers) == [
        "dynamo-worker@a.service is inactive", "maru-server.service is not-found",
        "worker a is not ready: worker /metrics at http://h:1: connection refused", "worker c is not ready"]
    assert dss.problems([{"unit": "etcd.service", "state": "active"}], [{"name": "b", "ready": True, "error": None}]) == []
    failed = {"save": 2, "store": 1, "load": 0, "connect": 0, "handler": 0, "total": 3,
              "last": "ERROR [connector.py:859] Maru save error: k_L3: full"}
    assert dss.problems([], [{"name": "b", "ready": True, "error": None, "kv_errors": failed}]) == [
        "worker b cannot use its KV pool: 'Maru save error' x2, 'Maru store failed' x1 in its journal since it started "
        "(last: ERROR [connector.py:859] Maru save error: k_L3: full)"]
