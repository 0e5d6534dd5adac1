# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: kvcr_worker_settings
short_description: A KVCR host's worker settings from its own variables (no kvcr preflight needed)
description:
  - Returns the parts of the KVCR worker that a worker naming the host's pool (C(kv_pool) V(kvcr) in
    C(dynamo_workers)) gets (V(kv_transfer_config), V(env), V(extra_args)), derived from the current
    host's variables with the stack contract's values (C(kvshare_service_defaults), role
    C(kvshare.dynamo.kvshare)) for what is unset (C(plugins/module_utils/kvcr_config.py), the same
    function the worker's C(kv_pool) uses). The play must load that role (the kvcr role does).
  - Workers do not need it (they name the pool); it serves a playbook that needs one part itself, e.g.
    the KVCR integration test's stand-in (C(tests/integration/kvcr/standin.yml)).
  - A lookup, not a filter, because it reads the current host's variables without C(hostvars).
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  _terms:
    description: Which part, V(kv_transfer_config), V(env) or V(extra_args).
    required: true
"""

EXAMPLES = r"""
- name: The KV transfer config a KVCR worker on this host gets (kv_pool kvcr)
  ansible.builtin.debug:
    msg: "{{ lookup('kvshare.dynamo.kvcr_worker_settings', 'kv_transfer_config') }}"
"""

RETURN = r"""
_raw:
  description: The requested part (a mapping or a list).
  type: raw
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_config
from ansible_collections.kvshare.dynamo.plugins.module_utils import stack

# The variables host_worker_settings reads; the contract's values stand in for the unset kvcr_* ones.
NAMES = kvcr_config.HOST_KEYS + ("kvcr_cache_slot", "kvcr_advertise_host") + stack.BIND_ADDRESS_VARIABLES


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        host_vars = {}
        for name in NAMES:
            if name in variables:
                host_vars[name] = self._templar.template(variables[name])
        if "kvshare_service_defaults" not in variables:
            raise AnsibleLookupError("kvcr_worker_settings: the stack contract (kvshare_service_defaults) is not loaded: "
                                     "add the role kvshare.dynamo.kvshare (or kvshare.dynamo.kvcr) to the play")
        contract = self._templar.template(variables["kvshare_service_defaults"])
        try:
            settings = kvcr_config.host_worker_settings(host_vars, contract)
        except (KeyError, ValueError) as exc:
            raise AnsibleLookupError("kvcr_worker_settings: %s" % exc)
        out = []
        for term in terms:
            if term not in settings:
                raise AnsibleLookupError("kvcr_worker_settings: unknown part %r (kv_transfer_config, env, extra_args)" % term)
            out.append(settings[term])
        return out
