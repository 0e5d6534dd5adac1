"""dynamo_workers_ready against local http.servers serving captured Dynamo answers (no urllib mocks)."""
import json
import os
import subprocess
import sys
import time

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
    assert all(type(v) is int for v in out["instance_ids"].values())
    assert out["instance_ids_str"] == {"A": str(A_ID), "B": str(B_ID), "M": str(M_ID)}
    assert out["rounds"] == 1 and out["not_ready"] == []
    wa = out["workers"][0]
    assert wa["mapping_method"] == "metrics_worker_id+rpc_port"
    assert wa["registered"] and wa["ready"] and wa["probes"] == 1
    assert wa["last_probe"]["status"] == 200 and "text_completion" in wa["last_probe"]["body"]
    assert 0 <= wa["registered_after_s"] <= wa["ready_after_s"]
    probes = fe.site.posts()
    assert sorted(p["nvext"]["backend_instance_id"] for p in probes) == sorted([A_ID, B_ID, M_ID])
    assert probes[0] == {"model": "tiny", "prompt": "hi", "max_tokens": 1, "temperature": 0,
                         "nvext": {"backend_instance_id": A_ID}}


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
         "dynamo_workers_ready", str(args)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert '"A": 3496660461086300990' in proc.stdout
    assert json.loads(proc.stdout)["instance_ids"]["A"] == A_ID


# --- watching the worker units (unit_template): a crash-looping worker fails fast -----------------

def show(active, sub, restarts, code=0, status=0, result="success", load="loaded"):
    """systemctl show output for the properties the module reads."""
    return ("Id=dynamo-worker@w.service\nLoadState=%s\nActiveState=%s\nSubState=%s\nResult=%s\nNRestarts=%d\n"
            "MainPID=0\nExecMainCode=%d\nExecMainStatus=%d\n" % (load, active, sub, result, restarts, code, status))


STARTING = show("activating", "start", 0)
CRASHED_1 = show("activating", "auto-restart", 0, 1, 1, "exit-code")    # first crash, restart pending
RESTARTED_1 = show("active", "running", 1, 1, 1, "exit-code")
CRASHED_2 = show("activating", "auto-restart", 1, 2, 9, "signal")        # second crash: SIGKILL


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def reader(pages):
    """unit -> the next parsed state of pages[unit] (the last one repeats)."""
    calls = {}

    def read(unit):
        seq = pages[unit]
        n = calls.get(unit, 0)
        calls[unit] = n + 1
        return dwr.unit_utils.parse_show(seq[min(n, len(seq) - 1)])
    read.calls = calls
    return read


def test_crash_loop_stops_waiting_at_the_second_crash(sites):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.append(fe)
    sites.append(a)
    clock = FakeClock()
    read = reader({"u-loop": [STARTING, CRASHED_1, RESTARTED_1, CRASHED_2]})
    res = dwr.wait_for_workers(fe.url, [
        {"name": "loop", "model": "tiny", "system_url": "http://127.0.0.1:%d" % free_port(), "unit": "u-loop"},
        {"name": "A", "model": "tiny", "system_url": a.url}],
        timeout=300, interval=0.5, request_timeout=1, clock=clock, sleep=clock.sleep, read_unit=read)
    loop, ok = res["workers"]
    assert res["crashed"] == ["loop"] and res["not_ready"] == ["loop"]
    assert res["rounds"] == 4 and res["elapsed_s"] == 1.5          # not the 300 s timeout
    assert ok["ready"] and ok["unit"] is None                       # a worker without unit is not watched
    assert loop["crashed"] and loop["unit_state"] == {"active_state": "activating", "sub_state": "auto-restart",
                                                      "n_restarts": 1, "crashes": 2, "main_pid": 0,
                                                      "last_exit": "signal SIGKILL (signal)"}
    assert loop["last_error"] == ("unit u-loop crashed 2 time(s) while starting: ActiveState activating/auto-restart, "
                                  "NRestarts 1, last exit signal SIGKILL (signal)")


def test_failed_unit_stops_at_once_and_one_crash_is_tolerated(sites):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.extend([fe, a])
    clock = FakeClock()
    failed = show("failed", "failed", 0, 1, 2, "exit-code")
    res = dwr.wait_for_workers(fe.url, [{"name": "x", "model": "tiny", "system_url": a.url, "unit": "u"}],
                               timeout=60, clock=clock, sleep=clock.sleep, read_unit=reader({"u": [failed]}))
    assert res["crashed"] == ["x"] and res["rounds"] == 1 and "last exit status 2 (exit-code)" in res["workers"][0]["last_error"]
    # one crash, then up: the worker is proven ready as usual
    clock = FakeClock()
    res = dwr.wait_for_workers(fe.url, [{"name": "A", "model": "tiny", "system_url": a.url, "unit": "u"}],
                               timeout=60, clock=clock, sleep=clock.sleep,
                               read_unit=reader({"u": [CRASHED_1, RESTARTED_1]}))
    assert res["crashed"] == [] and res["workers"][0]["ready"]
    assert res["workers"][0]["unit_state"]["crashes"] == 1


