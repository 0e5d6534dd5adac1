# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""lookup kvshare.dynamo.play_group_names where the playbooks use it: in a play's hosts line, which
Ansible templates before any inventory variable exists. Real ansible-playbook runs on the controller
(connection local); the host each run reached tells which group its hosts line named."""
import json
import os
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
PLAYBOOK = """
- name: The etcd group as the playbooks' hosts lines see it
  hosts: "{{ (query('kvshare.dynamo.play_group_names') | first).etcd_group_name }}"
  gather_facts: false
  tasks:
    - name: Say which host ran and what the lookup gave
      ansible.builtin.debug:
        msg: "RAN {{ inventory_hostname }} {{ query('kvshare.dynamo.play_group_names') | first | to_json }} END"
"""


def run(tmp_path, *extra):
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "auto_silent"},
        "children": {"etcd": {"hosts": {"in-etcd": None}}, "members": {"hosts": {"in-members": None}}}}}))
    # Set for every host in the inventory: the roles would see it, a hosts line does not.
    (inv / "group_vars" / "all.yml").write_text("kvcr_group_name: kvcr_hosts\n")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default")
    res = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(inv), str(tmp_path / "play.yml")] + list(extra),
                         cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    ran = [json.loads("{%s}" % line.strip())["msg"][len("RAN "):-len(" END")] for line in res.stdout.splitlines()
           if line.strip().startswith('"msg": "RAN ')]
    assert len(ran) == 1, res.stdout[-3000:]
    host, seen = ran[0].split(" ", 1)
    return host, json.loads(seen)


def test_without_extra_vars_the_contracts_groups_and_not_the_inventorys(tmp_path):
    host, seen = run(tmp_path)
    assert host == "in-etcd"
    # kvcr_group_name is set in the inventory: the lookup (like a hosts line) does not see it.
    assert seen == {"etcd_group_name": "etcd", "kvcr_group_name": "kvcr"}


def test_extra_vars_in_every_form_name_the_group(tmp_path):
    assert run(tmp_path, "-e", "etcd_group_name=members")[0] == "in-members"
    host, seen = run(tmp_path, "-e", json.dumps({"etcd_group_name": "members", "kvcr_group_name": "kh"}))
    assert (host, seen) == ("in-members", {"etcd_group_name": "members", "kvcr_group_name": "kh"})
    (tmp_path / "extra.yml").write_text("etcd_group_name: members\n")
    assert run(tmp_path, "-e", "@" + str(tmp_path / "extra.yml"))[0] == "in-members"
