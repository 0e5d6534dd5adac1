#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Directories and small files of a role, checked and written in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Directories and small files of a role in one module run
version_added: "0.1.0"
description:
  - Creates the directories, then writes the files, each with its owner, group and mode; an entry
    that is already right is left alone. One run on the host instead of one C(file), C(copy) or
    C(template) task per path. Each of those starts Python on the host and imports Ansible's
    module library (about 0.2 s of CPU), and an unchanged C(template) or C(copy) runs two modules.
  - The content is given whole (render templates on the controller with the
    C(ansible.builtin.template) lookup, controller files with the C(ansible.builtin.file) lookup
    and C(rstrip=false)). A file is replaced atomically (a temporary file in the same directory,
    given its owner, group and mode before it is renamed into place), so a secret is never
    readable by others, not even for a moment. SELinux hosts get the default context for the path.
  - Meant for configuration, units and certificates (kilobytes); large or binary files belong to
    C(ansible.builtin.copy).
  - Supports check mode and diff mode (the diff of each changed file; set C(no_log) on tasks that
    carry secrets).
options:
  directories:
    description: Directories, created in this order (with missing parents) before any file.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      owner:
        description: Owner (name).
        type: str
        default: root
      group:
        description: Group (name).
        type: str
        default: root
      mode:
        description: Octal mode, as a string (C("0755")).
        type: str
        required: true
  files:
    description: Regular files, written after the directories.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path; its directory must exist (list it in O(directories)).
        type: path
        required: true
      content:
        description: The whole content (UTF-8 text).
        type: str
        required: true
      owner:
        description: Owner (name).
        type: str
        default: root
      group:
        description: Group (name).
        type: str
        default: root
      mode:
        description: Octal mode, as a string (C("0644")).
        type: str
        required: true
      label:
        description: A label returned in RV(changed_labels) when this file changed (a worker's name, say).
        type: str
      validate:
        description:
          - A command that checks the new content before it replaces the file, with C(%s) standing
            for the temporary file (as in C(ansible.builtin.template)); a non-zero exit leaves the
            file as it was and fails the task. Not run in check mode.
        type: str
  absent:
    description:
      - Files and symbolic links to remove, after the files are written (a unit a disabled feature
        no longer needs, say). A path that is not there is left alone; a directory is refused.
    type: list
    elements: path
    default: []
author:
  - kvshare.dynamo developers (@kvshare)
"""

EXAMPLES = r"""
- name: Configure etcd
  kvshare.dynamo.managed_files:
    directories:
      - {path: /etc/etcd, mode: "0755"}
    files:
      - path: /etc/etcd/etcd.env
        content: "{{ lookup('ansible.builtin.template', 'etcd.env.j2') }}"
        group: etcd
        mode: "0640"
  notify: Request an etcd restart
"""

RETURN = r"""
changed_paths:
  description: The directories and files that were (or in check mode would be) created, changed or removed.
  returned: always
  type: list
  elements: str
changed_labels:
  description: The O(files[].label) of the files that changed, each once, in order.
  returned: always
  type: list
  elements: str
"""

import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes


class EntryError(Exception):
    pass


def _ids(entry):
    try:
        uid = pwd.getpwnam(entry["owner"]).pw_uid
    except KeyError:
        raise EntryError("%s: owner %s does not exist" % (entry["path"], entry["owner"]))
    try:
        gid = grp.getgrnam(entry["group"]).gr_gid
    except KeyError:
        raise EntryError("%s: group %s does not exist" % (entry["path"], entry["group"]))
    try:
        mode = int(entry["mode"], 8)
    except ValueError:
        raise EntryError("%s: mode %r is not octal" % (entry["path"], entry["mode"]))
    return uid, gid, mode


def _attrs_differ(st, uid, gid, mode):
    return (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (uid, gid, mode)


def ensure_directory(entry, check_mode):
    """True when the directory was (or would be) created or given new attributes."""
    path = entry["path"]
    uid, gid, mode = _ids(entry)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise EntryError("%s exists and is not a directory" % path)
    if st is not None and not _attrs_differ(st, uid, gid, mode):
        return False
    if not check_mode:
        if st is None:
            os.makedirs(path, mode)
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    return True


def ensure_file(entry, check_mode, run_command=None):
    """(changed, the old content or None) for one file; run_command runs O(files[].validate)."""
    path, data = entry["path"], to_bytes(entry["content"], errors="surrogate_or_strict")
    uid, gid, mode = _ids(entry)
    if entry.get("validate") and "%s" not in entry["validate"]:
        raise EntryError("%s: validate must contain %%s" % path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise EntryError("%s exists and is not a regular file" % path)
    old = None
    if st is not None:
        with open(path, "rb") as handle:
            old = handle.read()
    if old == data:
        if not _attrs_differ(st, uid, gid, mode):
            return False, old
        if not check_mode:
            os.chown(path, uid, gid)
            os.chmod(path, mode)
        return True, old
    if not check_mode:
        if not os.path.isdir(os.path.dirname(path)):
            raise EntryError("%s: directory %s does not exist" % (path, os.path.dirname(path)))
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fchown(handle.fileno(), uid, gid)
                os.fchmod(handle.fileno(), mode)
                os.fsync(handle.fileno())
            if entry.get("validate"):
                rc, out, err = run_command(entry["validate"] % tmp)
                if rc != 0:
                    raise EntryError("%s: validate (%s) failed with rc %d: %s" % (path, entry["validate"], rc, (err or out).strip()))
            os.rename(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return True, old


def ensure_absent(path, check_mode):
    """(changed, the old content of a regular file or None) for a path that must not exist."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False, None
    if stat.S_ISDIR(st.st_mode):
        raise EntryError("%s is a directory; absent removes files and links only" % path)
    old = None
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as handle:
            old = handle.read()
    if not check_mode:
        os.unlink(path)
    return True, old


def manage(module):
    """The module's result for its parameters (raises EntryError on a bad entry)."""
    check = module.check_mode
    changed_paths, changed_labels, diffs = [], [], []
    for entry in module.params["directories"]:
        if ensure_directory(entry, check):
            changed_paths.append(entry["path"])
    for entry in module.params["files"]:
        changed, old = ensure_file(entry, check, module.run_command)
        if not changed:
            continue
        changed_paths.append(entry["path"])
        if entry.get("label") and entry["label"] not in changed_labels:
            changed_labels.append(entry["label"])
        if module._diff and (old is None or old != to_bytes(entry["content"])):
            diffs.append({"before_header": entry["path"], "after_header": entry["path"],
                          "before": old.decode("utf-8", "replace") if old is not None else "",
                          "after": entry["content"]})
        if not check and module.selinux_enabled():
            module.set_default_selinux_context(entry["path"], False)
    for path in module.params["absent"]:
        changed, old = ensure_absent(path, check)
        if not changed:
            continue
        changed_paths.append(path)
        if module._diff:
            diffs.append({"before_header": path, "after_header": "%s (absent)" % path,
                          "before": old.decode("utf-8", "replace") if old is not None else "", "after": ""})
    result = {"changed": bool(changed_paths), "changed_paths": changed_paths, "changed_labels": changed_labels}
    if diffs:
        result["diff"] = diffs
    return result


def main():
    owner = dict(type="str", default="root")
    group = dict(type="str", default="root")
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True), owner=owner, group=group,
                mode=dict(type="str", required=True))),
            files=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True), content=dict(type="str", required=True),
                owner=owner, group=group, mode=dict(type="str", required=True), label=dict(type="str"),
                validate=dict(type="str"))),
            absent=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    try:
        module.exit_json(**manage(module))
    except (EntryError, OSError) as exc:
        module.fail_json(msg="managed_files: %s" % exc)


if __name__ == "__main__":
    main()
