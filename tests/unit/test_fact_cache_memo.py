# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The fact cache plugin (kvshare.dynamo.jsonfile_memo): persists across runs, decodes once per run.

ansible-core wraps persistent cache plugins in a proxy that JSON-decodes a host's facts on every
read; this plugin must stay out of that proxy, keep facts across ansible-playbook runs like
ansible.builtin.jsonfile, and read each host's file once per run.
"""
import json
import os

import pytest

import render_lib

from ansible_collections.kvshare.dynamo.plugins.cache import jsonfile_memo

PLAY = """
- name: Read facts (the first run gathers them, the second finds them in the cache)
  hosts: local
  gather_facts: %(gather)s
  tasks:
    - name: Show the facts the run has
      ansible.builtin.debug:
        msg: "{{ ansible_facts.get('machine_id', 'none') }} {{ ansible_facts.get('kvshare_marker', 'none') }}"

    - name: Add a cacheable fact
      ansible.builtin.set_fact:
        kvshare_marker: "set by run %(run)d"
        cacheable: true
"""


@pytest.mark.skipif(not os.path.exists(render_lib.ANSIBLE_PLAYBOOK), reason="ansible-playbook not in the venv")
def test_facts_persist_across_runs_through_the_plugin(tmp_path):
    cache_dir = tmp_path / "facts"
    env = dict(ANSIBLE_CACHE_PLUGIN="kvshare.dynamo.jsonfile_memo", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(cache_dir),
               ANSIBLE_GATHERING="implicit")
    shown = []
    for run, gather in ((1, "true"), (2, "false")):
        proc, tasks = render_lib.run_local_play(tmp_path, PLAY % {"gather": gather, "run": run}, **env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        shown.append([t["hosts"]["local"]["msg"] for t in tasks if t["task"]["name"] == "Show the facts the run has"][0])
    with open("/etc/machine-id") as handle:
        machine_id = handle.read().strip()
    # Run 1 gathered (and had no marker yet); run 2 gathered nothing and read both from run 1's file.
    assert shown[0] == "%s none" % machine_id
    assert shown[1] == "%s set by run 1" % machine_id
    # One plain JSON file per host under its own name: core's decoding proxy (which prefixes the
    # name with the schema and wraps the value in a payload) did not wrap the plugin.
    saved = json.loads((cache_dir / "local").read_text())
    assert saved["kvshare_marker"] == "set by run 2"
    assert "__payload__" not in saved


def test_each_host_file_is_decoded_once_per_run(tmp_path, monkeypatch):
    # Options as core's loader would set them from ansible.cfg (the end-to-end test above loads it for real).
    class Configured(jsonfile_memo.CacheModule):
        def get_option(self, option, hostvars=None):
            return {"_uri": str(tmp_path), "_prefix": "", "_timeout": 3600}[option]

    writer = Configured()
    writer.set("sb1", {"machine_id": "abc", "nested": {"list": [1, 2]}})
    reader = Configured()
    loads = []
    original = reader._load

    def counting(path):
        loads.append(path)
        return original(path)
    monkeypatch.setattr(reader, "_load", counting)
    first = reader.get("sb1")
    for dummy in range(50):
        assert reader.get("sb1") is first
    assert first == {"machine_id": "abc", "nested": {"list": [1, 2]}}
    assert loads == [str(tmp_path / "sb1")]
    with pytest.raises(KeyError):
        reader.get("sb2")
