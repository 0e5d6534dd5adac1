# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Loopback-only guard for the tests: no Ansible run a test starts may reach a host outside 127.0.0.0/8.

tests/conftest.py installs it for the whole session: every ``subprocess.Popen`` (so also
``subprocess.run``/``check_output``) of ``ansible-playbook`` or ``ansible`` is checked before the
process starts, and refused (``NonLoopbackAnsibleRun``, an AssertionError, recorded so that the test
fails even where it catches the error) when the run could connect to a host that is not loopback:

- runs that connect nowhere pass unchecked: ``--syntax-check``, ``--list-*``, ``--version``;
  ``playbooks/validate.yml`` with ``kvshare_validate_offline`` true (its one play runs every host with
  connection local);
- anything else is resolved as Ansible would resolve it: ``ansible-inventory --list`` with the run's
  own inventories, ``--limit`` and extra vars, in its working directory and environment (so
  ansible.cfg's default inventory counts too). Every host whose connection leaves this machine (not
  ``local``, podman, docker or chroot) must have an ``ansible_host`` (else its inventory name) that
  is a loopback address or ``localhost``.

Names are not resolved (a lookup is already traffic): a name other than ``localhost`` is refused.
Sockets the test process opens itself are checked by ``check_connect`` (see conftest.py).
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import subprocess

GUARDED = ("ansible-playbook", "ansible")
NO_CONNECTION_FLAGS = ("--syntax-check", "--list-tasks", "--list-hosts", "--list-tags", "--version")
# Connections that stay on this machine (no network): local, and containers reached through their runtime.
LOCAL_CONNECTIONS = ("local", "ansible.builtin.local", "containers.podman.podman", "podman",
                     "community.docker.docker", "community.docker.docker_api", "docker",
                     "community.general.chroot", "chroot")
TRUE_TEXT = ("1", "true", "yes", "on", "y", "t")


# Refusals so far (conftest.py fails the test that caused one, even where the test caught it).
RECORDED = []


class NonLoopbackAnsibleRun(AssertionError):
    """An Ansible run (or a socket) would reach a host outside 127.0.0.0/8."""


