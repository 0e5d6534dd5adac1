# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Pytest setup: make `ansible_collections.kvshare.dynamo` importable from this checkout, and keep
every test on loopback (tests/ansible_guard.py): an Ansible run that could reach a host outside
127.0.0.0/8, or a socket the test process connects elsewhere, is refused and fails the test."""
import os
import shlex
import socket
import subprocess
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

_popen_init = subprocess.Popen.__init__
_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _argv(args, shell):
    if isinstance(args, (list, tuple)):
        return [os.fspath(a) if not isinstance(a, (str, bytes)) else a for a in args]
    if isinstance(args, str) and not shell:
        return [args]
    if isinstance(args, str):
        # a shell line: only one that starts with the command itself is understood
        try:
            return shlex.split(args)
        except ValueError:
            return []
    return [os.fspath(args)]


def _guarded_popen_init(self, args, *rest, **kwargs):
    argv = [a.decode() if isinstance(a, bytes) else str(a) for a in _argv(args, kwargs.get("shell"))]
    try:
        ansible_guard.check_run(argv, kwargs.get("cwd"), kwargs.get("env"))
    except ansible_guard.NonLoopbackAnsibleRun as exc:
        ansible_guard.RECORDED.append(str(exc))
        raise
    _popen_init(self, args, *rest, **kwargs)


def _guarded(method):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            try:
                ansible_guard.check_connect(address)
            except ansible_guard.NonLoopbackAnsibleRun as exc:
                ansible_guard.RECORDED.append(str(exc))
                raise
        return method(self, address)
    connect.__name__ = method.__name__
    return connect


subprocess.Popen.__init__ = _guarded_popen_init
socket.socket.connect = _guarded(_connect)
socket.socket.connect_ex = _guarded(_connect_ex)


@pytest.fixture(autouse=True)
def _loopback_only():
    """Fail the test when it tried to leave loopback, even where it caught the refusal."""
    del ansible_guard.RECORDED[:]
    yield
    refused, ansible_guard.RECORDED[:] = list(ansible_guard.RECORDED), []
    if refused:
        pytest.fail("left loopback: %s" % " | ".join(refused), pytrace=False)


# "bad inputs rejected N/N" at the end of a run that includes the bad-input suite. Here, not in
# tests/bad_inputs/: under pytest-xdist only the controller reports, and it loads this file alone.
_BAD_INPUTS = {"passed": 0, "total": 0}


def pytest_runtest_logreport(report):
    if "test_bad_input_rejected[" not in report.nodeid:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _BAD_INPUTS["total"] += 1
        _BAD_INPUTS["passed"] += report.outcome == "passed"


def pytest_terminal_summary(terminalreporter):
    if _BAD_INPUTS["total"]:
        subset = (" (one case per check, KVSHARE_BAD_INPUTS=checks; every case: ./dev.sh bad_inputs)"
                  if os.environ.get("KVSHARE_BAD_INPUTS") == "checks" else "")
        terminalreporter.write_line("bad inputs rejected %d/%d%s" % (_BAD_INPUTS["passed"], _BAD_INPUTS["total"], subset))
