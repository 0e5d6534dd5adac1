# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The report_json action's file writing (plugins/action/report_json.py); verify.yml's use of it
runs for real in tests/unit/test_verify_exit_status.py (a report directory that does not exist)."""
import json
import os
import stat

from ansible_collections.kvshare.dynamo.plugins.action.report_json import render, write_report


def test_render_is_to_nice_json_with_a_final_newline():
    text = render({"b": [1, {"y": None, "x": "é"}], "a": True})
    assert text == '{\n    "a": true,\n    "b": [\n        1,\n        {\n            "x": "\\u00e9",\n            "y": null\n        }\n    ]\n}\n'
    assert json.loads(text) == {"a": True, "b": [1, {"x": "é", "y": None}]}


def test_writes_parents_then_leaves_the_same_text_alone(tmp_path):
    path = tmp_path / "new" / "dir" / "report.json"
    assert write_report(str(path), "one\n", 0o644) is True
    assert path.read_text() == "one\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(path.parent).st_mode) & 0o755 == 0o755
    inode = os.stat(path).st_ino
    assert write_report(str(path), "one\n", 0o644) is False
    assert os.stat(path).st_ino == inode, "an unchanged report was rewritten"
    assert write_report(str(path), "two\n", 0o644) is True
    assert path.read_text() == "two\n"
    assert write_report(str(path), "two\n", 0o600) is True, "a mode change is a change"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["report.json"], "a temporary file was left behind"


def test_check_mode_writes_nothing_and_says_whether_it_would(tmp_path):
    path = tmp_path / "sub" / "report.json"
    assert write_report(str(path), "x\n", 0o644, check_mode=True) is True
    assert not path.parent.exists()
    write_report(str(path), "x\n", 0o644)
    assert write_report(str(path), "x\n", 0o644, check_mode=True) is False
    assert write_report(str(path), "y\n", 0o644, check_mode=True) is True
    assert path.read_text() == "x\n"


def test_the_module_alone_refuses_to_run_on_a_host(capsys):
    from ansible_collections.kvshare.dynamo.plugins.modules import report_json
    from lib.unit import run_module
    code, result = run_module(report_json, {"path": "/tmp/r.json", "content": {}}, capsys)
    assert code == 1 and result["failed"]
    assert "writes on the controller through its action plugin" in result["msg"]
