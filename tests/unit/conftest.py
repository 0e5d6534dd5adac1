# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Fixtures of the unit tests: the offline render of each shipped inventory, made once per session."""
import pytest

import render_lib


@pytest.fixture(scope="session")
def rendered_inventory(tmp_path_factory):
    """rendered_inventory(name) -> {host: {absolute destination path: text}} (render_lib.render_inventory)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = render_lib.render_inventory(tmp_path_factory.mktemp("render-" + name), name)
        return cache[name]
    return get
