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
    assert out["units"] == {} and out["commands"] == {}


FAKE_SYSTEMCTL = """#!%s
# Stands in for systemctl show: one block per unit named after "--", from the table below.
import sys
states = {"maru-server.service": ("active", "running", "loaded"), "gone.service": ("inactive", "dead", "not-found"),
          "maru-resource-manager.service": ("failed", "failed", "loaded")}
with open(sys.argv[0] + ".calls", "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\\n")
if "broken.service" in sys.argv:
    sys.exit(1)
units = sys.argv[sys.argv.index("--") + 1:]
print("\\n\\n".join("ActiveState=%%s\\nSubState=%%s\\nLoadState=%%s" %% states[u] for u in units))
"""


def fake_systemctl(tmp_path, monkeypatch):
    import sys
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "systemctl"
    script.write_text(FAKE_SYSTEMCTL % sys.executable)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ.get("PATH", "")))
    return script


def test_units_in_one_systemctl_call(tmp_path, monkeypatch, capsys):
    script = fake_systemctl(tmp_path, monkeypatch)
    units = ["maru-server.service", "gone.service", "maru-resource-manager.service"]
    rc, out = run_module(preflight_info, {"units": units}, capsys)
    assert rc == 0 and out["changed"] is False
    assert out["units"] == {
        "maru-server.service": {"ActiveState": "active", "SubState": "running", "LoadState": "loaded"},
        "gone.service": {"ActiveState": "inactive", "SubState": "dead", "LoadState": "not-found"},
        "maru-resource-manager.service": {"ActiveState": "failed", "SubState": "failed", "LoadState": "loaded"},
    }
    calls = (tmp_path / "bin" / "systemctl.calls").read_text().splitlines()
    assert calls == ["show -p ActiveState,SubState,LoadState -- " + " ".join(units)]
    assert script.exists()


def test_units_unreadable_when_systemctl_fails(tmp_path, monkeypatch, capsys):
    fake_systemctl(tmp_path, monkeypatch)
    rc, out = run_module(preflight_info, {"units": ["maru-server.service", "broken.service"]}, capsys)
    assert rc == 0
    assert out["units"] == {"maru-server.service": None, "broken.service": None}


def test_commands_run_side_by_side_and_report_their_outcome(tmp_path, capsys):
    import sys
    # Each command waits for the other's file: run one after the other, the first would give up
    # after 10 s and exit 3.
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    wait_for = ("import os, sys, time\nopen(sys.argv[1], 'w').close()\nend = time.time() + 10\n"
                "while not os.path.exists(sys.argv[2]) and time.time() < end: time.sleep(0.01)\n"
                "sys.stderr.write('saw %s\\n' % os.path.exists(sys.argv[2])); sys.exit(0 if os.path.exists(sys.argv[2]) else 3)")
    commands = [
        {"name": "first", "argv": [sys.executable, "-c", wait_for, a, b]},
        {"name": "second", "argv": [sys.executable, "-c", wait_for, b, a]},
        {"name": "down", "argv": [sys.executable, "-c", "import sys; print('out'); sys.stderr.write('maru-server down'); sys.exit(2)"]},
    ]
    rc, out = run_module(preflight_info, {"commands": commands}, capsys)
    assert rc == 0 and out["changed"] is False
    assert out["commands"]["first"] == {"rc": 0, "stdout": "", "stderr": "saw True\n"}
    assert out["commands"]["second"] == {"rc": 0, "stdout": "", "stderr": "saw True\n"}
    assert out["commands"]["down"] == {"rc": 2, "stdout": "out\n", "stderr": "maru-server down"}
