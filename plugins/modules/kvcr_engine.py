#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kvcr_engine
short_description: Kill, or prove absent, the vLLM engine processes of one worker unit
description:
  - Finds the processes whose title contains O(pattern) (vLLM names its engine process
    C(VLLM::EngineCore)) inside the cgroup of one systemd unit only, so other workers' engines on
    the same host are never touched.
  - V(killed) sends SIGKILL to them and fails when there is none. V(absent) fails when any runs.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  unit:
    description: The worker unit, e.g. C(dynamo-worker@kvcr.service).
    type: str
    required: true
  state:
    description: V(killed) or V(absent).
    type: str
    required: true
    choices: [killed, absent]
  pattern:
    description: Substring of the process title.
    type: str
    default: VLLM::EngineCore
  cgroup_root:
    description: Mount point of the cgroup hierarchies; the unit's cgroup is looked up directly below it
      (unified) and below C(unified/) and C(systemd/) (hybrid hosts).
    type: path
    default: /sys/fs/cgroup
"""

EXAMPLES = r"""
- name: Kill the source engine
  kvshare.dynamo.kvcr_engine:
    unit: dynamo-worker@kvcr.service
    state: killed
"""

RETURN = r"""
pids:
  description: Engine processes found (pid and title).
  type: list
  returned: always
killed:
  description: Pids that received SIGKILL.
  type: list
  returned: when state=killed
cgroup:
  description: The unit's cgroup path.
  type: str
  returned: always
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_process


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            state=dict(type="str", required=True, choices=["killed", "absent"]),
            pattern=dict(type="str", default=kvcr_process.ENGINE_TITLE),
            cgroup_root=dict(type="path", default="/sys/fs/cgroup"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    rc, out, err = module.run_command(["systemctl", "show", "--property=ControlGroup", "--value", p["unit"]])
    if rc != 0:
        module.fail_json(msg="systemctl show %s: %s" % (p["unit"], err.strip() or out.strip()))
    cgroup = out.strip()
    found = []
    # The unit's processes are in every hierarchy that has them: unified (v2) or hybrid (unified/, systemd/).
    dirs = kvcr_process.unit_cgroup_dirs(p["cgroup_root"], cgroup)
    if dirs:
        found = kvcr_process.engine_pids(dirs[0], p["pattern"])
    pids = [{"pid": pid, "title": title} for pid, title in found]
    result = dict(pids=pids, cgroup=cgroup, changed=False)
    if p["state"] == "absent":
        if pids:
            module.fail_json(msg="%d process(es) matching %r still run in %s: %s" % (
                len(pids), p["pattern"], p["unit"], ", ".join(str(x["pid"]) for x in pids)), **result)
        module.exit_json(**result)
    if not pids:
        module.fail_json(msg="no process matching %r in %s (cgroup %r)" % (p["pattern"], p["unit"], cgroup), **result)
    if module.check_mode:
        result.update(killed=[], changed=True)
        module.exit_json(**result)
    killed, _gone = kvcr_process.kill_pids([x["pid"] for x in pids])
    result.update(killed=killed, changed=bool(killed))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
