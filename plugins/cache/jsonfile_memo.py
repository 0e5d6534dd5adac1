# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The fact cache of ansible.builtin.jsonfile, read from disk once per run instead of once per lookup."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: jsonfile_memo
short_description: JSON files per host, decoded once per run
description:
  - Stores each host's facts in one JSON file, as C(ansible.builtin.jsonfile) does, and keeps what it
    read or wrote in memory for the rest of the run.
  - "Why: ansible-core 2.19 wraps every persistent cache plugin in a proxy that JSON-decodes the
    host's whole fact set on each read. The controller reads a host's facts once per task and host
    and again for every C(hostvars[host]) lookup, so with C(ansible.builtin.jsonfile) 14 % of a
    no-op re-run's controller CPU went to decoding the same files (py-spy; docs/performance.md)."
  - This plugin declares itself not persistent so that core does not wrap it (as core's own
    C(memory) plugin does), and persists the files itself. Values are written as plain JSON, so
    facts read back in a later run carry no data tags (facts are never trusted templates).
  - Its files are not those of C(ansible.builtin.jsonfile); switching between the two gathers facts
    again once.
version_added: "0.1.0"
author:
  - kvshare.dynamo developers (@kvshare)
options:
  _uri:
    required: true
    description:
      - Directory in which the plugin saves the JSON files.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_CONNECTION
    ini:
      - key: fact_caching_connection
        section: defaults
    type: path
  _prefix:
    description: Prefix of the JSON files' names.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_PREFIX
    ini:
      - key: fact_caching_prefix
        section: defaults
  _timeout:
    default: 86400
    description: Seconds after which a host's cached facts expire (0 never).
    env:
      - name: ANSIBLE_CACHE_PLUGIN_TIMEOUT
    ini:
      - key: fact_caching_timeout
        section: defaults
    type: integer
"""

import json

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.cache import BaseFileCacheModule


class CacheModule(BaseFileCacheModule):
    """BaseFileCacheModule keeps each value in memory after the first read; core's proxy is what decoded it again."""

    # Not wrapped by core's schema proxy (plugins.loader._CacheLoader): this plugin encodes its own files.
    _persistent = False

    def _load(self, filepath):
        with open(filepath, "r") as handle:
            return json.load(handle)

    def _dump(self, value, filepath):
        with open(filepath, "w") as handle:
            json.dump(value, handle, cls=AnsibleJSONEncoder, sort_keys=True)
