# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.unit_watch and workers.gpu_order: crash counting, readiness, same-GPU order."""
import os

from ansible_collections.kvshare.dynamo.plugins.module_utils import unit_watch as uw
from ansible_collections.kvshare.dynamo.plugins.module_utils import workers


def props(active="active", sub="running", n=0, code="", status=""):
    return {"ActiveState": active, "SubState": sub, "NRestarts": str(n), "ExecMainCode": code,
            "ExecMainStatus": status, "Result": "success"}


def test_parse_show():
    assert uw.parse_show_blocks("ActiveState=active\nNRestarts=3\nbogus\n", 1) == [{"ActiveState": "active", "NRestarts": "3"}]


def test_health_ready():
    assert uw.health_ready(200, '{"status":"ready","endpoints":[]}')
    assert uw.health_ready(200, '{"status":"healthy"}')
    assert uw.health_ready(200, "")
    assert not uw.health_ready(503, '{"status":"notready"}')
    assert not uw.health_ready(200, '{"status":"notready"}')
    assert not uw.health_ready(None, "")


def test_two_automatic_restarts_are_a_crash():
    t = uw.UnitTrack("vllm-a", "dynamo-worker@vllm-a.service")
    t.update(props(n=4), 0.0)          # restarts before the watch do not count
    assert not t.crashed(0.0, 2, 15)
    t.update(props(active="activating", sub="auto-restart", n=5, code="1", status="1"), 1.0)
    assert t.restarts == 1 and not t.crashed(1.0, 2, 15)
    t.update(props(active="activating", sub="start", n=6, code="1", status="1"), 2.0)
    assert t.crashed(2.0, 2, 15)
    rep = t.report()
    assert rep["restarts"] == 2 and rep["n_restarts"] == 6 and rep["last_exit"] == "exited 1"
    assert "2 automatic restart(s) during the watch (NRestarts 6), last exit exited 1" in uw.describe(rep)


def test_explicit_restart_resets_the_baseline():
    """The rollout's no_block restart may land after the watch began: NRestarts drops to 0."""
    t = uw.UnitTrack("a", "u")
    t.update(props(n=7), 0.0)
    t.update(props(active="activating", sub="start", n=0), 0.5)
    t.update(props(n=1), 1.0)
    assert t.restarts == 1 and not t.crashed(1.0, 2, 15)


def test_a_passing_failed_state_is_no_crash():
    """A restart whose stop timed out passes through "failed" before its start job runs."""
    t = uw.UnitTrack("a", "u")
    t.update(props(active="failed", sub="failed", code="2", status="9"), 0.0)
    assert not t.crashed(1.0, 2, 15)
    t.update(props(active="activating", sub="start"), 2.0)
    assert not t.crashed(30.0, 2, 15)
    t.update(props(active="failed", sub="failed"), 40.0)   # start limit hit: stays failed
    assert not t.crashed(50.0, 2, 15)
    assert t.crashed(55.0, 2, 15)


def test_gpu_order_follows_the_start_waves():
    ws = [{"name": "a", "gpus": ["0"]}, {"name": "m", "gpus": ["1"]}, {"name": "b", "gpus": ["0"]},
          {"name": "c", "gpus": ["0", "2"]}, {"name": "d", "gpus": ["2"]}, {"name": "x"}]
    order = workers.gpu_order(ws)
    assert order["a"] == {"after": None, "before": "b"}
    assert order["b"] == {"after": "a", "before": "c"}
    assert order["c"] == {"after": "b", "before": "d"}      # chained through GPU 2
    assert order["d"] == {"after": "c", "before": None}
    assert order["m"] == {"after": None, "before": None}
    assert order["x"] == {"after": None, "before": None}
    waves = workers.start_waves(ws)
    for name, rel in order.items():
        if rel["after"]:
            assert [i for i, w in enumerate(waves) if rel["after"] in w][0] < [i for i, w in enumerate(waves) if name in w][0]


def test_diagnosis_names_pool_units_and_workers():
    units = uw.diagnosis_units("sb2", ["dynamo_workers", "maru_pool"], [{"name": "vllm-a", "system_port": 18081}], "127.0.10.2")
    assert [u["unit"] for u in units] == ["maru-resource-manager.service", "maru-server.service", "dynamo-worker@vllm-a.service"]
    assert units[2]["health_url"] == "http://127.0.10.2:18081/health" and units[1]["pool"]
    reports = [
        dict(uw.UnitTrack("maru-server", "maru-server.service", pool=True).report(), active_state="inactive", sub_state="dead"),
        dict(uw.UnitTrack("vllm-a", "dynamo-worker@vllm-a.service").report(), active_state="active", sub_state="running",
             restarts=3, n_restarts=9, health="no answer (Connection refused)"),
        dict(uw.UnitTrack("vllm-b", "dynamo-worker@vllm-b.service").report(), active_state="active", sub_state="running",
             health="HTTP 200 ready", ready=True),
    ]
    lines = uw.diagnosis_lines("sb2", reports)
    assert lines == [
        "pool unit maru-server.service on sb2: inactive/dead",
        "worker dynamo-worker@vllm-a.service on sb2: restarted 3 time(s) while watched (NRestarts 9), "
        "/health no answer (Connection refused)",
    ]