def is_loopback(address):
    """True for 127.0.0.0/8, ::1 and the name localhost; False for anything else, names included."""
    text = str(address or "").strip().strip("[]")
    if text.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(text.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _options(argv):
    """(inventories, limits, extra-var arguments, other flags, positional arguments) of an ansible argv."""
    inventories, limits, extras, flags, positional = [], [], [], [], []
    takes = {"-i": inventories, "--inventory": inventories, "--inventory-file": inventories,
             "-l": limits, "--limit": limits, "-e": extras, "--extra-vars": extras}
    valued = {"-u", "--user", "-c", "--connection", "-T", "--timeout", "-f", "--forks", "-t", "--tags",
              "--skip-tags", "-M", "--module-path", "--private-key", "--key-file", "--vault-id",
              "--vault-password-file", "--start-at-task", "-m", "--module-name", "-a", "--args",
              "-b", "--become-user", "--become-method", "--ssh-common-args", "--ssh-extra-args",
              "--scp-extra-args", "--sftp-extra-args", "-P", "--poll", "-B", "--background",
              "--playbook-dir", "--become-password-file", "--connection-password-file"}
    valued.discard("-b")  # --become takes no value
    args = [str(a) for a in argv[1:]]
    pos = 0
    while pos < len(args):
        arg = args[pos]
        name, eq, value = arg.partition("=")
        if arg.startswith("--") and eq and name in takes:
            takes[name].append(value)
        elif arg in takes and pos + 1 < len(args):
            takes[arg].append(args[pos + 1])
            pos += 1
        elif len(arg) > 2 and arg[:2] in ("-i", "-l", "-e") and not arg.startswith("--"):
            takes[arg[:2]].append(arg[2:])
        elif arg in valued and pos + 1 < len(args):
            flags.append(arg)
            pos += 1
        elif arg.startswith("-"):
            flags.append(name)
        else:
            positional.append(arg)
        pos += 1
    return inventories, limits, extras, flags, positional


def _extra_vars(extras, cwd):
    """The extra vars of a run as a dict (key=value, JSON/YAML mappings and @files)."""
    import yaml

    out = {}
    for text in extras:
        text = text.strip()
        if text.startswith("@"):
            path = os.path.join(cwd or os.getcwd(), text[1:])
            with open(path) as fh:
                data = yaml.safe_load(fh) or {}
        elif text.startswith("{") or text.startswith("---"):
            data = yaml.safe_load(text) or {}
        else:
            data = {}
            for item in shlex.split(text):
                key, eq, value = item.partition("=")
                if eq:
                    data[key] = value
        if isinstance(data, dict):
            out.update(data)
    return out


def _truthy(value):
    return value is True or str(value).strip().lower() in TRUE_TEXT


def _offline_validation(positional, extra):
    playbooks = [p for p in positional if p.endswith((".yml", ".yaml"))]
    return (_truthy(extra.get("kvshare_validate_offline", False)) and bool(playbooks)
            and all(os.path.basename(p) == "validate.yml" for p in playbooks))


def resolved_hosts(argv, cwd=None, env=None):
    """{host: (connection, address)} of every host the run targets, per ``ansible-inventory --list``."""
    inventories, limits, extras, _flags, _positional = _options(argv)
    binary = os.path.join(os.path.dirname(str(argv[0])), "ansible-inventory")
    if not os.path.exists(binary):
        binary = "ansible-inventory"
    cmd = [binary, "--list"]
    for inventory in inventories:
        cmd += ["-i", inventory]
    for limit in limits:
        cmd += ["--limit", limit]
    for extra in extras:
        cmd += ["-e", extra]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise NonLoopbackAnsibleRun("loopback guard: cannot resolve the inventory of %s (%s): %s"
                                    % (" ".join(map(str, argv)), " ".join(cmd), proc.stderr[-1000:]))
    data = json.loads(proc.stdout)
    hostvars = (data.get("_meta") or {}).get("hostvars") or {}
    hosts = set(hostvars)
    for group, entry in data.items():
        if group != "_meta" and isinstance(entry, dict):
            hosts.update(entry.get("hosts") or [])
    extra = _extra_vars(extras, cwd)
    out = {}
    for host in sorted(hosts):
        host_vars = dict(hostvars.get(host) or {})
        host_vars.update(dict((k, v) for k, v in extra.items() if k in ("ansible_host", "ansible_connection")))
        out[host] = (str(host_vars.get("ansible_connection") or "ssh"),
                     resolve_reference(str(host_vars.get("ansible_host") or host), host_vars))
    return out


_REFERENCE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


def resolve_reference(value, host_vars, depth=5):
    """``ansible-inventory --list`` does not template: follow ``{{ name }}`` to the host's own
    ``name`` (the sandbox says ansible_host: "{{ kvshare_bind_address }}"). Anything else stays as
    written, and is then refused as not loopback."""
    for dummy in range(depth):
        match = _REFERENCE.match(value.strip())
        if not match or match.group(1) not in host_vars:
            break
        value = str(host_vars[match.group(1)])
    return value


def violations(argv, cwd=None, env=None):
    """Why this Ansible run could reach a non-loopback host: a list of lines ([] when it cannot)."""
    if not argv or os.path.basename(str(argv[0])) not in GUARDED:
        return []
    _inventories, _limits, extras, flags, positional = _options(argv)
    if any(flag in NO_CONNECTION_FLAGS for flag in flags):
        return []
    extra = _extra_vars(extras, cwd)
    if os.path.basename(str(argv[0])) == "ansible-playbook" and _offline_validation(positional, extra):
        return []
    connection_flag = None
    args = [str(a) for a in argv]
    for pos, arg in enumerate(args):
        if arg in ("-c", "--connection") and pos + 1 < len(args):
            connection_flag = args[pos + 1]
        elif arg.startswith("--connection="):
            connection_flag = arg.split("=", 1)[1]
    found = []
    for host, (connection, address) in resolved_hosts(argv, cwd, env).items():
        if "ansible_connection" not in extra and connection_flag and connection == "ssh":
            connection = connection_flag
        if connection in LOCAL_CONNECTIONS or is_loopback(address):
            continue
        found.append("%s: ansible_host %s over %s is not loopback" % (host, address, connection))
    return found


def check_run(argv, cwd=None, env=None):
    """Raise NonLoopbackAnsibleRun when the run could reach a host outside 127.0.0.0/8."""
    found = violations(argv, cwd, env)
    if found:
        raise NonLoopbackAnsibleRun(
            "tests may contact loopback hosts only (127.0.0.0/8), or validate offline "
            "(playbooks/validate.yml -e kvshare_validate_offline=true); refused %s: %s"
            % (" ".join(map(str, argv)), "; ".join(found)))


def check_connect(address):
    """Raise NonLoopbackAnsibleRun for an AF_INET/AF_INET6 socket address outside loopback."""
    if isinstance(address, tuple) and address and isinstance(address[0], str) and not is_loopback(address[0]):
        raise NonLoopbackAnsibleRun("tests may connect to loopback only (127.0.0.0/8, ::1); refused %s" % (address,))
