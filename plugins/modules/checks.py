#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Documentation of the checks action (plugins/action/checks.py): it runs on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checks
short_description: Several assert checks in one task, in order
version_added: "0.1.0"
description:
  - Evaluates O(checks) in order, each as M(ansible.builtin.assert) would, and fails at the first
    false condition with that check's O(checks[].fail_msg). The checks after it are not evaluated.
  - Each check's O(checks[].when), O(checks[].that) and messages are templated only when the check
    is reached, so a message rendered only on bad input is not rendered on good input.
  - An action plugin, on the controller; no module runs on a host. One task instead of one per
    check saves the controller its per-task, per-host cost (validation runs about 60 checks per
    host).
options:
  checks:
    description: The checks, in the order they are evaluated.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: What the check checks; a failure returns it as RV(check).
        type: str
        required: true
      that:
        description: Conditions, as in M(ansible.builtin.assert); all must hold. Exclusive with O(checks[].note).
        type: list
        elements: raw
      fail_msg:
        description: The failure's message (a string or a list of strings), as in M(ansible.builtin.assert).
        type: raw
        default: Assertion failed
      when:
        description: Conditions, all of which must hold for the check to be evaluated.
        type: list
        elements: raw
      note:
        description: A message to report (in RV(notes)) when O(checks[].when) holds, instead of conditions.
        type: raw
author:
  - kvshare.dynamo developers (@kvshare)
"""

EXAMPLES = r"""
- name: Check the frontend inputs
  kvshare.dynamo.checks:
    checks:
      - name: Check that the inventory has one frontend
        that:
          - groups['dynamo_frontend'] | default([]) | length == 1
        fail_msg: "group dynamo_frontend must have one host"
      - name: Report the port probe skipped (offline validation)
        note: "skipped offline: dynamo_frontend_http_port on {{ inventory_hostname }}"
        when: kvshare_validate_offline | default(false) | bool
"""

RETURN = r"""
check:
  description: The name of the check that failed.
  returned: failure
  type: str
assertion:
  description: The condition that was false, as M(ansible.builtin.assert) returns it.
  returned: failure
  type: str
evaluated_to:
  description: The false condition's value, as M(ansible.builtin.assert) returns it.
  returned: failure
  type: bool
notes:
  description: The notes of the checks reached whose O(checks[].when) held.
  returned: when any
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    # Reached only by a run that bypasses the action plugin (ansible-doc, a module copied alone).
    module = AnsibleModule(argument_spec=dict(checks=dict(type="list", elements="dict", required=True)))
    module.fail_json(msg="kvshare.dynamo.checks runs on the controller through its action plugin; "
                         "it cannot run as a module on a host")


if __name__ == "__main__":
    main()
