#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Fail when a port a service needs is already taken by another process on the host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_clash_check
short_description: Fail when a port a service needs is already taken by another process
version_added: "0.1.0"
description:
  - Lists the host's listening TCP sockets from C(/proc/net/tcp) and C(/proc/net/tcp6), maps each
    to its processes through C(/proc/<pid>/fd), and reports every listener on a requested port
    that would stop the service binding its address (same address, or either side a wildcard).
  - A listener that belongs to the service itself is ignored, so a re-run passes, when its
    process runs in the cgroup of one of O(ports[].units) (systemd units; fnmatch patterns) or is
    the C(MainPID) of one of them. A listener whose process cannot be seen (another user's
    process, read without root) is taken to be the service's when one of its units is running.
  - Read-only; never changes the host. Supports check mode. The shared port check of the etcd,
    dynamo_frontend, dynamo_worker and maru_pool preflights.
options:
  ports:
    description: The ports the services on this host need.
    type: list
    elements: dict
    required: true
    suboptions:
      port:
        description: TCP port.
        type: int
        required: true
      address:
        description: Address the service binds (C(0.0.0.0), C(::) or empty for all).
        type: str
        default: ""
      variable:
        description: Inventory variable that sets the port (named in the failure message).
        type: str
        required: true
      units:
        description: systemd units of the service that owns the port (fnmatch patterns allowed).
        type: list
        elements: str
        default: []
  host:
    description: Inventory name of the host, for the failure message.
    type: str
    default: ""
  fail_on_clash:
    description: Fail (with a message naming variable, port, process and host) when a port is taken.
    type: bool
    default: true
  proc_root:
    description: The proc file system (a fake tree in tests).
    type: path
    default: /proc
  from_queue:
    description:
      - Probe the ports that the port checks of this run queued (validate.yml sets
        C(__kvshare_port_probe_queue), and each role's check queues its ports instead of probing), then
        empty the queue. O(ports) is then ignored; with nothing queued no module runs.
      - Handled by the action plugin; the module never receives it set.
    type: bool
    default: false
author:
  - kvshare.dynamo developers (@kvshare)
"""

EXAMPLES = r"""
- name: Check that nothing else listens on the etcd ports
  kvshare.dynamo.port_clash_check:
    host: "{{ inventory_hostname }}"
    ports:
      - {port: "{{ etcd_client_port }}", address: "{{ etcd_address }}", variable: etcd_client_port, units: [etcd.service]}
      - {port: "{{ etcd_peer_port }}", address: "{{ etcd_address }}", variable: etcd_peer_port, units: [etcd.service]}
"""

RETURN = r"""
clashes:
  description: Listeners that take a requested port (variable, port, address, pid, process, units).
  returned: always
  type: list
  elements: dict
messages:
  description: One line per clash naming the variable, port, host, process and pid.
  returned: always
  type: list
  elements: str
listeners:
  description: Every listener on a requested port, the service's own included.
  returned: always
  type: list
  elements: dict
own_pids:
  description: MainPID of every running unit named in O(ports[].units) (patterns excluded).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kvshare.dynamo.plugins.module_utils import ports as _ports


def _main_pids(module, units):
    """{unit: MainPID} for running units (systemctl show); patterns and unknown units skipped."""
    names = sorted(set(u for u in units if not any(c in u for c in "*?[")))
    systemctl = module.get_bin_path("systemctl") if names else None
    if not systemctl:
        return {}
    rc, out, _err = module.run_command([systemctl, "show", "--property=MainPID", "--value"] + names)
    if rc != 0:
        return {}
    values = [v.strip() for v in out.strip("\n").split("\n\n")] if "\n\n" in out else out.split()
    return dict((n, int(v)) for n, v in zip(names, values) if v.isdigit() and int(v) > 0)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ports=dict(type="list", elements="dict", required=True, options=dict(
                port=dict(type="int", required=True),
                address=dict(type="str", default=""),
                variable=dict(type="str", required=True),
                units=dict(type="list", elements="str", default=[]),
            )),
            host=dict(type="str", default=""),
            fail_on_clash=dict(type="bool", default=True),
            proc_root=dict(type="path", default="/proc"),
            from_queue=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    wanted = set(p["port"] for p in params["ports"])
    listeners = [item for item in _ports.proc_listeners(params["proc_root"]) if item["port"] in wanted]
    own_pids = _main_pids(module, [u for p in params["ports"] for u in p["units"]])
    clashes, messages = [], []
    for req in params["ports"]:
        pids = [own_pids[u] for u in req["units"] if u in own_pids]
        for item in _ports.clashes(listeners, req["address"], req["port"], pids, req["units"]):
            clash = dict(item, variable=req["variable"], wanted_address=req["address"])
            if clash not in clashes:
                clashes.append(clash)
                messages.append(_ports.clash_text(item, req["variable"]))
    result = dict(changed=False, clashes=clashes, messages=messages, listeners=listeners, own_pids=own_pids)
    if clashes and params["fail_on_clash"]:
        module.fail_json(msg="port clash%s: %s. Stop that process or choose another port / kvshare_bind_address."
                         % (" on %s" % params["host"] if params["host"] else "", "; ".join(messages)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
