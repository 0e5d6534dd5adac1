# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/modules/managed_files.py (in-process, on a real temporary tree)."""
import grp
import os
import pwd
import stat

from ansible_collections.kvshare.dynamo.plugins.modules import managed_files
from lib.unit import run_module

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def run(args, capsys, check=False, diff=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    if diff:
        args = dict(args, _ansible_diff=True)
    return run_module(managed_files, args, capsys)


def layout(tmp_path):
    conf = str(tmp_path / "etc" / "svc")
    return {
        "directories": [{"path": conf, "owner": ME, "group": MY_GROUP, "mode": "0750"}],
        "files": [
            {"path": conf + "/svc.env", "content": "A=1\n", "owner": ME, "group": MY_GROUP, "mode": "0640", "label": "a"},
            {"path": conf + "/key.pem", "content": "secret\n", "owner": ME, "group": MY_GROUP, "mode": "0600", "label": "b"},
        ],
    }


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_creates_then_leaves_alone(tmp_path, capsys):
    args = layout(tmp_path)
    rc, out = run(args, capsys)
    conf = args["directories"][0]["path"]
    assert rc == 0 and out["changed"] is True
    assert out["changed_paths"] == [conf, conf + "/svc.env", conf + "/key.pem"]
    assert out["changed_labels"] == ["a", "b"]
    assert mode_of(conf) == 0o750 and mode_of(conf + "/svc.env") == 0o640 and mode_of(conf + "/key.pem") == 0o600
    with open(conf + "/svc.env") as handle:
        assert handle.read() == "A=1\n"
    rc, out = run(args, capsys)
    assert rc == 0 and out["changed"] is False and out["changed_paths"] == [] and out["changed_labels"] == []


def test_one_changed_file_reports_its_key_and_leaves_no_temporary_file(tmp_path, capsys):
    args = layout(tmp_path)
    run(args, capsys)
    args["files"][0]["content"] = "A=2\n"
    rc, out = run(args, capsys)
    conf = args["directories"][0]["path"]
    assert out["changed_paths"] == [conf + "/svc.env"] and out["changed_labels"] == ["a"]
    assert sorted(os.listdir(conf)) == ["key.pem", "svc.env"]
    assert mode_of(conf + "/svc.env") == 0o640


def test_mode_drift_is_repaired_without_rewriting(tmp_path, capsys):
    args = layout(tmp_path)
    run(args, capsys)
    key = args["files"][1]["path"]
    os.chmod(key, 0o644)
    inode = os.stat(key).st_ino
    rc, out = run(args, capsys)
    assert out["changed_paths"] == [key] and mode_of(key) == 0o600 and os.stat(key).st_ino == inode


def test_check_mode_reports_and_writes_nothing(tmp_path, capsys):
    args = layout(tmp_path)
    rc, out = run(args, capsys, check=True)
    assert rc == 0 and out["changed"] is True and len(out["changed_paths"]) == 3
    assert not os.path.exists(args["directories"][0]["path"])


def test_diff_shows_before_and_after(tmp_path, capsys):
    args = layout(tmp_path)
    run(args, capsys)
    args["files"][0]["content"] = "A=3\n"
    rc, out = run(args, capsys, diff=True)
    assert out["diff"] == [{"before_header": args["files"][0]["path"], "after_header": args["files"][0]["path"],
                            "before": "A=1\n", "after": "A=3\n"}]


def test_unknown_owner_fails_naming_path_and_owner(tmp_path, capsys):
    args = layout(tmp_path)
    args["files"][0]["owner"] = "no-such-user-kvshare"
    rc, out = run(args, capsys)
    assert rc == 1
    assert out["msg"] == "managed_files: %s: owner no-such-user-kvshare does not exist" % args["files"][0]["path"]


def test_a_directory_where_a_file_belongs_fails(tmp_path, capsys):
    args = layout(tmp_path)
    os.makedirs(args["files"][0]["path"])
    rc, out = run(args, capsys)
    assert rc == 1 and out["msg"].endswith("svc.env exists and is not a regular file")


def test_validate_failure_keeps_the_old_file(tmp_path, capsys):
    args = layout(tmp_path)
    run(args, capsys)
    args["files"][0].update(content="broken\n", validate="grep -q = %s")
    rc, out = run(args, capsys)
    conf = args["directories"][0]["path"]
    assert rc == 1 and "svc.env: validate (grep -q = %s) failed with rc 1" in out["msg"]
    with open(conf + "/svc.env") as handle:
        assert handle.read() == "A=1\n"
    assert sorted(os.listdir(conf)) == ["key.pem", "svc.env"]
    args["files"][0]["content"] = "A=4\n"
    rc, out = run(args, capsys)
    assert rc == 0 and out["changed_labels"] == ["a"]


def test_validate_without_placeholder_fails_before_writing(tmp_path, capsys):
    args = layout(tmp_path)
    run(args, capsys)
    args["files"][0].update(content="A=5\n", validate="true")
    rc, out = run(args, capsys)
    conf = args["directories"][0]["path"]
    assert rc == 1 and out["msg"].endswith("svc.env: validate must contain %s")
    with open(conf + "/svc.env") as handle:
        assert handle.read() == "A=1\n"
    assert sorted(os.listdir(conf)) == ["key.pem", "svc.env"]


def test_absent_removes_files_and_links_once_and_refuses_directories(tmp_path, capsys):
    unit, link, gone = tmp_path / "acs.service", tmp_path / "wants-acs.service", tmp_path / "never-there"
    unit.write_text("[Unit]\n")
    link.symlink_to(unit)
    args = {"absent": [str(unit), str(link), str(gone)]}
    rc, out = run(args, capsys, check=True)
    assert rc == 0 and out["changed_paths"] == [str(unit), str(link)] and unit.exists() and os.path.lexists(link)
    rc, out = run(args, capsys, diff=True)
    assert rc == 0 and out["changed"] is True and out["changed_paths"] == [str(unit), str(link)]
    assert not os.path.lexists(unit) and not os.path.lexists(link)
    assert out["diff"][0]["before"] == "[Unit]\n" and out["diff"][0]["after"] == ""
    rc, out = run(args, capsys)
    assert rc == 0 and out["changed"] is False
    rc, out = run({"absent": [str(tmp_path)]}, capsys)
    assert rc == 1 and "is a directory" in out["msg"] and tmp_path.is_dir()
