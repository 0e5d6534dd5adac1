# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/modules/preflight_info.py (a temporary tree and this machine's passwd)."""
import os
import pwd

from ansible_collections.kvshare.dynamo.plugins.modules import preflight_info
from lib.unit import run_module


def test_paths_and_accounts(tmp_path, capsys):
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    os.symlink(str(model), str(tmp_path / "link"))
    me = pwd.getpwuid(os.getuid())
    paths = [str(model), str(tmp_path / "file"), str(tmp_path / "link"), str(tmp_path / "missing")]
    rc, out = run_module(preflight_info, {"paths": paths, "users": [me.pw_name, "kvshare-no-such-user"]}, capsys)
    assert rc == 0 and out["changed"] is False
    assert out["paths"] == {
        paths[0]: {"exists": True, "isdir": True},
        paths[1]: {"exists": True, "isdir": False},
        paths[2]: {"exists": True, "isdir": True},
        paths[3]: {"exists": False, "isdir": False},
    }
    assert out["users"][me.pw_name] == {"uid": me.pw_uid, "gid": me.pw_gid, "home": me.pw_dir, "shell": me.pw_shell}
    assert out["users"]["kvshare-no-such-user"] is None


def test_nothing_asked(capsys):
    rc, out = run_module(preflight_info, {}, capsys)
    assert rc == 0 and out["paths"] == {} and out["users"] == {}
