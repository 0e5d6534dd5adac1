#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Compare a host with what a role's last full run left there, or record it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: converged
short_description: Whether a role's last full run still describes the host (the fast re-run's gate)
version_added: "0.1.0"
description:
  - With O(state=record), at the end of a role's full run, writes one file per role (O(stamp_dir)/O(name).json,
    root only, mode 0600) holding a digest of every input of the run and a fingerprint of what the
    role manages on the host. That is its files and whole directories (content digest, mode, owner;
    a new file under a listed directory shows), its units (loaded, active, enabled at boot, unit file
    and drop-ins, and the invocation, which changes at every start), packages, users, groups and
    kernel modules.
  - With O(state=check), at the start of the next run, computes the same from the host and compares;
    RV(converged) is true only when no input and nothing on the host differs, and RV(drift) names
    each difference. The role then skips its body in one step, or runs it whole.
  - The action plugin of the same name computes O(inputs) on the controller (every C(kvshare_),
    C(etcd_), C(dynamo_), C(maru_pool_), C(kvcr_), C(rdma_ucx_) and C(firewall_) variable, the
    inventory sources, the groups, the host facts the roles read, and the collection's own files),
    so a change of any of them makes the role run whole.
  - With O(state=read), reads every stamp in O(stamp_dir) and what each tracks on the host, in one
    run for all roles, and returns RV(readings) (each stamp's inputs and how the host differs from
    it). The action plugin answers a later O(state=check) of a role from the reading, with no module
    run, while the reading still describes the host (C(site.yml) reads once, after its firewall
    play; a role's body, or a play that changes a role's files, forgets the reading).
  - Never reports a change; recording is bookkeeping. In check mode nothing is written.
options:
  name:
    description: The role whose state this is (the stamp's file name). Required unless O(state=read).
    type: str
  state:
    description: V(check) compares with the stamp, V(record) writes it, V(read) reads every stamp (O(name) is then ignored).
    type: str
    choices: [check, record, read]
    default: check
  inputs:
    description:
      - A digest per input, by name. Set by the action plugin; with O(state=record), pass the
        RV(inputs) that the run's check returned, so that the stamp holds the run's inputs as they
        were before the role's body set anything.
    type: dict
    default: {}
  paths:
    description: Files, directories and links fingerprinted one by one (O(state=record)).
    type: list
    elements: path
    default: []
  trees:
    description: Directories fingerprinted with everything under them (O(state=record)). Not for data directories.
    type: list
    elements: path
    default: []
  units:
    description: systemd units (O(state=record)).
    type: list
    elements: str
    default: []
  packages:
    description: Packages, as the role names them to the package manager (O(state=record)); read with dpkg-query.
    type: list
    elements: str
    default: []
  users:
    description: User accounts (O(state=record)).
    type: list
    elements: str
    default: []
  groups:
    description: Groups (O(state=record)).
    type: list
    elements: str
    default: []
  kernel_modules:
    description: Kernel modules that must stay loaded (O(state=record)).
    type: list
    elements: str
    default: []
  run_whole:
    description:
      - Reasons the role must run whole whatever the stamp says (a variable that asks for an action,
        such as wiping data, rather than describing a state). O(state=check) reports them as RV(drift).
    type: list
    elements: str
    default: []
  stamp_dir:
    description: Where the stamps live (created root only, mode 0700).
    type: path
    default: /var/lib/kvshare/converged
author:
  - kvshare.dynamo developers (@kvshare)
"""

EXAMPLES = r"""
- name: Compare the host with etcd's last full run
  kvshare.dynamo.converged:
    name: etcd
  register: __etcd_converged

- name: Record what this full run left on the host
  kvshare.dynamo.converged:
    name: etcd
    state: record
    inputs: "{{ __etcd_converged.inputs }}"
    paths: [/etc/etcd/etcd.env]
    units: [etcd.service]
    packages: [etcd-server]
    users: [etcd]
"""

RETURN = r"""
converged:
  description: O(state=check) only. True when the stamp exists and nothing differs.
  returned: O(state=check) and O(state=record)
  type: bool
start_only:
  description:
    - O(state=check) only. True when the inputs are the same and the only differences are units
      that stopped, failed or run another invocation, with their unit files, drop-ins and
      enablement as recorded. The role may then skip its configuration and only start and prove
      its services.
  returned: O(state=check) and O(state=record)
  type: bool
drift:
  description: The differences, one line each (at most 12 shown, then a count); empty when converged.
  returned: O(state=check) and O(state=record)
  type: list
  elements: str
inputs:
  description: The inputs compared or recorded (name to digest), to pass to the record step.
  returned: O(state=check) and O(state=record)
  type: dict
stamp:
  description: The stamp's path.
  returned: O(state=check) and O(state=record)
  type: str
readings:
  description:
    - O(state=read) only. By role name (each stamp in O(stamp_dir)), its inputs, its state
      differences on the host (C(state_lines)) and whether they are only stopped or restarted
      units (C(state_start_only)); or C(why) the stamp cannot be used.
  returned: O(state=read)
  type: dict
"""

import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kvshare.dynamo.plugins.module_utils import converged as cv


def current_state(module, tracked):
    """{kind:name: fingerprint} for what tracked names, read from this host."""
    state = {}
    for path in tracked["paths"]:
        state["path:" + path] = cv.path_fingerprint(path)
    for root in tracked["trees"]:
        state["tree:" + root] = "tree"
        for path, fingerprint in cv.tree_fingerprint(root).items():
            state["path:" + path] = fingerprint
    if tracked["units"]:
        systemctl = module.get_bin_path("systemctl")
        if systemctl is None:
            text = ""
        else:
            argv = [systemctl, "show", "--property=" + ",".join(cv.UNIT_PROPERTIES), "--"] + list(tracked["units"])
            rc, text, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
            if rc != 0:
                # No systemd to ask (a container or chroot without it as PID 1): every unit reads
                # "unknown" alike, in the record and in the check.
                text = ""
        for unit, fingerprint in cv.parse_systemctl_show(text, tracked["units"]).items():
            state["unit:" + unit] = fingerprint
    if tracked["packages"]:
        dpkg = module.get_bin_path("dpkg-query")
        if dpkg is None:
            found = dict((name, "unknown (no dpkg-query)") for name in tracked["packages"])
        else:
            bases = sorted(set(cv.package_base(name) for name in tracked["packages"]))
            rc, text, err = module.run_command([dpkg, "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n", "--"] + bases,
                                               environ_update={"LC_ALL": "C"})
            found = cv.parse_dpkg_query(text, tracked["packages"])
        for name, fingerprint in found.items():
            state["package:" + name] = fingerprint
    for name in tracked["users"]:
        state["user:" + name] = cv.user_fingerprint(name)
    for name in tracked["groups"]:
        state["group:" + name] = cv.group_fingerprint(name)
    if tracked["kernel_modules"]:
        try:
            with open("/proc/modules") as handle:
                loaded = cv.loaded_modules(handle.read())
        except OSError:
            loaded = set()
        for name in tracked["kernel_modules"]:
            state["module:" + name] = "loaded" if name in loaded else "not loaded"
    return state


def read_stamp(path, name):
    try:
        with open(path) as handle:
            stamp = json.load(handle)
    except FileNotFoundError:
        return None, cv.NO_STAMP
    except (OSError, ValueError) as exc:
        return None, "the record %s cannot be read: %s" % (path, exc)
    why = cv.validate_stamp(stamp, name)
    if why:
        return None, why
    return stamp, ""


def read_all(module, stamp_dir):
    """{name: reading} for every stamp in stamp_dir (module_utils converged.reading)."""
    try:
        names = sorted(entry[:-len(".json")] for entry in os.listdir(stamp_dir)
                       if entry.endswith(".json") and not entry.startswith("."))
    except OSError:
        return {}
    readings = {}
    for name in names:
        stamp, why = read_stamp(os.path.join(stamp_dir, name + ".json"), name)
        if stamp is None:
            readings[name] = {"why": why}
        else:
            readings[name] = cv.reading(stamp, current_state(module, cv.tracked(stamp["state"])))
    return readings


def write_stamp(path, document):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    os.chmod(directory, 0o700)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(document, out, indent=1, sort_keys=True)
            out.write("\n")
        os.chmod(tmp, 0o600)
        os.rename(tmp, path)
    except Exception:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            state=dict(type="str", choices=["check", "record", "read"], default="check"),
            inputs=dict(type="dict", default={}),
            paths=dict(type="list", elements="path", default=[]),
            trees=dict(type="list", elements="path", default=[]),
            units=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            users=dict(type="list", elements="str", default=[]),
            groups=dict(type="list", elements="str", default=[]),
            kernel_modules=dict(type="list", elements="str", default=[]),
            run_whole=dict(type="list", elements="str", default=[]),
            stamp_dir=dict(type="path", default=cv.DEFAULT_STAMP_DIR),
        ),
        required_if=[("state", "check", ["name"]), ("state", "record", ["name"])],
        supports_check_mode=True,
    )
    params = module.params
    if params["state"] == "read":
        module.exit_json(changed=False, readings=read_all(module, params["stamp_dir"]), stamp_dir=params["stamp_dir"])
    if "/" in params["name"] or params["name"] in ("", ".", ".."):
        module.fail_json(msg="name %r is not a plain name" % params["name"])
    inputs = dict((str(key), str(value)) for key, value in params["inputs"].items())
    path = os.path.join(params["stamp_dir"], params["name"] + ".json")
    if params["state"] == "record":
        tracked = dict((key, sorted(set(params[key]))) for key in
                       ("paths", "trees", "units", "packages", "users", "groups", "kernel_modules"))
        state = current_state(module, tracked)
        if not module.check_mode:
            write_stamp(path, cv.stamp_document(params["name"], inputs, state,
                                                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
        module.exit_json(changed=False, converged=True, start_only=False, drift=[], inputs=inputs, stamp=path)
    if params["run_whole"]:
        module.exit_json(changed=False, converged=False, start_only=False, drift=list(params["run_whole"]),
                         inputs=inputs, stamp=path)
    stamp, why = read_stamp(path, params["name"])
    if stamp is None:
        module.exit_json(changed=False, converged=False, start_only=False, drift=[why], inputs=inputs, stamp=path)
    # Every recorded path is read again (one since removed shows as missing), and each recorded
    # tree is walked again (a new file shows).
    state = current_state(module, cv.tracked(stamp["state"]))
    # The same decision as a check answered from state=read (the action plugin): one code path.
    converged, start_only, lines = cv.compare_reading(cv.reading(stamp, state), inputs)
    module.exit_json(changed=False, converged=converged, start_only=start_only,
                     drift=cv.summarize(lines), inputs=inputs, stamp=path)


if __name__ == "__main__":
    main()
