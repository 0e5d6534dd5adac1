# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""etcd_backup.yml and etcd_restore.yml say plainly that they do not support check mode, before
they touch any host (a local inventory: no connection is made)."""
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)


@pytest.mark.parametrize("playbook", ["etcd_backup", "etcd_restore"])
def test_check_mode_is_refused(tmp_path, playbook):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n    etcd:\n      hosts:\n        sb1:\n          ansible_connection: local\n"
                   "          ansible_python_interpreter: %s\n" % sys.executable)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default")
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inv), "playbooks/%s.yml" % playbook,
                           "--check", "-e", "etcd_restore_snapshot=/nonexistent"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "playbooks/%s.yml does not support check mode (--check)" % playbook in out, out[-3000:]
    assert "Gathering Facts" not in out, "a host was contacted before the refusal"
