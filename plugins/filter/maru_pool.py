# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Filters for the maru_pool role (kvshare.dynamo.maru_pool_*); logic in plugins/module_utils/maru.py.

The workers a pool feeds and their checks: plugins/filter/kv_pools.py.

Collection roles cannot carry their own filter_plugins, hence this collection-level file."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.kvshare.dynamo.plugins.plugin_utils.lazy_module_utils import load

maru = load("maru")


def _wrap(name):
    """maru.<name> as a filter; looked up at the call, so that listing the filters imports nothing."""
    def inner(*args, **kwargs):
        try:
            return getattr(maru, name)(*args, **kwargs)
        except maru.MaruConfigError as exc:
            raise AnsibleFilterError(str(exc))
    inner.__name__ = name
    return inner


def clash_text(clash, variable):
    return "%s %s is held by %s (pid %s) on %s" % (variable, clash["port"], clash["process"], clash["pid"], clash["address"])


class FilterModule(object):
    def filters(self):
        return {
            "maru_pool_port_clashes": _wrap("port_clashes"),
            "maru_pool_parse_size": _wrap("parse_size"),
            "maru_pool_clash_text": clash_text,
        }
