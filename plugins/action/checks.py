# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""kvshare.dynamo.checks: several ansible.builtin.assert checks in one task, in order.

Each task costs the controller about 15 ms per host whatever it does (a worker process, the task's
templating, the callbacks): validation's 60-odd asserts were about a fifth of a no-op re-run. Here
a run of consecutive checks is one task, with assert's own semantics kept check by check: a
check's conditions are evaluated in order, the first false one fails the task with that check's
message, and the checks after it are not evaluated (a later check may rely on an earlier one, as a
later assert task did). Each check's ``when``, ``that`` and message are templated only when it is
reached (finalize_task_arg below), so a message that can only be rendered on bad input is never
rendered on good input, as with one assert task per check.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

CHECK_KEYS = frozenset(("name", "that", "fail_msg", "when", "note"))


def listify(value):
    """A condition list as assert and when take it: one item or a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_errors(checks):
    """What is wrong with the shape of the ``checks`` argument (not with what the checks check)."""
    if not isinstance(checks, list) or not checks:
        return ["checks must be a non-empty list of checks"]
    errors = []
    for index, check in enumerate(checks):
        where = "checks[%d]" % index
        if not isinstance(check, dict):
            errors.append("%s must be a mapping" % where)
            continue
        unknown = sorted(set(check) - CHECK_KEYS)
        if unknown:
            errors.append("%s (%s): unknown keys %s" % (where, check.get("name", "?"), ", ".join(unknown)))
        if not isinstance(check.get("name"), str) or not check.get("name"):
            errors.append("%s: a name is required (it names the check in a failure)" % where)
        if ("that" in check) == ("note" in check):
            errors.append("%s (%s): give either that (with fail_msg) or note" % (where, check.get("name", "?")))
        elif "that" in check and not listify(check["that"]):
            errors.append("%s (%s): that is empty" % (where, check.get("name", "?")))
    return errors


def run_checks(checks, evaluate, render):
    """Evaluate ``checks`` in order with ``evaluate`` (a conditional to bool) and ``render`` (a
    template to its value). Returns the task result: the first false condition fails it, with the
    keys ansible.builtin.assert returns (msg, assertion, evaluated_to) and ``check``, that check's
    name. The notes of the checks reached before (a ``note`` is a message given when its ``when``
    holds) are kept."""
    notes = []
    for check in checks:
        if not all(evaluate(cond) for cond in listify(check.get("when"))):
            continue
        if "note" in check:
            note = render(check["note"])
            notes.extend(note if isinstance(note, list) else [note])
            continue
        for cond in listify(check["that"]):
            if not evaluate(cond):
                result = {"failed": True, "changed": False, "check": check["name"], "assertion": cond,
                          "evaluated_to": False, "msg": render(check.get("fail_msg", "Assertion failed"))}
                if notes:
                    result["notes"] = notes
                return result
    result = {"changed": False, "msg": notes or "All checks passed"}
    if notes:
        result["notes"] = notes
        result["_ansible_verbose_always"] = True
    return result


class ActionModule(ActionBase):
    """Evaluate several assert checks in order, in one task, on the controller."""

    TRANSFERS_FILES = False
    _requires_connection = False

    @classmethod
    def finalize_task_arg(cls, name, value, templar, context):
        # The checks stay as written: each is templated when run() reaches it, like the `that` of
        # ansible.builtin.assert (this hook is how assert keeps it; ansible-core 2.19).
        if name == "checks":
            return value
        return super(ActionModule, cls).finalize_task_arg(name, value, templar, context)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        unknown = sorted(set(self._task.args) - {"checks"})
        checks = self._task.args.get("checks")
        errors = check_errors(checks) + (["unknown arguments: %s" % ", ".join(unknown)] if unknown else [])
        if errors:
            raise AnsibleActionFail("kvshare.dynamo.checks: " + "; ".join(errors))
        result.update(run_checks(checks, self._templar.evaluate_conditional, self._templar.template))
        return result
