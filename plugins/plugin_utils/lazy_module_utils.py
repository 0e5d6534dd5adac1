# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The collection's module_utils for filter plugins, imported on first use.

To resolve one collection filter, ansible-core loads every filter file of the collection
(Jinja2Loader.get_with_context), in each worker process, and the collection loader compiles a
module_utils file from its source at each import (no bytecode cache). With the module_utils
imported at the top of every filter file, each task that used any kvshare filter paid for all of
them on each host: about 0.6 s of CPU (docs/performance.md). A filter file now names its
module_utils with ``load("workers")``; the module is imported when a filter first uses it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib

PACKAGE = "ansible_collections.kvshare.dynamo.plugins.module_utils."


class LazyModule(object):
    """A module of plugins/module_utils, imported at its first attribute access."""

    def __init__(self, name):
        self._name = name
        self._module = None

    def __getattr__(self, attr):
        # Only names the instance does not have come here (_name and _module are set in __init__).
        if self._module is None:
            self._module = importlib.import_module(PACKAGE + self._name)
        return getattr(self._module, attr)


def load(name):
    """plugins/module_utils/<name>.py, imported when first used."""
    return LazyModule(name)
