# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The loopback guard (tests/ansible_guard.py) in every Python process of a guarded test run.

The guard puts this directory first on PYTHONPATH of every Ansible run a test starts
(``ansible_guard.runtime_env``), so Python imports this file at start-up in ansible-playbook, its
workers, ansible-inventory and the modules it runs on this machine: socket connects and name lookups
outside loopback, every ssh that Ansible's ssh connection plugin starts (``delegate_to``, ``add_host``,
any ``ansible_ssh_executable``) and nested Ansible runs are refused there, and recorded in the file
named by KVSHARE_GUARD_RECORD for the test that started the run. Then the next sitecustomize on
sys.path, if any, runs as it would have.
"""
import importlib.util
import os
import sys


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _install():
    here = os.path.dirname(os.path.abspath(__file__))
    guard = sys.modules.get("ansible_guard") or _load("ansible_guard", os.path.join(here, "..", "ansible_guard.py"))
    sys.modules.setdefault("ansible_guard", guard)
    guard.install(child=True)
    for directory in sys.path:
        candidate = os.path.join(directory or ".", "sitecustomize.py")
        if os.path.abspath(directory or ".") != here and os.path.isfile(candidate):
            _load("_kvshare_next_sitecustomize", candidate)
            break


_install()
