# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Render-diff test: what the roles write for each shipped inventory, byte for byte.

Every unit, drop-in, environment file and config the roles template (and the per-GPU plan rdma_ucx
computes) is rendered offline for every host of inventories/{sandbox,single_node,two_node_kvcr}
(tests/unit/render_lib.py: one ansible-playbook run per inventory, nothing installed or started) and
compared with the goldens under tests/fixtures/render/<inventory>/<host>/<destination path>.

A change to a template, a default or an inventory that changes a rendered file fails here. When the
change is intended, regenerate the goldens and commit them with the change (the diff is the review):

    KVSHARE_RENDER_UPDATE=1 python -m pytest tests/unit/test_render_golden.py
"""
import os

import pytest

import render_lib

GOLDEN = os.path.join(render_lib.REPO, "tests", "fixtures", "render")
UPDATE = os.environ.get("KVSHARE_RENDER_UPDATE", "") not in ("", "0")

pytestmark = pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")


def golden_files(inventory):
    root = os.path.join(GOLDEN, inventory)
    return render_lib.read_tree(root) if os.path.isdir(root) else {}


def as_files(rendered):
    """{<host>/<destination path without the leading slash>: text}."""
    return {"%s/%s" % (host, path.lstrip("/")): text
            for host, files in rendered.items() for path, text in files.items()}


def write_goldens(inventory, files):
    root = os.path.join(GOLDEN, inventory)
    for rel in golden_files(inventory):
        if rel not in files:
            os.unlink(os.path.join(root, rel))
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)


@pytest.mark.parametrize("inventory", render_lib.INVENTORIES)
def test_rendered_files_match_goldens(rendered_inventory, inventory):
    files = as_files(rendered_inventory(inventory))
    assert files, "nothing rendered for %s" % inventory
    if UPDATE:
        write_goldens(inventory, files)
    golden = golden_files(inventory)
    assert sorted(files) == sorted(golden), (
        "rendered files differ from tests/fixtures/render/%s (new: %s; gone: %s); if intended, regenerate: "
        "KVSHARE_RENDER_UPDATE=1 python -m pytest tests/unit/test_render_golden.py"
        % (inventory, sorted(set(files) - set(golden)), sorted(set(golden) - set(files))))
    changed = [rel for rel in files if files[rel] != golden[rel]]
    assert not changed, (
        "rendered files of %s differ from their goldens: %s; diff with `git diff --no-index` after "
        "KVSHARE_RENDER_UPDATE=1 python -m pytest tests/unit/test_render_golden.py (commit only intended changes)"
        % (inventory, changed))


def test_every_template_is_rendered_somewhere(rendered_inventory):
    """A new template under roles/*/templates must be added to render_lib.RENDER (or listed here)."""
    not_written_to_disk = {"lmcache-maru.yaml.j2",           # maru_pool_connector=lmcache: no shipped inventory
                           "acs-clear.sh.j2", "kvshare-acs-clear.service.j2",  # ACS bridges: hardware only
                           "grub-gpudirect.cfg.j2"}          # rdma_ucx_iommu_passthrough on Debian: needs facts
    roles = os.path.join(render_lib.REPO, "roles")
    templates = {name for role in os.listdir(roles) if os.path.isdir(os.path.join(roles, role, "templates"))
                 for name in os.listdir(os.path.join(roles, role, "templates"))}
    missing = sorted(name for name in templates - not_written_to_disk if "/" + name + "'" not in render_lib.RENDER)
    assert missing == [], "templates missing from render_lib.RENDER: %s" % missing
