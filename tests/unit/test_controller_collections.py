# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The controller's collections, checked first by validate.yml (issue 34).

The requirement list is the collection's own galaxy.yml ``dependencies`` (requirements.yml must say
the same). The real test: validate.yml, offline, on a controller whose Ansible finds only some of
the collections (ANSIBLE_COLLECTIONS_PATH with links to the installed ones, the Python path not
scanned), or an old one, refuses before its other checks, naming the collection and the version
wanted; with all of them it passes that check.
"""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.kvshare.dynamo.plugins.module_utils import controller_collections as cc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
TASK = "Check the run (no offline validation in a rollout, the controller's collections)"


def _galaxy_dependencies():
    with open(os.path.join(REPO, "galaxy.yml")) as handle:
        return dict((k, str(v)) for k, v in yaml.safe_load(handle)["dependencies"].items())


def test_requirements_yml_lists_galaxy_yml_dependencies():
    """One list: what `ansible-galaxy collection install -r requirements.yml` installs is what the check wants."""
    with open(os.path.join(REPO, "requirements.yml")) as handle:
        listed = dict((c["name"], str(c.get("version", "*"))) for c in yaml.safe_load(handle)["collections"])
    assert listed == _galaxy_dependencies()


@pytest.mark.parametrize("version,spec,ok", [
    ("3.0.5", ">=2.0.0", True), ("1.9.9", ">=2.0.0", False), ("2.0.0", ">=2.0.0", True), ("2.0", ">=2.0.0", True),
    ("2.0.0-beta.1", ">=2.0.0", False), ("2.0.0", "*", True), ("1.5.0", ">=1.0.0,<2.0.0", True),
    ("2.1.0", ">=1.0.0,<2.0.0", False), ("1.2.3", "1.2.3", True), ("1.2.4", "==1.2.3", False), ("1.2.4", "!=1.2.3", True),
    ("11.4.2", ">=8.0.0", True), ("10.0.0+build.5", "<10.0.1", True), ("2.0.0-rc.2", ">2.0.0-rc.1", True),
])
def test_meets(version, spec, ok):
    assert cc.meets(version, spec) is ok


def test_requirement_errors_name_the_collection_and_the_version_wanted():
    reqs = {"community.crypto": ">=2.0.0", "ansible.posix": ">=1.5.0", "community.general": ">=8.0.0", "x.y": "*"}
    installed = {"community.crypto": None, "ansible.posix": {"version": "1.4.0", "path": "/c/ansible/posix"},
                 "community.general": {"version": None, "path": "/src/general"}, "x.y": {"version": "0.1.0", "path": "/x"}}
    assert cc.requirement_errors(reqs, installed) == [
        "collection ansible.posix on the controller (localhost): version 1.4.0 at /c/ansible/posix, but kvshare.dynamo "
        "needs ansible.posix >=1.5.0 (its galaxy.yml dependencies): upgrade it with ansible-galaxy collection install "
        "-r requirements.yml (from the kvshare.dynamo checkout), or 'ansible.posix:>=1.5.0'",
        "collection community.crypto on the controller (localhost): not installed. kvshare.dynamo needs "
        "community.crypto >=2.0.0 (its galaxy.yml dependencies) on the controller that runs the playbooks: install it "
        "with ansible-galaxy collection install -r requirements.yml (from the kvshare.dynamo checkout), or "
        "'community.crypto:>=2.0.0'"]
    assert "cannot be read" in cc.requirement_errors({"a.b": "~1.0"}, {"a.b": {"version": "1.0.0"}})[0]
    assert cc.requirement_errors({}, {}) == []


def _installed(name):
    """Where the venv's Ansible finds collection ``name`` (the `ansible` package)."""
    import ansible_collections
    for base in ansible_collections.__path__:
        path = os.path.join(base, *name.split("."))
        if os.path.isfile(os.path.join(path, "MANIFEST.json")):
            return path
    pytest.skip("collection %s is not installed in the venv" % name)


def _validate(tmp_path, links, old=None):
    """validate.yml offline on inventories/single_node, with only ``links`` (and ``old``: {name:
    version}, a stub of that version) on the controller's collection path."""
    root = tmp_path / "collections" / "ansible_collections"
    os.makedirs(root / "kvshare")
    os.symlink(REPO, root / "kvshare" / "dynamo")
    for name in links:
        ns, coll = name.split(".")
        os.makedirs(root / ns, exist_ok=True)
        os.symlink(_installed(name), root / ns / coll)
    for name, version in (old or {}).items():
        path = root.joinpath(*name.split("."))
        os.makedirs(path)
        (path / "MANIFEST.json").write_text(json.dumps({"collection_info": {
            "namespace": name.split(".")[0], "name": name.split(".")[1], "version": version}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default",
               ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False")
    return subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "inventories/single_node",
                           "playbooks/validate.yml", "-e", "kvshare_validate_offline=true"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


needs_ansible = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                   reason="ansible-playbook not in the venv")


@needs_ansible
def test_validation_refuses_a_controller_without_a_required_collection(tmp_path):
    proc = _validate(tmp_path, ["community.general", "ansible.posix"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.search(r"TASK \[%s\].*\n(.*\n)*?fatal: \[gpu-node-1\]" % re.escape(TASK), proc.stdout), out[-3000:]
    assert ("collection community.crypto on the controller (localhost): not installed. kvshare.dynamo needs "
            "community.crypto %s (its galaxy.yml dependencies)" % _galaxy_dependencies()["community.crypto"]) in out
    assert "TASK [kvshare.dynamo.etcd" not in proc.stdout  # refused before the roles' checks


@needs_ansible
def test_validation_refuses_an_old_collection_and_passes_with_all(tmp_path):
    proc = _validate(tmp_path / "old", ["community.crypto", "community.general"], old={"ansible.posix": "1.4.0"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.search(r"collection ansible\.posix on the controller \(localhost\): version 1\.4\.0 at \S+, but "
                     r"kvshare\.dynamo needs ansible\.posix >=1\.5\.0", out), out[-3000:]
    proc = _validate(tmp_path / "all", ["community.crypto", "community.general", "ansible.posix"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"TASK \[%s\][^\n]*\nok: \[gpu-node-1\]" % re.escape(TASK), proc.stdout), proc.stdout[:3000]
