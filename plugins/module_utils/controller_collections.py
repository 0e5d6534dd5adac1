# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The collections the controller needs, checked before any host changes (issue 34).

The roles run other collections' content on the controller deep inside a rollout (community.crypto
issues the etcd PKI, community.general's filters and modules, ansible.posix): a controller without
one failed there, after hosts were changed. What the collection needs is its own declared
dependencies, one source: ``dependencies`` in galaxy.yml, which ``ansible-galaxy collection build``
copies into MANIFEST.json's ``collection_info`` (requirements.yml lists the same for
``ansible-galaxy collection install -r``; a unit test keeps the two equal). A requirement is a
version specifier as ansible-galaxy reads it: ``*``, or conditions joined by commas, each
``==``/``!=``/``>=``/``>``/``<=``/``<`` and a version (a bare version means ``==``).

Stdlib only; the filter finds the collections the way Ansible does and reads their versions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_CONDITION_RE = re.compile(r"^(==|!=|>=|<=|>|<)?\s*([0-9][0-9A-Za-z.+-]*)$")
_OPS = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b,
}


def version_key(version):
    """A semantic version as a comparable key: release numbers (zero-padded to three), then a
    pre-release sorts before its release; build metadata is ignored. ValueError when it is none."""
    text = str(version).strip().split("+", 1)[0]
    release, dummy, pre = text.partition("-")
    parts = release.split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError("%r is not a version" % (version,))
    numbers = tuple(int(p) for p in parts) + (0,) * max(0, 3 - len(parts))
    pre_key = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else None
    return numbers, (1,) if pre_key is None else (0,) + pre_key


def meets(version, spec):
    """Whether ``version`` meets the specifier ``spec``. ValueError for a specifier it cannot read."""
    spec = str(spec if spec is not None else "*").strip()
    if spec in ("", "*"):
        return True
    have = version_key(version)
    for condition in spec.split(","):
        match = _CONDITION_RE.match(condition.strip())
        if not match:
            raise ValueError("version requirement %r cannot be read" % (spec,))
        if not _OPS[match.group(1) or "=="](have, version_key(match.group(2))):
            return False
    return True


def requirement_errors(requirements, installed, requirer="kvshare.dynamo", source="galaxy.yml dependencies"):
    """Messages about the controller's collections (empty when every requirement is met).

    ``requirements``: {collection: version specifier}; ``installed``: {collection: None when Ansible
    finds no such collection, else {"version": its version or None when it declares none, "path":
    where Ansible finds it}}. A collection found without a version (a source checkout without
    galaxy.yml's version) counts as meeting its requirement."""
    errors = []
    hint = "ansible-galaxy collection install -r requirements.yml (from the %s checkout), or '%s'"
    for name in sorted(requirements or {}):
        spec = str(requirements[name] if requirements[name] is not None else "*").strip() or "*"
        found = (installed or {}).get(name)
        wanted = "%s %s" % (name, spec) if spec != "*" else "%s (any version)" % name
        if not found:
            errors.append("collection %s on the controller (localhost): not installed. %s needs %s (its %s) on the "
                          "controller that runs the playbooks: install it with %s"
                          % (name, requirer, wanted, source, hint % (requirer, "%s:%s" % (name, spec))))
            continue
        version = found.get("version")
        if version in (None, ""):
            continue
        try:
            ok = meets(version, spec)
        except ValueError as exc:
            errors.append("collection %s on the controller (localhost): %s (%s of %s)" % (name, exc, source, requirer))
            continue
        if not ok:
            errors.append("collection %s on the controller (localhost): version %s at %s, but %s needs %s (its %s): "
                          "upgrade it with %s" % (name, version, found.get("path"), requirer, wanted, source,
                                                  hint % (requirer, "%s:%s" % (name, spec))))
    return errors