def test_journal_tail_drops_the_health_poll_noise():
    text = "\n".join(["ERROR tower_http::trace::on_failure: response failed 503"] * 50
                     + ["Traceback (most recent call last):", "OSError: not a model"]
                     + ["ERROR tower_http::trace::on_failure: response failed 503"] * 5)
    assert uw.journal_tail(text, 40, ["tower_http::trace::on_failure"]) == "Traceback (most recent call last):\nOSError: not a model"
    assert uw.journal_tail(text, 1, []).endswith("503")


# The journal (journalctl -o cat) of a real vLLM 0.31.0 worker refused by the Maru connector in the
# sandbox (fault case 15: every layer a sliding window): two crashed runs, each a ~300-line
# traceback that ends in vLLM's wrappers, then systemd starting the unit again.
REFUSED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "unit_watch",
                       "vllm_kv_layout_refused.journal")


def test_journal_cause_is_the_root_error_of_the_last_crashed_run():
    with open(REFUSED) as handle:
        text = handle.read()
    cause = uw.journal_cause(text, ["tower_http::trace::on_failure"])
    assert cause.startswith("kvshare_maru_connector.KVLayoutError: kvshare_maru_connector: layer "
                            "model.layers.0.self_attn.attn (attention backend CPU_ATTN): KV view shape "
                            "(1024, 2, 128, 64) stride (16384, 8192, 64, 1) dtype torch.bfloat16 is not "
                            "supported: KV cache spec SlidingWindowSpec"), cause
    assert "\x1b" not in cause
    # ... which the tail the message shows does not hold: only vLLM's wrappers.
    tail = uw.journal_tail(text, 40, ["tower_http::trace::on_failure"])
    assert "KVLayoutError" not in tail and "Engine core initialization failed" in tail


def test_final_error_matches_the_class_name_in_any_module():
    assert uw.final_error("kvshare_maru_connector.KVLayoutError: layer x", ["KVLayoutError"])
    assert uw.final_error("KVLayoutError: layer x", ["KVLayoutError"])
    assert not uw.final_error("RuntimeError: Worker failed with error 'KVLayoutError'", ["KVLayoutError"])
    assert not uw.final_error("", ["KVLayoutError"]) and not uw.final_error("OSError: x", [])


def test_journal_cause_reads_the_last_run_that_logged_an_error():
    text = "\n".join([
        "Starting dynamo-worker@a.service - Dynamo worker a...",
        "OSError: an old run's error",
        "Starting dynamo-worker@a.service - Dynamo worker a...",
        "(Worker pid=9) ERROR 12-04 12:29:34 [x.py:1] Traceback (most recent call last):",
        "(Worker pid=9) ERROR 12-04 12:29:34 [x.py:1] ValueError: the root cause",
        "RuntimeError: Worker failed with error 'the root cause'",
        "dynamo-worker@a.service: Scheduled restart job, restart counter is at 2.",
        "Starting dynamo-worker@a.service - Dynamo worker a...",
        "\x1b[32m INFO\x1b[0m loading the model",
    ])
    assert uw.journal_cause(text) == "ValueError: the root cause"
    assert uw.journal_cause("Starting x.service\nINFO all good\n") == ""
    assert uw.journal_cause("") == ""
    # Excluded lines are not causes.
    assert uw.journal_cause("ConnectionError: 503 tower_http::trace::on_failure\nOSError: real",
                            ["tower_http::trace::on_failure"]) == "OSError: real"


def test_health_of_the_replaced_invocation_does_not_count():
    """A no_block restart is only queued when the watch begins: the old process may still answer."""
    t = uw.UnitTrack("vllm-c", "u", "http://x/health", replaced_invocation="aaa")
    t.update(dict(props(), InvocationID="aaa"), 0.0)
    assert not t.current
    t.update(dict(props(active="activating", sub="start"), InvocationID=""), 0.5)
    assert not t.current
    t.update(dict(props(), InvocationID="bbb"), 1.0)
    assert t.current
    assert uw.UnitTrack("m", "u").current


def test_watch_units_ask_the_module_to_start_or_restart():
    from ansible_collections.kvshare.dynamo.plugins.filter.internal.dynamo import worker_watch_units
    ws = [{"name": "a", "system_port": 1, "model": "m"}, {"name": "b", "system_port": 2, "model": "m"}]
    units = worker_watch_units(ws, "127.0.0.1", True, ["a"])
    assert [(u["name"], u["start"]) for u in units] == [("a", "restarted"), ("b", "started")]
    assert units[1]["health_url"] == "http://127.0.0.1:2/health"
    assert all("start" not in u for u in worker_watch_units(ws, "127.0.0.1"))


def test_show_blocks_one_per_unit_in_order():
    text = "ActiveState=active\nInvocationID=aaa\n\nActiveState=inactive\nInvocationID=\n"
    assert uw.parse_show_blocks(text, 3) == [{"ActiveState": "active", "InvocationID": "aaa"},
                                             {"ActiveState": "inactive", "InvocationID": ""}, {}]
    assert uw.parse_show_blocks("", 1) == [{}]
