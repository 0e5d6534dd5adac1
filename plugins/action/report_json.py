# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""kvshare.dynamo.report_json: write a JSON report on the controller, in the task's own process.

A report written with ansible.builtin.file and ansible.builtin.copy delegated to localhost costs
two module runs (a Python start, the module's imports) for one small file: about 1.4 s of
verify.yml's 9 s on the sandbox. Here the file is written where the action runs, the controller.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.filter.core import to_nice_json


def render(content):
    """The file's text: to_nice_json's (4-space indent, sorted keys) and a final newline."""
    return to_nice_json(content) + "\n"


def write_report(path, text, mode, check_mode=False):
    """Write ``text`` to ``path`` (parents created 0755, the file replaced atomically, ``mode``)
    unless it already holds exactly that. Return True when the file changed (or would change)."""
    try:
        with open(path, encoding="utf-8") as handle:
            same = handle.read() == text and (os.stat(path).st_mode & 0o7777) == mode
    except (FileNotFoundError, NotADirectoryError):
        same = False
    if same or check_mode:
        return not same
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "content", "mode"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars or {})
        args = self._task.args
        path = args.get("path")
        if not isinstance(path, str) or not path:
            raise AnsibleActionFail("path must be a non-empty string (the report's file on the controller)")
        if "content" not in args:
            raise AnsibleActionFail("content is required (the report: anything JSON can hold)")
        try:
            mode = int(str(args.get("mode", "0644")), 8)
        except ValueError:
            raise AnsibleActionFail("mode must be an octal string such as '0644', not %r" % args.get("mode"))
        path = os.path.expanduser(path)
        try:
            changed = write_report(path, render(args["content"]), mode, self._task.check_mode)
        except OSError as exc:
            raise AnsibleActionFail("cannot write the report %s on the controller: %s" % (path, exc))
        result.update(changed=changed, path=path)
        return result
