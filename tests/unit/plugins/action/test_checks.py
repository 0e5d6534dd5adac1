# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The checks action (plugins/action/checks.py): several asserts in one task, with assert's
semantics check by check. The functions first, then the action in a real ansible-playbook run on the
controller, where the templating is Ansible's own (what the functions cannot show: each check
templated only when reached)."""
import json
import os
import subprocess

import pytest
import render_lib
from ansible_collections.kvshare.dynamo.plugins.action.checks import check_errors, run_checks


def evaluate(cond):
    return bool(eval(cond, {}, {"x": 1, "y": 2}))  # noqa: S307  (a test's own expressions)


def render(text):
    if text == "boom":
        raise AssertionError("a message was rendered that must not be")
    return text


def test_the_first_false_condition_fails_with_its_check_and_the_rest_is_not_reached():
    checks = [{"name": "one", "that": ["x == 1", "y == 2"], "fail_msg": "boom"},
              {"name": "two", "that": ["x == 1", "y == 3", "x == 9"], "fail_msg": "two failed"},
              {"name": "three", "that": "undefined_name", "fail_msg": "boom"}]
    res = run_checks(checks, evaluate, render)
    assert res == {"failed": True, "changed": False, "check": "two", "assertion": "y == 3", "evaluated_to": False,
                   "msg": "two failed"}


def test_when_skips_a_check_and_notes_are_kept_in_order():
    checks = [{"name": "skipped", "that": "x == 9", "fail_msg": "boom", "when": ["x == 1", "y == 3"]},
              {"name": "a note", "note": "first", "when": "x == 1"},
              {"name": "not a note", "note": "boom", "when": "y == 9"},
              {"name": "a list note", "note": ["second", "third"]},
              {"name": "passes", "that": ["x == 1"]}]
    res = run_checks(checks, evaluate, render)
    assert res == {"changed": False, "msg": ["first", "second", "third"], "notes": ["first", "second", "third"],
                   "_ansible_verbose_always": True}
    assert run_checks([{"name": "passes", "that": "x == 1"}], evaluate, render) == {"changed": False, "msg": "All checks passed"}
    failed = run_checks(checks[1:2] + [{"name": "fails", "that": "y == 1"}], evaluate, render)
    assert failed["check"] == "fails" and failed["notes"] == ["first"] and failed["msg"] == "Assertion failed"


@pytest.mark.parametrize("checks,error", [
    ([], "non-empty list"),
    ("x == 1", "non-empty list"),
    (["x == 1"], "checks[0] must be a mapping"),
    ([{"that": "x == 1"}], "a name is required"),
    ([{"name": "n", "that": "x == 1", "note": "m"}], "either that (with fail_msg) or note"),
    ([{"name": "n"}], "either that (with fail_msg) or note"),
    ([{"name": "n", "that": []}], "that is empty"),
    ([{"name": "n", "that": "x", "msg": "m"}], "unknown keys msg"),
])
def test_a_malformed_checks_argument_is_named(checks, error):
    errors = check_errors(checks)
    assert any(error in e for e in errors), errors


PLAYBOOK = """
- name: The checks action on the controller
  hosts: localhost
  gather_facts: false
  vars:
    good: [1, 2]
  tasks:
    - name: Checks that pass, a note, and messages that cannot be rendered unless reached
      vars:
        __errors: "{{ good | select('>', 5) | list }}"
      kvshare.dynamo.checks:
        checks:
          - name: first
            that: [good | length == 2]
            fail_msg: "{{ undefined_variable.attribute }}"
          - name: guarded
            that: [undefined_variable.attribute == 1]
            fail_msg: "{{ undefined_variable.attribute }}"
            when: good | length > 5
          - name: a note
            note: "first item {{ good | first }}"
      register: passed

    - name: A failing check, then one that would fail on an undefined variable if it were reached
      kvshare.dynamo.checks:
        checks:
          - name: second
            that: [__errors | length == 0, good | length == 3]
            fail_msg: "{{ __errors }} and {{ good | length }} items"
          - name: third
            that: [undefined_variable.attribute == 1]
            fail_msg: "{{ undefined_variable.attribute }}"
      vars:
        __errors: "{{ good | select('>', 5) | list }}"
      register: failed
      ignore_errors: true

    - name: Write what the two tasks returned
      kvshare.dynamo.report_json:
        path: "{{ out }}"
        content: "{{ {'passed': passed, 'failed': failed} }}"
"""


@pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")
def test_the_action_in_a_playbook(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    proc = subprocess.run([render_lib.ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml"),
                           "-e", json.dumps({"out": str(out)})], cwd=render_lib.REPO, env=render_lib.ansible_env(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert not res["passed"].get("failed") and res["passed"]["notes"] == ["first item 1"]
    failed = res["failed"]
    assert failed["failed"] and failed["check"] == "second" and failed["assertion"] == "good | length == 3"
    assert failed["msg"] == "[] and 2 items"
