# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The unit watch's start step: which systemctl calls it makes for which unit states; its waves,
crashes and the cause it reports."""
import os

import pytest

from ansible_collections.kvshare.dynamo.plugins.modules import dynamo_worker_unit_watch as mod


class Failed(Exception):
    pass


class FakeModule:
    """Answers `systemctl show` from a table of unit states and records every other call."""

    def __init__(self, states, check_mode=False, enable=True, rc=0):
        self.states, self.check_mode, self.rc = states, check_mode, rc
        self.params = {"enable": enable}
        self.calls = []

    def run_command(self, argv):
        if argv[1] == "show":
            props = argv[3].split(",")
            blocks = ["\n".join("%s=%s" % (p, self.states[u].get(p, "")) for p in props) for u in argv[4:]]
            return 0, "\n\n".join(blocks) + "\n", ""
        self.calls.append(argv[1:])
        return self.rc, "", "Unit not found." if self.rc else ""

    def fail_json(self, **kw):
        raise Failed(kw["msg"])


def spec(name, start):
    return {"name": name, "unit": "dynamo-worker@%s.service" % name, "start": start}


STATES = {"dynamo-worker@a.service": {"ActiveState": "active", "InvocationID": "inv-a", "UnitFileState": "enabled"},
          "dynamo-worker@b.service": {"ActiveState": "inactive", "InvocationID": "", "UnitFileState": "disabled"},
          "dynamo-worker@c.service": {"ActiveState": "active", "InvocationID": "inv-c", "UnitFileState": "enabled"},
          "dynamo-worker@d.service": {"ActiveState": "failed", "InvocationID": "", "UnitFileState": "enabled"}}


def test_one_call_per_verb_running_units_left_alone_restarts_name_what_they_replace():
    module = FakeModule(STATES)
    started, enabled, replaced = mod.start_units(module, "systemctl", [
        spec("a", "started"), spec("b", "started"), spec("c", "restarted"), spec("d", "started"), spec("e", "none")])
    assert started == ["b", "d", "c"]
    assert enabled == ["dynamo-worker@b.service"]
    assert replaced == {"c": "inv-c"}
    assert module.calls == [["enable", "dynamo-worker@b.service"],
                            ["start", "--no-block", "dynamo-worker@b.service", "dynamo-worker@d.service"],
                            ["restart", "--no-block", "dynamo-worker@c.service"]]


def test_nothing_to_start_makes_no_call():
    module = FakeModule(STATES)
    assert mod.start_units(module, "systemctl", [spec("a", "started"), spec("c", "none")]) == ([], [], {})
    assert module.calls == []


def test_check_mode_reports_and_changes_nothing():
    module = FakeModule(STATES, check_mode=True)
    started, enabled, dummy = mod.start_units(module, "systemctl", [spec("b", "started")])
    assert (started, enabled, module.calls) == (["b"], ["dynamo-worker@b.service"], [])


def test_a_failed_systemctl_call_fails_with_its_message():
    module = FakeModule(STATES, enable=False, rc=5)
    with pytest.raises(Failed, match=r"systemctl start dynamo-worker@b.service failed \(rc 5\): Unit not found"):
        mod.start_units(module, "systemctl", [spec("b", "started")])


class Host:
    """A host's systemd and workers in miniature: a started unit turns active at once, and its
    /health is ready after `ready_polls` health probes (a crashing one restarts on every show)."""

    def __init__(self, ready_polls, crashing=(), journals=None):
        self.ready_polls, self.crashing, self.journals = ready_polls, set(crashing), journals or {}
        self.active, self.restarts, self.polls, self.log, self.journal_calls = set(), {}, {}, [], []

    def run_command(self, argv, **kwargs):
        if argv[0].endswith("journalctl"):
            self.journal_calls.append(argv[1:])
            return 0, self.journals.get(argv[argv.index("-u") + 1], ""), ""
        verb, units = argv[1], [a for a in argv[2:] if a.startswith("dynamo-worker@")]
        if verb == "show":
            blocks = []
            for unit in units:
                if unit in self.crashing and unit in self.active:
                    self.restarts[unit] = self.restarts.get(unit, 0) + 1
                blocks.append("ActiveState=%s\nNRestarts=%d\nInvocationID=%s\nUnitFileState=enabled" % (
                    "active" if unit in self.active else "inactive", self.restarts.get(unit, 0),
                    "inv" if unit in self.active else ""))
            return 0, "\n\n".join(blocks) + "\n", ""
        if verb in ("start", "restart"):
            self.log.append((verb, units))
            self.active.update(units)
            return 0, "", ""
        return 0, "", ""

    def health(self, url, timeout):
        name = url.split("//", 1)[1].split("/", 1)[0]
        unit = "dynamo-worker@%s.service" % name
        if unit not in self.active or unit in self.crashing:
            return False, "no answer"
        self.polls[name] = self.polls.get(name, 0) + 1
        return self.polls[name] >= self.ready_polls, "HTTP 200 ready"


def watch(monkeypatch, capsys, host, units, **args):
    from ansible.module_utils.basic import AnsibleModule
    from lib.unit import run_module
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, argv, **kw: host.run_command(argv, **kw))
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, required=False: "/bin/" + name)
    monkeypatch.setattr(mod, "get_health", host.health)
    monkeypatch.setattr(mod.time, "sleep", lambda seconds: None)
    specs = [{"name": n, "unit": "dynamo-worker@%s.service" % n, "health_url": "http://%s/health" % n,
              "start": "started", "wave": w} for n, w in units]
    return run_module(mod, dict(dict(units=specs, interval=0.1, timeout=30), **args), capsys)


def test_each_wave_starts_once_the_one_before_is_ready(monkeypatch, capsys):
    host = Host(ready_polls=2)
    rc, out = watch(monkeypatch, capsys, host, [("a", 0), ("m", 0), ("b", 1), ("c", 2)])
    assert rc == 0, out
    assert host.log == [("start", ["dynamo-worker@a.service", "dynamo-worker@m.service"]),
                        ("start", ["dynamo-worker@b.service"]), ("start", ["dynamo-worker@c.service"])]
    # b started only after a and m were ready: each had its two health answers by then.
    assert out["ready"] == ["a", "m", "b", "c"] and out["pending"] == [] and out["changed"] is True
    assert [u["wave"] for u in out["units"]] == [0, 0, 1, 2]
    starts = [u["started_after_s"] for u in out["units"]]
    assert starts[0] == starts[1] <= starts[2] <= starts[3]


def test_a_crash_ends_the_watch_and_later_waves_never_start(monkeypatch, capsys):
    host = Host(ready_polls=1, crashing=["dynamo-worker@a.service"])
    rc, out = watch(monkeypatch, capsys, host, [("a", 0), ("b", 1)])
    assert rc == 1 and out["crashed"] == ["a"] and out["pending"] == ["b"]
    assert host.log == [("start", ["dynamo-worker@a.service"])]
    assert "worker a crashed while starting" in out["msg"] and "not started (a later wave): b" in out["msg"]


def test_a_wave_not_ready_in_time_leaves_the_next_pending(monkeypatch, capsys):
    host = Host(ready_polls=10 ** 9)
    clock = iter(range(0, 10 ** 6, 5))
    monkeypatch.setattr(mod.time, "monotonic", lambda: float(next(clock)))
    rc, out = watch(monkeypatch, capsys, host, [("a", 0), ("b", 1)], timeout=12)
    assert rc == 0 and out["not_ready"] == ["a", "b"] and out["pending"] == ["b"] and out["ready"] == []
    assert out["units"][0]["started_after_s"] >= 0 and out["units"][1]["started_after_s"] is None
    assert host.log == [("start", ["dynamo-worker@a.service"])]


# A real vLLM 0.31.0 worker's journal as the Maru connector refused its KV cache (tests/unit/plugins/
# module_utils/test_unit_watch.py says more).
with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "unit_watch",
                       "vllm_kv_layout_refused.journal")) as _handle:
    REFUSED = _handle.read()


def test_a_refused_kv_layout_ends_the_watch_at_the_first_restart_naming_the_cause(monkeypatch, capsys):
    host = Host(ready_polls=1, crashing=["dynamo-worker@a.service"], journals={"dynamo-worker@a.service": REFUSED})
    rc, out = watch(monkeypatch, capsys, host, [("a", 0), ("b", 1)])
    assert rc == 1 and out["crashed"] == ["a"] and out["pending"] == ["b"]
    # One restart, not crash_limit's two: a second try would load the model again to be refused again.
    assert out["units"][0]["restarts"] == 1
    assert out["cause"]["a"].startswith("kvshare_maru_connector.KVLayoutError: kvshare_maru_connector: layer "
                                        "model.layers.0.self_attn.attn (attention backend CPU_ATTN)")
    assert "cause (the first error its last run logged): kvshare_maru_connector.KVLayoutError: " in out["msg"]
    # The cause is read from this watch's runs only (--since its start); the tail shown is the
    # journal's own last lines.
    assert [c for c in host.journal_calls if "--since" in c] and [c for c in host.journal_calls if "--since" not in c]


def test_another_error_gets_its_restarts_and_is_named(monkeypatch, capsys):
    journal = "Starting dynamo-worker@a.service - w...\nTraceback (most recent call last):\nOSError: no such model\n"
    host = Host(ready_polls=1, crashing=["dynamo-worker@a.service"], journals={"dynamo-worker@a.service": journal})
    rc, out = watch(monkeypatch, capsys, host, [("a", 0)])
    assert rc == 1 and out["crashed"] == ["a"] and out["units"][0]["restarts"] == 2
    assert out["cause"] == {"a": "OSError: no such model"}
    assert "cause (the first error its last run logged): OSError: no such model" in out["msg"]
    # final_errors names what ends a watch at once.
    host = Host(ready_polls=1, crashing=["dynamo-worker@a.service"], journals={"dynamo-worker@a.service": journal})
    rc, out = watch(monkeypatch, capsys, host, [("a", 0)], final_errors=["OSError"])
    assert rc == 1 and out["units"][0]["restarts"] == 1
