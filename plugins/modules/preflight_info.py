#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Paths and accounts a role's preflight checks, read in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_info
short_description: Read the paths and accounts a role's preflight checks, in one module run
version_added: "0.3.0"
description:
  - Whether each path exists and is a directory, and the passwd entry of each account, in one
    module run on the host instead of one C(stat) run per path (a loop starts Python on the host
    and imports Ansible's module library once per item) and one C(getent) run.
  - Read-only; never reports C(changed). A missing path or account is a value, never a failure.
author:
  - kvshare.dynamo developers (@kvshare)
options:
  paths:
    description:
      - Absolute paths to look up (symbolic links followed). The result is keyed by the path as given.
    type: list
    elements: str
    default: []
  users:
    description: Account names to look up in the passwd database.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Read the wheelhouse and the service account on the host
  kvshare.dynamo.preflight_info:
    paths: ["{{ dynamo_runtime_wheelhouse_dir }}"]
    users: ["{{ dynamo_runtime_user }}"]
  register: __dynamo_runtime_host
"""

RETURN = r"""
paths:
  description: For each path, C(exists) and C(isdir).
  returned: always
  type: dict
  sample: {"/opt/models/tiny": {"exists": true, "isdir": true}}
users:
  description: For each account, C(uid), C(gid), C(home) and C(shell); null where the account does not exist.
  returned: always
  type: dict
  sample: {"dynamo": {"uid": 990, "gid": 990, "home": "/var/lib/dynamo", "shell": "/usr/sbin/nologin"}}
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule


def path_info(path):
    return {"exists": os.path.exists(path), "isdir": os.path.isdir(path)}


def user_info(name):
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir, "shell": entry.pw_shell}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="str", default=[]),
            users=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False,
                     paths=dict((path, path_info(path)) for path in module.params["paths"]),
                     users=dict((name, user_info(name)) for name in module.params["users"]))


if __name__ == "__main__":
    main()
