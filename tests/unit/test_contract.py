# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The stack contract (docs/development.md, "The contract"): a fact that several roles or
playbooks read is defined in one place. This test fails when a role, a playbook or a plugin
computes one again:

1. a host's address: only plugins/module_utils/stack.py reads the default IPv4 fact;
2. the frontend's URL: roles and playbooks outside the frontend role read it through the
   kvshare.dynamo.frontend_url filter, never from dynamo_frontend_http_port/_host themselves;
3. another role's variable with a literal fallback (``dynamo_runtime_venv | default('/opt/...')``):
   the value then lives in two places and drifts;
4. a service port of kvshare_service_defaults (roles/kvshare) written as a number in code.

KNOWN lists the places that still do so today (issue 36), each with what it is. The list only
shrinks: a place not in it fails the test, and so does a listed place that no longer exists
(delete its entry).
"""
import ast
import glob
import os
import re
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "roles", "*")) if os.path.isdir(p))
YAML_GLOBS = ("roles/*/defaults/*.yml", "roles/*/vars/*.yml", "roles/*/tasks/*.yml", "roles/*/handlers/*.yml",
              "roles/*/templates/*.j2", "playbooks/*.yml", "*.yml")
CONTRACT_HOME = "roles/kvshare/"

KNOWN = {
    # (check, file, what): why it is still there
}


def _rel(path):
    return os.path.relpath(path, REPO)


def _files(patterns):
    out = set()
    for pattern in patterns:
        out.update(glob.glob(os.path.join(REPO, pattern)))
    return sorted(p for p in out if os.path.isfile(p))


def _role_of(rel):
    parts = rel.split("/")
    return parts[1] if parts[0] == "roles" else None


def _owner(variable):
    """The role whose prefix the variable carries (the longest matching role name)."""
    owners = [r for r in ROLES if variable.startswith(r + "_")]
    return max(owners, key=len) if owners else None


def _service_ports():
    with open(os.path.join(REPO, "roles", "kvshare", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)["kvshare_service_defaults"]
    return dict((value, key) for key, value in defaults.items() if key.endswith("_port") and isinstance(value, int))


def found():
    """Every place that computes a contract fact again, as {(check, file, what)}."""
    places = set()
    # A literal string (quoted, or with escaped quotes inside a YAML string) or number. A fallback
    # to an empty string asks "is it set?", it copies no value.
    fallback = re.compile(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(\s*(?:\\?(['\"])(?!\\?\2)|\d)")
    for path in _files(YAML_GLOBS):
        rel = _rel(path)
        if rel.startswith(CONTRACT_HOME):
            continue
        with open(path) as handle:
            text = handle.read()
        for match in re.finditer(r"\b(ansible_)?default_ipv4\b", text):
            places.add(("address", rel, match.group(0)))
        # The frontend URL has one name, __kvshare_frontend_url (roles/kvshare/defaults/main.yml).
        if "kvshare.dynamo.frontend_url" in text:
            places.add(("frontend_url", rel, "kvshare.dynamo.frontend_url"))
        if _role_of(rel) != "dynamo_frontend":
            for name in ("dynamo_frontend_http_port", "dynamo_frontend_http_host"):
                if name in text:
                    places.add(("frontend", rel, name))
        for match in fallback.finditer(text):
            owner = _owner(match.group(1))
            if owner and owner != _role_of(rel):
                places.add(("fallback", rel, match.group(1)))
    ports = _service_ports()
    for path in _files(("plugins/**/*.py",)):
        rel = _rel(path)
        with open(path) as handle:
            text = handle.read()
        tree = ast.parse(text)
        docs = set()
        for node in ast.walk(tree):
            # Module documentation (DOCUMENTATION, EXAMPLES, RETURN) and docstrings are prose.
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                                                    for t in node.targets):
                docs.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if id(node) in docs or not isinstance(node, ast.Constant):
                continue
            if isinstance(node.value, int) and not isinstance(node.value, bool) and node.value in ports:
                places.add(("port", rel, str(node.value)))
            elif isinstance(node.value, str) and rel != "plugins/module_utils/stack.py" \
                    and re.search(r"\b(ansible_)?default_ipv4\b", node.value):
                places.add(("address", rel, re.search(r"\b(ansible_)?default_ipv4\b", node.value).group(0)))
        if rel != "plugins/module_utils/stack.py":
            for match in re.finditer(r"\.get\(\s*['\"]((?:ansible_)?default_ipv4)['\"]", text):
                places.add(("address", rel, match.group(1)))
    return places


def test_no_new_place_computes_a_contract_fact():
    new = sorted(found() - set(KNOWN))
    assert not new, ("computed again outside the contract (read it from roles/kvshare or the stack filters; "
                     "docs/development.md, \"The contract\"): %s" % new)


def test_known_places_still_exist():
    gone = sorted(set(KNOWN) - found())
    assert not gone, "fixed: delete these from KNOWN so that they cannot come back: %s" % gone


def test_the_scan_sees_a_recomputation(tmp_path, monkeypatch):
    """The scan is not blind: a role default that copies another role's path with a literal
    fallback, a playbook that builds the frontend URL from its port, and a filter with an etcd
    port are found."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", str(tmp_path))
    for rel, text in {
        "roles/kvshare/defaults/main.yml": "kvshare_service_defaults: {etcd_client_port: 2379}\n",
        "roles/dynamo_runtime/defaults/main.yml": "dynamo_runtime_venv: /opt/v\n",
        "roles/alpha/defaults/main.yml": "__alpha_venv: \"{{ dynamo_runtime_venv | default('/opt/v') }}\"\n",
        "playbooks/p.yml": "url: \"http://{{ x }}:{{ dynamo_frontend_http_port }}\"\n",
        "playbooks/q.yml": "url: \"{{ groups | kvshare.dynamo.frontend_url(hostvars, d) }}\"\n",
        "plugins/filter/f.py": "PORT = 2379\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROLES", ["alpha", "dynamo_runtime", "kvshare"])
    assert found() == {("fallback", "roles/alpha/defaults/main.yml", "dynamo_runtime_venv"),
                       ("frontend", "playbooks/p.yml", "dynamo_frontend_http_port"),
                       ("frontend_url", "playbooks/q.yml", "kvshare.dynamo.frontend_url"),
                       ("port", "plugins/filter/f.py", "2379")}
