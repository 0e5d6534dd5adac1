# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Pytest setup: make `ansible_collections.kvshare.dynamo` importable from this checkout, and keep
every test on loopback (tests/ansible_guard.py): an Ansible run or an ssh that could reach a host
outside 127.0.0.0/8 (read through env/timeout/sh -c... wrappers; delegate_to and add_host targets at
run time), or a socket the test process connects elsewhere, is refused and fails the test."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, "collections")
# The link collections/ansible_collections/kvshare/dynamo -> the checkout is not in git (ansible-test
# refuses a committed self-link); ./dev.sh makes it, and so does a bare pytest run.
_LINK = os.path.join(COLLECTIONS, "ansible_collections", "kvshare", "dynamo")
if not os.path.islink(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    try:
        os.symlink(os.path.join("..", "..", ".."), _LINK)
    except FileExistsError:  # another pytest-xdist worker made it first
        pass
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

import ansible_guard  # noqa: E402

# Popen (every ansible*/molecule/ssh command, through env/timeout/sh -c... wrappers), socket connects,
# and the run-time guard for every Ansible run started here (tests/ansible_guard.py).
ansible_guard.install()


@pytest.fixture(autouse=True)
def _loopback_only():
    """Fail the test when it, or a run it started, tried to leave loopback, even where it caught the refusal
    (also a refusal in a wider-scoped fixture it uses, set up just before)."""
    yield
    refused = ansible_guard.take_refusals()
    if refused:
        pytest.fail("left loopback: %s" % " | ".join(refused), pytrace=False)


# "bad inputs rejected N/N (CPU ...)" at the end of a run that includes the bad-input suite. Here, not
# in tests/bad_inputs/: under pytest-xdist only the controller reports, and it loads this file alone.
_BAD_INPUTS = {"passed": 0, "total": 0, "cpu": 0.0}


def pytest_runtest_logreport(report):
    if "test_bad_input_rejected[" not in report.nodeid:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _BAD_INPUTS["total"] += 1
        _BAD_INPUTS["passed"] += report.outcome == "passed"
        # each case's ansible-playbook run: user + system CPU of the run and its workers
        _BAD_INPUTS["cpu"] += dict(report.user_properties).get("bad_input_cpu_s", 0.0)


def pytest_terminal_summary(terminalreporter):
    if _BAD_INPUTS["total"]:
        cpu = (" (runs: %.0f s of CPU, %.1f s a case)" % (_BAD_INPUTS["cpu"], _BAD_INPUTS["cpu"] / _BAD_INPUTS["total"])
               if _BAD_INPUTS["cpu"] else "")
        terminalreporter.write_line("bad inputs rejected %d/%d%s" % (_BAD_INPUTS["passed"], _BAD_INPUTS["total"], cpu))
