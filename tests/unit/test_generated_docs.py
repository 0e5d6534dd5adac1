# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Generated docs are current, every public filter is documented, every Python file is licensed."""
import glob
import importlib.util
import os
import subprocess

import pytest
import yaml


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


# Public filters (plugins/filter/*.py) and internal ones (plugins/filter/internal/*.py, kvshare.dynamo.internal.*).
FILTER_FILES = sorted(os.path.relpath(p, os.path.join(REPO, "plugins", "filter"))[:-3].replace(os.sep, ".")
                      for p in glob.glob(os.path.join(REPO, "plugins", "filter", "*.py"))
                      + glob.glob(os.path.join(REPO, "plugins", "filter", "internal", "*.py")))
FILTER_MODULES = {name: importlib.import_module("ansible_collections.kvshare.dynamo.plugins.filter." + name)
                  for name in FILTER_FILES}


def _filters():
    return [(source, name) for source, module in FILTER_MODULES.items() for name in module.FilterModule().filters()]


@pytest.mark.parametrize("source,name", _filters())
def test_every_filter_is_documented(source, name):
    """plugins/filter/[internal/]<name>.yml (or DOCUMENTATION in a one-filter file) documents each filter,
    next to the file that defines it."""
    sidecar = os.path.join(REPO, "plugins", "filter", *(source.split(".")[:-1] + [name + ".yml"]))
    if os.path.exists(sidecar):
        with open(sidecar, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)["DOCUMENTATION"]
    else:
        module = FILTER_MODULES[source]
        assert hasattr(module, "DOCUMENTATION"), "filter %s (plugins/filter/%s.py) has no %s.yml" % (name, source, name)
        doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["name"] == name
    assert doc.get("short_description") and doc.get("options", {}).get("_input")


# Python files (or folders of them) outside the shipped ones that still lack the header: their owners
# add it (issue 17). Remove an entry once its files have it; never add one.
HEADER_PENDING = (
    "sandbox/cpu-shims/",    # its bytes key the sandbox wheelhouse recipe: a header forces a rebuild
    "sandbox/make-model.py",  # hashes itself into the model recipe: likewise
)


def _python_files():
    """Every Python file of the checkout (git's tracked and new, not ignored), shipped ones first."""
    shipped = sorted(glob.glob(os.path.join(REPO, "plugins", "*", "*.py"))
                     + glob.glob(os.path.join(REPO, "roles", "*", "files", "*.py"))
                     + glob.glob(os.path.join(REPO, "tools", "*.py")))
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=REPO, check=True,
                                capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):   # not a git checkout: the shipped files only
        listed = []
    others = sorted(os.path.join(REPO, rel) for rel in listed
                    if not rel.startswith(HEADER_PENDING) and os.path.join(REPO, rel) not in shipped
                    and os.path.exists(os.path.join(REPO, rel)))
    return shipped + others


@pytest.mark.parametrize("path", _python_files(), ids=lambda path: os.path.relpath(path, REPO))
def test_python_file_has_the_license_header(path):
    """The SPDX header of galaxy.yml's licence (LICENSE, Apache-2.0), never a GPL one."""
    with open(path, encoding="utf-8") as handle:
        head = handle.read(600)
    assert SPDX in head, "%s lacks %r" % (os.path.relpath(path, REPO), SPDX)
    assert "GNU General Public License v3.0+" not in head and "GPL-3.0" not in head


MODULE_FILES = sorted(glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")))


@pytest.mark.parametrize("path", MODULE_FILES, ids=[os.path.basename(p) for p in MODULE_FILES])
def test_module_docs_are_yaml(path):
    """DOCUMENTATION, EXAMPLES and RETURN parse (ansible-test sanity finds a broken one minutes later)."""
    spec = importlib.util.spec_from_file_location("doc_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        assert isinstance(yaml.safe_load(getattr(module, name)), (dict, list)), name
