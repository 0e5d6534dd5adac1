# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Listing the collection's filters imports no module_utils (each filter imports its own: docs/development.md).

ansible-core loads every filter file and calls its filters() in each worker process to resolve any
one kvshare filter; a filter file that touches its module_utils there makes every task pay for the
import (docs/performance.md). Run in a fresh interpreter, as a worker would.
"""
import glob
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

SCRIPT = r"""
import importlib, json, sys
names = json.loads(sys.argv[1])
listed = {}
for name in names:
    module = importlib.import_module("ansible_collections.kvshare.dynamo.plugins.filter." + name)
    listed[name] = sorted(module.FilterModule().filters())
loaded = sorted(m for m in sys.modules if m.startswith("ansible_collections.kvshare.dynamo.plugins.module_utils"))
print(json.dumps({"listed": listed, "module_utils": loaded}))
"""


def test_listing_every_filter_imports_no_module_utils():
    # Public filters (plugins/filter/) and internal ones (plugins/filter/internal/: kvshare.dynamo.internal.*).
    names = sorted(os.path.relpath(p, os.path.join(REPO, "plugins", "filter"))[:-3].replace(os.sep, ".")
                   for p in glob.glob(os.path.join(REPO, "plugins", "filter", "*.py"))
                   + glob.glob(os.path.join(REPO, "plugins", "filter", "internal", "*.py")))
    assert "kv_pools" in names and "internal.day2" in names
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(names)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections")), check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert all(out["listed"][name] for name in names), out["listed"]
    assert out["module_utils"] == [], "listing the filters imported %s" % out["module_utils"]


def test_a_lazy_filter_still_works_and_raises_as_a_filter_error():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.kvshare.dynamo.plugins.filter.internal import kv_pools

    filters = kv_pools.FilterModule().filters()
    assert filters["maru_server_url"]({"maru_pool_bind_address": "127.0.30.1", "maru_pool_server_port": 5555}) \
        == "tcp://127.0.30.1:5555"
    try:
        filters["maru_server_url"]({"maru_pool_server_port": 5555})
    except AnsibleFilterError as exc:
        assert "maru_pool_bind_address" in str(exc)
    else:
        raise AssertionError("a pool without an address was accepted")
