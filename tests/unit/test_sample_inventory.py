# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""inventories/sample is what operators copy: it must stay inventories/single_node with comments.

Every test that runs single_node (render goldens, offline validation, the firewall plans, the
sandbox comparison) then also covers the sample; tests/validation runs validate.yml on it too.
"""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
pytestmark = pytest.mark.skipif(not os.path.exists(INVENTORY), reason="ansible-inventory not in the venv")


def _resolved(name):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory")
    proc = subprocess.run([INVENTORY, "-i", os.path.join(REPO, "inventories", name), "--list"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_sample_is_single_node():
    """Same groups, hosts and variables: the sample's commented knobs change nothing."""
    assert _resolved("sample") == _resolved("single_node")


def test_sample_documents_every_role():
    knobs = os.path.join(REPO, "inventories", "sample", "group_vars", "all")
    roles = sorted(r for r in os.listdir(os.path.join(REPO, "roles"))
                   if os.path.exists(os.path.join(REPO, "roles", r, "meta", "argument_specs.yml")))
    assert roles and all(os.path.exists(os.path.join(knobs, r + ".yml")) for r in roles)
