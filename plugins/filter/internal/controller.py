# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The controller's collections: what a collection declares it needs, what Ansible finds
(module_utils/controller_collections.py). Filters run on the controller."""

from __future__ import annotations

import importlib.util
import json
import os

import yaml

from ansible.errors import AnsibleFilterError


def _collection_dir(name):
    """Where Ansible's collection loader finds collection ``name`` (namespace.name), else None."""
    try:
        spec = importlib.util.find_spec("ansible_collections." + str(name))
    except (ImportError, ValueError, AttributeError):
        return None
    locations = list(getattr(spec, "submodule_search_locations", None) or []) if spec else []
    return locations[0] if locations else None


def _collection_info(path):
    """A collection directory's MANIFEST.json collection_info (an installed artifact), else its
    galaxy.yml (a source checkout), else {}."""
    manifest = os.path.join(path, "MANIFEST.json")
    if os.path.isfile(manifest):
        with open(manifest) as handle:
            return json.load(handle).get("collection_info") or {}
    galaxy = os.path.join(path, "galaxy.yml")
    if os.path.isfile(galaxy):
        with open(galaxy) as handle:
            return yaml.safe_load(handle) or {}
    return {}


def collection_requirements(name):
    """The collections ``name`` (namespace.name) declares it needs: its galaxy.yml ``dependencies``
    (MANIFEST.json's ``collection_info.dependencies`` once built), as {collection: specifier}."""
    path = _collection_dir(name)
    if path is None:
        raise AnsibleFilterError("collection_requirements: Ansible finds no collection %s" % name)
    return dict((str(k), str(v)) for k, v in (_collection_info(path).get("dependencies") or {}).items())


def controller_collection_errors(requirements, requirer="kvshare.dynamo"):
    """Messages about the collections ``requirements`` names ({collection: specifier}) that Ansible
    does not find on this controller, or finds in a version that does not meet the specifier."""
    from ansible_collections.kvshare.dynamo.plugins.module_utils import controller_collections as _controller
    installed = {}
    for name in requirements or {}:
        path = _collection_dir(name)
        installed[name] = None if path is None else {"version": _collection_info(path).get("version"), "path": path}
    return _controller.requirement_errors(dict(requirements or {}), installed, requirer)


class FilterModule:
    """kvshare.dynamo controller filters."""

    def filters(self):
        return {"collection_requirements": collection_requirements,
                "controller_collection_errors": controller_collection_errors}