def test_unknown_unit_is_not_watched(sites):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.extend([fe, a])
    res = dwr.wait_for_workers(fe.url, [{"name": "A", "model": "tiny", "system_url": a.url, "unit": "u"}],
                               timeout=5, read_unit=reader({"u": [show("inactive", "dead", 0, load="not-found")]}))
    assert res["workers"][0]["ready"] and res["workers"][0]["unit_state"] is None and res["crashed"] == []


def fake_systemd(tmp_path, pages, journal):
    """Test doubles for systemctl (show: the next page per call) and journalctl (a fixed text) on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    state = tmp_path / "calls"
    state.write_text("0")
    (tmp_path / "pages.json").write_text(json.dumps(pages))
    (tmp_path / "journal.txt").write_text(journal)
    (bindir / "systemctl").write_text(
        "#!%s\n# Test double: systemctl show for dynamo_workers_ready (pages.json, one page per call).\n"
        "import json, sys\nassert sys.argv[1] == 'show' and sys.argv[-1].startswith('dynamo-worker@'), sys.argv\n"
        "n = int(open(%r).read())\nopen(%r, 'w').write(str(n + 1))\npages = json.load(open(%r))\n"
        "sys.stdout.write(pages[min(n, len(pages) - 1)])\n"
        % (sys.executable, str(state), str(state), str(tmp_path / "pages.json")))
    (bindir / "journalctl").write_text(
        "#!%s\n# Test double: journalctl -u <unit> for dynamo_workers_ready (journal.txt).\n"
        "import sys\nassert '-u' in sys.argv and '-n' in sys.argv, sys.argv\n"
        "sys.stdout.write('%%s (%%s lines)\\n' %% (sys.argv[-1], sys.argv[sys.argv.index('-n') + 1]))\n"
        "sys.stdout.write(open(%r).read())\n" % (sys.executable, str(tmp_path / "journal.txt")))
    for name in ("systemctl", "journalctl"):
        (bindir / name).chmod(0o755)
    return str(bindir)


def test_module_fails_fast_with_the_journal(sites, capsys, tmp_path, monkeypatch):
    fe = Frontend(["frontend_health_instances.json"])
    sites.append(fe)
    bindir = fake_systemd(tmp_path, [STARTING, CRASHED_1, RESTARTED_1, CRASHED_2],
                          "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ.get("PATH", ""))
    start = time.monotonic()
    rc, out = run_main(dict(frontend_url=fe.url, timeout=120, interval=0.05, request_timeout=1,
                            unit_template="dynamo-worker@{name}.service", journal_lines=7,
                            workers=[{"name": "w0", "model": "tiny",
                                      "system_url": "http://127.0.0.1:%d" % free_port()}]), capsys)
    assert time.monotonic() - start < 30
    assert rc == 1 and out["crashed"] == ["w0"] and out["workers"][0]["unit"] == "dynamo-worker@w0.service"
    msg = out["msg"]
    assert msg.startswith("Dynamo worker(s) w0 crash-looping: stopped waiting after ")
    assert "unit dynamo-worker@w0.service crashed 2 time(s) while starting" in msg
    assert "last journal lines of dynamo-worker@w0.service:\ndynamo-worker@w0.service (7 lines)\nTraceback" in msg
    assert "RuntimeError: CUDA out of memory" in out["workers"][0]["journal"]


def test_module_without_units_reads_no_systemd(sites, capsys, tmp_path, monkeypatch):
    fe = Frontend(["frontend_health_instances.json"])
    a = metrics_site(["vllm_worker_metrics_full.txt"])
    sites.extend([fe, a])
    bindir = fake_systemd(tmp_path, [show("failed", "failed", 5)], "")
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ.get("PATH", ""))
    rc, out = run_main(dict(frontend_url=fe.url, workers=[{"name": "A", "model": "tiny", "system_url": a.url}]), capsys)
    assert rc == 0 and out["crashed"] == [] and (tmp_path / "calls").read_text() == "0"
    rc, out = run_main(dict(frontend_url=fe.url, max_crashes=0,
                            workers=[{"name": "A", "model": "tiny", "system_url": a.url}]), capsys)
    assert rc == 1 and "max_crashes must be >= 1" in out["msg"]
