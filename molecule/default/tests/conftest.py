# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Fixtures for the sandbox scenario's testinfra checks: hosts over SSH, inventory data, helpers.

The helpers are tests/lib/sandbox.py's, for the inventory in KVSHARE_INVENTORY (another copy of the
sandbox, with other addresses and container names) or inventories/sandbox.

This pytest (molecule's verifier, rootdir molecule/default/tests) does not load tests/conftest.py: it
installs the same loopback guard itself (tests/ansible_guard.py), so every ssh testinfra starts, every
Ansible run and every socket of these checks is refused, and fails the check, when it could leave
127.0.0.0/8 (Ansible's runs also get the run-time guard: delegate_to, add_host).
"""
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests"))
import ansible_guard  # noqa: E402  (tests/ansible_guard.py, the one guard library)

ansible_guard.install()

from lib.sandbox import Sandbox, http_json, wait_for  # noqa: E402

SB = Sandbox()
INVENTORY, HOSTVARS = SB.inventory, SB.hostvars
group, address, workers, ssh_host = SB.group, SB.address, SB.workers, SB.ssh_host
FRONTEND, FRONTEND_URL = SB.frontend, SB.frontend_url
generate_instances, instance_of, completion = SB.generate_instances, SB.instance_of, SB.completion
__all__ = ["REPO", "INVENTORY", "HOSTVARS", "FRONTEND", "FRONTEND_URL", "group", "address", "workers", "ssh_host",
           "generate_instances", "instance_of", "completion", "http_json", "wait_for", "ansible_playbook", "hosts"]


def ansible_playbook(*args, timeout=1200):
    """ansible-playbook -i <inventory> *args: the CompletedProcess."""
    return SB.playbook(*args, timeout=timeout)[0]


@pytest.fixture(autouse=True)
def _loopback_only():
    """Fail the check when it, or a run it started, tried to leave loopback, even where it caught the refusal."""
    yield
    refused = ansible_guard.take_refusals()
    if refused:
        pytest.fail("left loopback: %s" % " | ".join(refused), pytrace=False)


@pytest.fixture(scope="session")
def hosts():
    return {h: ssh_host(h) for h in group("sandbox")}


# KVSHARE_VERIFY_CHECKS: steady (CI: the checks that leave every service running), disruptive (the
# ones that restart etcd members, maru-server or vLLM engines; ./dev.sh faults-here) or all (default,
# `molecule test`).
_CHECKS = os.environ.get("KVSHARE_VERIFY_CHECKS", "all")


def pytest_configure(config):
    config.addinivalue_line("markers", "disruptive: restarts services of the converged stack (not in CI's verify)")


def pytest_collection_modifyitems(config, items):
    if _CHECKS not in ("steady", "disruptive", "all"):
        raise pytest.UsageError("KVSHARE_VERIFY_CHECKS=%s: one of steady, disruptive, all" % _CHECKS)
    if _CHECKS == "all":
        return
    keep = [i for i in items if (i.get_closest_marker("disruptive") is not None) == (_CHECKS == "disruptive")]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep
