# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The unit watch's start step: which systemctl calls it makes for which unit states."""
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
