# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""What `ansible-galaxy collection build` ships from inventories/: the examples, nothing else known.

A copy of the checkout's galaxy.yml and inventories/ (plus an operator inventory where earlier
READMEs put one, inventories/mycluster, and the development link directory collections/) is built
with the real ansible-galaxy; the artifact must hold every example inventory whole and none of the
others (docs/install.md: keep your own inventory outside the checkout).
"""
import os
import shutil
import subprocess
import tarfile

import pytest

import render_lib

EXAMPLES = ("sample", "single_node", "two_node_kvcr", "multi_node_maru")
ANSIBLE_GALAXY = os.path.join(os.path.dirname(render_lib.ANSIBLE_PLAYBOOK), "ansible-galaxy")

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_GALAXY), reason="ansible-galaxy not in the venv")


def test_only_the_example_inventories_ship(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("galaxy.yml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(render_lib.REPO, name), src / name)
    shutil.copytree(os.path.join(render_lib.REPO, "meta"), src / "meta")
    shutil.copytree(os.path.join(render_lib.REPO, "inventories"), src / "inventories", symlinks=True)
    shutil.copytree(os.path.join(render_lib.REPO, "inventories", "sample"), src / "inventories" / "mycluster")
    (src / "collections" / "ansible_collections").mkdir(parents=True)
    # Every directory the checkout has under inventories/ is an example or development tooling.
    assert set(os.listdir(os.path.join(render_lib.REPO, "inventories"))) == set(EXAMPLES) | {"sandbox"}
    subprocess.run([ANSIBLE_GALAXY, "collection", "build", "--output-path", str(tmp_path), str(src)], cwd=str(tmp_path),
                   env=render_lib.ansible_env(tmp_path), check=True, capture_output=True, text=True, timeout=120)
    artifact = next(tmp_path.glob("kvshare-dynamo-*.tar.gz"))
    with tarfile.open(artifact) as tar:
        shipped = set(tar.getnames())
    tops = set(name.split("/")[1] for name in shipped if name.startswith("inventories/") and name.count("/") >= 1)
    assert tops == set(EXAMPLES), sorted(tops)
    for example in EXAMPLES:
        base = os.path.join(render_lib.REPO, "inventories", example)
        files = set(os.path.relpath(os.path.join(root, f), render_lib.REPO)
                    for root, dummy, names in os.walk(base) for f in names if "__pycache__" not in root)
        assert files <= shipped, sorted(files - shipped)
    assert not [name for name in shipped if name.split("/")[0] == "collections"], sorted(shipped)
