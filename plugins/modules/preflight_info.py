#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Paths, accounts, units and probe commands a role's checks read, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_info
short_description: Read the paths, accounts, units and probe commands a role checks, in one module run
version_added: "0.1.0"
description:
  - Whether each path exists and is a directory, the passwd entry of each account, the state of
    each systemd unit and the outcome of each probe command, in one module run on the host instead
    of one C(stat) run per path (a loop starts Python on the host and imports Ansible's module
    library once per item), one C(systemd_service) run per unit and one C(command) run per probe.
  - Read-only; never reports C(changed). A missing path, account or unit, and a failing probe
    command, are values, never a failure.
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
  units:
    description: systemd unit names whose state to read, in one C(systemctl show) call.
    type: list
    elements: str
    default: []
  commands:
    description:
      - Read-only probe commands, run side by side (each bounds its own time, as the argv asks).
        Their outcome is keyed by C(name).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The key of this command's outcome.
        type: str
        required: true
      argv:
        description: The command and its arguments (no shell).
        type: list
        elements: str
        required: true
"""

EXAMPLES = r"""
- name: Read the wheelhouse and the service account on the host
  kvshare.dynamo.preflight_info:
    paths: ["{{ dynamo_runtime_wheelhouse_dir }}"]
    users: ["{{ dynamo_runtime_user }}"]
  register: __dynamo_runtime_host

- name: Probe the pool the workers require (a path, a unit, a Maru server)
  kvshare.dynamo.preflight_info:
    paths: [/mnt/maru-fsdax]
    units: [maru-server.service]
    commands:
      - name: tcp://127.0.0.1:5555
        argv: [/opt/dynamo/venv/bin/python, -m, kvshare_maru_connector, wait, "tcp://127.0.0.1:5555", --timeout, "5"]
  register: __dynamo_worker_pool
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
units:
  description:
    - For each unit, its C(ActiveState), C(SubState) and C(LoadState) as systemd reports them (a unit
      systemd does not know is C(inactive) and C(not-found)); null where systemctl could not be read.
  returned: always
  type: dict
  sample: {"maru-server.service": {"ActiveState": "active", "SubState": "running", "LoadState": "loaded"}}
commands:
  description: For each command, its C(rc), C(stdout) and C(stderr).
  returned: always
  type: dict
  sample: {"tcp://127.0.0.1:5555": {"rc": 0, "stdout": "", "stderr": ""}}
"""

import os
import pwd
import threading

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils.unit_watch import parse_show_blocks

UNIT_PROPERTIES = ("ActiveState", "SubState", "LoadState")


def path_info(path):
    return {"exists": os.path.exists(path), "isdir": os.path.isdir(path)}


def user_info(name):
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir, "shell": entry.pw_shell}


def unit_states(module, units):
    """{unit: {ActiveState, SubState, LoadState}} from one systemctl call; None per unit when it fails."""
    if not units:
        return {}
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        return dict((unit, None) for unit in units)
    rc, out, _err = module.run_command([systemctl, "show", "-p", ",".join(UNIT_PROPERTIES), "--"] + list(units))
    if rc != 0:
        return dict((unit, None) for unit in units)
    blocks = parse_show_blocks(out, len(units))
    return dict((unit, dict((key, block.get(key)) for key in UNIT_PROPERTIES) if block else None)
                for unit, block in zip(units, blocks))


def run_commands(module, commands):
    """{name: {rc, stdout, stderr}}, the commands run side by side (each one's own argv bounds its time)."""
    results = {}

    def one(command):
        rc, out, err = module.run_command(command["argv"])
        results[command["name"]] = {"rc": rc, "stdout": out, "stderr": err}

    threads = [threading.Thread(target=one, args=(command,)) for command in commands]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="str", default=[]),
            users=dict(type="list", elements="str", default=[]),
            units=dict(type="list", elements="str", default=[]),
            commands=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                argv=dict(type="list", elements="str", required=True),
            )),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False,
                     paths=dict((path, path_info(path)) for path in module.params["paths"]),
                     users=dict((name, user_info(name)) for name in module.params["users"]),
                     units=unit_states(module, module.params["units"]),
                     commands=run_commands(module, module.params["commands"]))


if __name__ == "__main__":
    main()
