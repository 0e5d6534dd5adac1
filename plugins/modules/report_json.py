#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Documentation of the report_json action (plugins/action/report_json.py): it runs on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: report_json
short_description: Write a JSON report on the controller
version_added: "0.1.0"
description:
  - Writes O(content) as JSON (the text of C(to_nice_json), 4-space indent, sorted keys, and a final
    newline) to O(path) on the controller, whatever host the task runs for. Parent
    directories are created (0755); the file is replaced atomically and left alone when it already
    holds the same text and mode.
  - An action plugin. The file is written in the task's own process, with no module run on any
    host. The report tasks of C(verify.yml) use it.
  - In check mode nothing is written; RV(ignore:changed) says whether the file would change.
options:
  path:
    description: The report's file on the controller (C(~) expanded).
    type: str
    required: true
  content:
    description: The report; anything JSON can hold.
    type: raw
    required: true
  mode:
    description: The file's permissions, an octal string.
    type: str
    default: "0644"
author:
  - kvshare.dynamo developers (@kvshare)
"""

EXAMPLES = r"""
- name: Write the JSON report on the controller
  kvshare.dynamo.report_json:
    path: "{{ playbook_dir }}/reports/verify.json"
    content: "{{ {'pairs': kvshare_verify_summary} }}"
"""

RETURN = r"""
path:
  description: The file written (or that would be written, in check mode).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    # Reached only by a run that bypasses the action plugin (ansible-doc, a module copied alone).
    module = AnsibleModule(argument_spec=dict(path=dict(type="str", required=True), content=dict(type="raw", required=True),
                                              mode=dict(type="str", default="0644")),
                           supports_check_mode=True)
    module.fail_json(msg="kvshare.dynamo.report_json writes on the controller through its action plugin; "
                         "it cannot run as a module on a host")


if __name__ == "__main__":
    main()
