# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The sandbox hosts' cache of compiled module payload code (sandbox/ansiballz-cache): a hit runs
what the current source compiles to, under the current payload's name, and nothing else is cached."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOOK_DIR = os.path.join(REPO, "sandbox", "ansiballz-cache")

# Imports the hook with its cache in CACHE, then imports `probe` from the zip given and prints what
# it returns, where its code says it comes from, and the cache's entries.
RUNNER = r"""
import json, os, sys
sys.path.insert(0, {hook_dir!r})
import kvshare_sandbox_ansiballz_cache as hook
hook._CACHE_DIR = {cache!r}
sys.path.insert(0, {archive!r})
import probe
print(json.dumps({{"value": probe.value(), "filename": probe.value.__code__.co_filename,
                  "entries": sorted(os.listdir({cache!r})) if os.path.isdir({cache!r}) else []}}))
"""


def _payload(tmp_path, run, name, body):
    folder = tmp_path / run
    folder.mkdir()
    archive = folder / name
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("probe.py", body)
    return str(archive)


def _run(archive, cache):
    code = RUNNER.format(hook_dir=HOOK_DIR, cache=cache, archive=archive)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.mark.skipif(os.geteuid() != 0, reason="the hook caches for root only")
def test_hit_runs_the_current_source_under_the_current_name(tmp_path):
    cache = str(tmp_path / "cache")
    first = _payload(tmp_path, "run1", "ansible_ping_payload.zip", "def value():\n    return 1\n")
    seen = _run(first, cache)
    assert seen["value"] == 1 and len(seen["entries"]) == 1
    assert seen["filename"] == os.path.join(first, "probe.py")

    # Same source in another run's payload: served from the cache, named after the new payload.
    second = _payload(tmp_path, "run2", "ansible_ping_payload.zip", "def value():\n    return 1\n")
    seen = _run(second, cache)
    assert seen["value"] == 1 and len(seen["entries"]) == 1
    assert seen["filename"] == os.path.join(second, "probe.py")

    # A changed source is compiled anew (its own entry), never served from the old one.
    third = _payload(tmp_path, "run3", "ansible_ping_payload.zip", "def value():\n    return 2\n")
    seen = _run(third, cache)
    assert seen["value"] == 2 and len(seen["entries"]) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="the hook caches for root only")
def test_other_zips_are_not_cached(tmp_path):
    cache = str(tmp_path / "cache")
    other = _payload(tmp_path, "run1", "library.zip", "def value():\n    return 3\n")
    seen = _run(other, cache)
    assert seen["value"] == 3 and seen["entries"] == []
