# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The filters' API: a small public set (plugins/filter/, documented in the README), the roles' and
playbooks' own filters under kvshare.dynamo.internal.* (plugins/filter/internal/), and no filter
that nothing calls."""
import glob
import importlib
import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PUBLIC = {"host_address", "frontend_url", "etcd_client_urls", "kv_pool_workers", "kv_share_pairs", "prometheus_file_sd"}
PACKAGE = "ansible_collections.kvshare.dynamo.plugins.filter"


def _filters(sub):
    found = {}
    for path in sorted(glob.glob(os.path.join(REPO, "plugins", "filter", *(sub + ["*.py"])))):
        module = importlib.import_module(".".join([PACKAGE] + sub + [os.path.basename(path)[:-3]]))
        for name in module.FilterModule().filters():
            found[name] = os.path.relpath(path, REPO)
    return found


PUBLIC_FOUND, INTERNAL_FOUND = _filters([]), _filters(["internal"])


def _callers():
    """The collection's roles, playbooks and inventories (not plugins' docs, not tests): the text
    that calls filters."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "roles", "playbooks", "inventories",
                             "site.yml", "verify.yml"], cwd=REPO, check=True, capture_output=True, text=True).stdout.split()
    return dict((rel, open(os.path.join(REPO, rel), encoding="utf-8").read())
                for rel in listed if rel.endswith((".yml", ".yaml", ".j2")))


CALLERS = _callers()


def test_the_public_filters_are_the_documented_set():
    assert set(PUBLIC_FOUND) == PUBLIC, "plugins/filter/ defines %s; the public set is %s" % (sorted(PUBLIC_FOUND), sorted(PUBLIC))


def test_no_name_is_both_public_and_internal():
    assert not set(PUBLIC_FOUND) & set(INTERNAL_FOUND)


def test_the_readme_lists_every_public_filter():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        listed = set(re.findall(r"^\| `kvshare\.dynamo\.([a-z_]+)` \|", handle.read(), re.M))
    assert listed == PUBLIC


@pytest.mark.parametrize("name", sorted(INTERNAL_FOUND))
def test_an_internal_filter_has_a_caller_under_its_internal_name(name):
    called = re.compile(r"kvshare\.dynamo\.internal\.%s\b" % name)
    assert any(called.search(text) for text in CALLERS.values()), \
        "kvshare.dynamo.internal.%s (%s): nothing in roles/ or playbooks/ calls it; remove it" % (name, INTERNAL_FOUND[name])


def test_no_role_or_playbook_calls_an_internal_filter_by_a_public_name():
    wrong = sorted((rel, name) for rel, text in CALLERS.items()
                   for name in INTERNAL_FOUND if re.search(r"kvshare\.dynamo\.%s\b" % name, text))
    assert not wrong, wrong
