# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""docs/tags.md lists exactly the tags `ansible-playbook --list-tags` shows, per playbook, and says of
every other tag the task files set that it is only reachable through a parent include.

One ``ansible-playbook --list-tags`` run over every playbook (nothing is connected to or changed).
"""
import glob
import importlib.util
import os
import re
import subprocess

import pytest

from render_lib import ANSIBLE_PLAYBOOK, REPO, ansible_env

_spec = importlib.util.spec_from_file_location("gen_docs", os.path.join(REPO, "tools", "gen_docs.py"))
gen_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_docs)

PLAYBOOKS = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "playbooks", "*.yml")))
ROOT = ["site.yml", "verify.yml"]
LISTED = "## Tags `--list-tags` shows"
DYNAMIC = "## Tags only reachable through a parent include"


@pytest.fixture(scope="module")
def list_tags(tmp_path_factory):
    """{playbook: set of tags} as `ansible-playbook --list-tags` prints them (play and task tags)."""
    tmp_path = tmp_path_factory.mktemp("list-tags")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", os.path.join(REPO, "inventories", "sandbox"), "--list-tags"]
                          + ROOT + PLAYBOOKS, cwd=REPO, env=ansible_env(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown, book = {}, None
    for line in proc.stdout.splitlines():
        match = re.match(r"^playbook: (\S+)$", line.strip())
        if match:
            book = match.group(1)
            shown.setdefault(book, set())
            continue
        for tags in re.findall(r"TAGS: \[([^\]]*)\]", line):
            shown[book].update(tag.strip() for tag in tags.split(",") if tag.strip())
    assert sorted(shown) == sorted(ROOT + PLAYBOOKS), proc.stdout
    return shown


def _table(heading):
    """{tag: [cells after the tag]} of the table under `heading` in docs/tags.md."""
    with open(os.path.join(REPO, "docs", "tags.md"), encoding="utf-8") as handle:
        text = handle.read()
    assert heading in text, "docs/tags.md has no section %r" % heading
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        match = re.match(r"^`([^`]+)`$", cells[0]) if line.startswith("|") else None
        if match:
            assert match.group(1) not in rows, "docs/tags.md lists %s twice under %r" % (match.group(1), heading)
            rows[match.group(1)] = cells[1:]
    return rows


def test_listed_tags_are_what_list_tags_shows(list_tags):
    """No tag in the first table that --list-tags cannot show, none it shows missing."""
    shown = set().union(*list_tags.values())
    documented = set(_table(LISTED))
    assert not documented - shown, "docs/tags.md lists tags --list-tags does not show: %s" % sorted(documented - shown)
    assert not shown - documented, "--list-tags shows tags docs/tags.md does not list: %s" % sorted(shown - documented)


def test_each_listed_tag_names_the_playbooks_that_show_it(list_tags):
    """The playbooks column is, per tag, the playbooks/*.yml whose --list-tags shows it."""
    for root in ROOT:
        assert list_tags[root] == list_tags[os.path.join("playbooks", root)], root
    for tag, cells in _table(LISTED).items():
        want = sorted(os.path.basename(book) for book in PLAYBOOKS if tag in list_tags[book])
        assert re.findall(r"`([^`]+)`", cells[0]) == want, tag


def test_other_tags_are_documented_as_reachable_through_a_parent(list_tags):
    """Every other tag the task files set is in the second table, with the include it needs."""
    shown = set().union(*list_tags.values())
    dynamic = _table(DYNAMIC)
    assert not set(dynamic) & shown, "shown by --list-tags yet documented as reachable only through an include: %s" % (
        sorted(set(dynamic) & shown))
    every = set(gen_docs.all_tags())
    missing = every - shown - set(dynamic)
    assert not missing, "tags set in roles/ or playbooks/ that docs/tags.md does not document: %s" % sorted(missing)
    assert not set(dynamic) - every, "docs/tags.md documents tags no task sets: %s" % sorted(set(dynamic) - every)
    for tag, cells in dynamic.items():
        assert cells[1], "%s: no parent include named" % tag


def test_generator_model_matches_list_tags(list_tags):
    """tools/gen_docs.py's static model of --list-tags agrees with ansible-playbook, playbook by playbook."""
    model = gen_docs.TagModel()
    for book in PLAYBOOKS:
        assert {tag for tag, books in model.listed.items() if book in books} == list_tags[book], book
