# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: play_group_names
short_description: The etcd and KVCR group names the playbooks' C(hosts) lines use in this run
description:
  - Returns one mapping, C(etcd_group_name) and C(kvcr_group_name) (the contract's group names that
    an inventory may change), each as a play's C(hosts) line sees it in this run - the extra variable
    (C(-e)) where one is given, else the stack contract's default (C(kvshare_service_defaults) in
    C(roles/kvshare/defaults/main.yml)).
  - A play chooses its hosts before it reads inventory variables, so a group name set only in the
    inventory reaches the roles but not the C(hosts) lines. C(playbooks/validate.yml) compares each
    host's value with this one and refuses the difference before any host changes.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
"""

EXAMPLES = r"""
- name: The groups the etcd and KVCR plays run on in this run
  ansible.builtin.debug:
    msg: "{{ query('kvshare.dynamo.play_group_names') | first }}"
"""

RETURN = r"""
_raw:
  description: One mapping of variable name to group name.
  type: dict
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.vars import load_extra_vars

# The contract's group names that inventories may change (the other groups have fixed names).
NAMES = ("etcd_group_name", "kvcr_group_name")
CONTRACT = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "kvshare", "defaults", "main.yml")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        try:
            contract = self._loader.load_from_file(os.path.abspath(CONTRACT))["kvshare_service_defaults"]
        except Exception as exc:  # pylint: disable=broad-exception-caught  # any reason: the same message
            raise AnsibleLookupError("cannot read the stack contract %s: %s" % (CONTRACT, exc)) from exc
        given = load_extra_vars(self._loader)
        return [dict((name, str(given[name]) if name in given else contract[name]) for name in NAMES)]
