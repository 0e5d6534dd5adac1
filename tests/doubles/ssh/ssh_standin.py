# TEST DOUBLE for OpenSSH's ssh client (ansible_ssh_executable): runs the remote command on this machine, connects nowhere; unit tests only.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Stands in for `ssh` under ansible's ssh connection plugin, so that a test's task really runs
through that plugin (argument building, pipelining, interpreter discovery, result parsing) without a
network or an sshd: ``ssh [options] HOST COMMAND`` runs COMMAND with ``/bin/sh -c`` here, stdin and
stdout passed through (a pipelined module arrives on stdin). HOST must be a loopback address or
localhost; anything else exits 255, as ssh does when it cannot connect.

Started through a small executable wrapper that the test writes (``exec python3 ssh_standin.py "$@"``):
``ansible_ssh_executable`` names one program, and a test-double file carries no shebang.
"""
import ipaddress
import os
import sys


def is_loopback(host):
    text = host.rsplit("@", 1)[-1].strip("[]")
    if text in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("ssh stand-in: usage: ssh [options] HOST COMMAND\n")
        return 255
    host, command = argv[-2], argv[-1]
    if not is_loopback(host):
        sys.stderr.write("ssh stand-in: refusing %r: loopback only\n" % host)
        return 255
    os.execv("/bin/sh", ["/bin/sh", "-c", command])
    return 255  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
