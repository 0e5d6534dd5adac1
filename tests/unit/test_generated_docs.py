"""Generated docs are current, every public filter is documented, every shipped Python file is licensed."""
import glob
import importlib.util
import os

import pytest
import yaml

from ansible_collections.kvshare.dynamo.plugins.filter import (day2, dynamo, etcd, firewall, kvcr, maru_pool,
                                                               validation)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("gen_docs", os.path.join(REPO, "tools", "gen_docs.py"))
gen_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_docs)
SPDX = "# SPDX-License-Identifier: Apache-2.0"
OUTPUTS = gen_docs.outputs()


@pytest.mark.parametrize("rel", sorted(OUTPUTS))
def test_generated_file_is_current(rel):
    """Role READMEs come from meta/argument_specs.yml, docs/tags.md from the task files."""
    path = os.path.join(REPO, rel)
    assert os.path.exists(path), "%s is missing: run python3 tools/gen_docs.py" % rel
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == OUTPUTS[rel], "%s is stale: run python3 tools/gen_docs.py" % rel


def test_every_role_has_a_readme():
    for role in sorted(os.listdir(os.path.join(REPO, "roles"))):
        assert os.path.join("roles", role, "README.md") in OUTPUTS, role


def _filters():
    names = []
    for module in (day2, dynamo, etcd, firewall, kvcr, maru_pool, validation):
        names += [(module.__name__.rsplit(".", 1)[1], name) for name in module.FilterModule().filters()]
    return names


@pytest.mark.parametrize("source,name", _filters())
def test_every_filter_is_documented(source, name):
    """plugins/filter/<name>.yml (or DOCUMENTATION in a one-filter file) documents each filter."""
    sidecar = os.path.join(REPO, "plugins", "filter", name + ".yml")
    if os.path.exists(sidecar):
        with open(sidecar, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)["DOCUMENTATION"]
    else:
        module = globals()[source]
        assert hasattr(module, "DOCUMENTATION"), "filter %s (plugins/filter/%s.py) has no %s.yml" % (name, source, name)
        doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["name"] == name
    assert doc.get("short_description") and doc.get("options", {}).get("_input")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "plugins", "*", "*.py"))
                                        + glob.glob(os.path.join(REPO, "roles", "*", "files", "*.py"))
                                        + glob.glob(os.path.join(REPO, "tools", "*.py"))))
def test_python_file_has_the_license_header(path):
    with open(path, encoding="utf-8") as handle:
        head = handle.read(600)
    assert SPDX in head, "%s lacks %r" % (os.path.relpath(path, REPO), SPDX)
    assert "GNU General Public" not in head
