# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Loopback-only guard for the tests: no run a test starts may reach a host outside 127.0.0.0/8.

The one guard library: tests/conftest.py and the molecule verifier's conftest call ``install()``,
``tests/loopback_guard/sitecustomize.py`` calls it in every Python process of a guarded run, and
``tests/loopback_guard/{ssh,scp,sftp}`` run this file (``python3 ansible_guard.py ssh ARGS``).

Before a command starts (``subprocess.Popen``, so also ``run``/``check_output``), the command is
read through its wrappers (``env``, ``timeout``, ``nice``, ``nohup``, ``setsid``, ``stdbuf``,
``ionice``, ``taskset``, ``sudo``, ``xargs``, ``unshare``, ``ip netns exec``, ``sshpass``,
``python -m ansible``, and shell scripts: ``sh``/``bash -c '...'``, a script file, ``shell=True``),
and refused (``NonLoopbackAnsibleRun``, an AssertionError, recorded so that the test fails even where
it catches the error) when:

- an ``ansible-playbook``, ``ansible`` or ``ansible-console`` run could connect to a host that is not
  loopback, resolved as Ansible resolves it: ``ansible-inventory --list`` with the run's own
  inventories, ``--limit``, extra vars, vault options and playbook directory (its group_vars and
  host_vars), in its working directory and environment (ansible.cfg's default inventory counts too).
  Every host whose connection leaves this machine must have an ``ansible_host`` and an
  ``ansible_ssh_host`` (where set; else its inventory name) that are loopback; a connection that is
  neither known to stay here (local, podman, docker, chroot: without a remote daemon) nor known to go
  to that address (ssh, paramiko, winrm, psrp, network_cli, ...) is refused. Runs that connect
  nowhere pass unchecked: ``--syntax-check``, ``--list-*``, ``--version``; ``playbooks/validate.yml``
  with ``kvshare_validate_offline`` true;
- ``ssh``, ``scp`` or ``sftp`` would reach a host that is not loopback (``ssh_violations``);
- a shell script that names Ansible cannot be parsed.

Targets only known while a playbook runs (``delegate_to``, ``add_host``, play variables) are checked
at run time: every guarded run (``ansible*``, ``molecule``) gets ``runtime_env()``:
``ANSIBLE_SSH_EXECUTABLE``/``ANSIBLE_SCP_EXECUTABLE``/``ANSIBLE_SFTP_EXECUTABLE`` name
``tests/loopback_guard/{ssh,scp,sftp}``, which evaluate ssh's own view of the destination (``ssh -G``:
argv and ssh_config, no connection) and exit 255 with a message unless it is loopback, before ssh
runs; ``PYTHONPATH`` starts with ``tests/loopback_guard``, whose sitecustomize installs this guard in
Ansible's own processes (socket connects and name lookups, paramiko included; every ssh the ssh
connection plugin starts, whatever ``ansible_ssh_executable`` says; nested runs). Refusals in those
processes are appended to the file in ``KVSHARE_GUARD_RECORD``; ``take_refusals()`` collects them.

Names are not looked up (a lookup is already traffic): a name is loopback when it is ``localhost``
or /etc/hosts maps it to loopback addresses only.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import subprocess
import sys
import threading

TESTS = os.path.dirname(os.path.abspath(__file__))
GUARD_DIR = os.path.join(TESTS, "loopback_guard")
RECORD_ENV = "KVSHARE_GUARD_RECORD"
# What the guard runs once a target passed (default: the real tool on PATH); tests point it at stand-ins.
EXEC_ENV = {"ssh": "KVSHARE_GUARD_EXEC_SSH", "scp": "KVSHARE_GUARD_EXEC_SCP", "sftp": "KVSHARE_GUARD_EXEC_SFTP"}
TOOL_ENV = {"ssh": "ANSIBLE_SSH_EXECUTABLE", "scp": "ANSIBLE_SCP_EXECUTABLE", "sftp": "ANSIBLE_SFTP_EXECUTABLE"}

# Runs resolved through their inventory; runs that only get the run-time guard.
GUARDED = ("ansible-playbook", "ansible", "ansible-console")
RUNTIME_ONLY = ("ansible-inventory", "molecule")
SSH_TOOLS = ("ssh", "scp", "sftp")
NO_CONNECTION_FLAGS = ("--syntax-check", "--list-tasks", "--list-hosts", "--list-tags", "--version")
# Connections that stay on this machine (no network): local, and containers reached through their runtime.
LOCAL_CONNECTIONS = ("local", "ansible.builtin.local", "ansible.legacy.local", "containers.podman.podman", "podman",
                     "community.docker.docker", "community.docker.docker_api", "docker",
                     "community.general.chroot", "chroot")
# Connections that go to the host's address (which must then be loopback).
NETWORK_CONNECTIONS = ("ssh", "ansible.builtin.ssh", "ansible.legacy.ssh", "smart", "paramiko", "paramiko_ssh",
                       "ansible.builtin.paramiko_ssh", "ansible.legacy.paramiko_ssh", "winrm", "ansible.builtin.winrm",
                       "psrp", "ansible.builtin.psrp", "network_cli", "ansible.netcommon.network_cli", "netconf",
                       "ansible.netcommon.netconf", "httpapi", "ansible.netcommon.httpapi", "libssh",
                       "ansible.netcommon.libssh")
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
TRUE_TEXT = ("1", "true", "yes", "on", "y", "t")
_NAMES = r"ansible(?:-playbook|-inventory|-console)?|molecule"
# A word that names a guarded tool (as a command, a path's last part or a quoted word).
_MENTION = re.compile(r"(?:^|[\s/;&|(`'\"=])(?:%s)(?=$|[\s;&|)`'\"])" % _NAMES)

# Refusals so far in this process (conftest.py fails the test that caused one, even where it caught it).
RECORDED = []
_STATE = {"record": None}
_LOCAL = threading.local()


class NonLoopbackAnsibleRun(AssertionError):
    """An Ansible run (or a socket, an ssh) would reach a host outside 127.0.0.0/8."""


# -- addresses ------------------------------------------------------------------------------------

def is_loopback(address):
    """True for 127.0.0.0/8, ::1 and the name localhost; False for anything else, names included."""
    text = str(address or "").strip().strip("[]")
    if text.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(text.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _hosts_file(path="/etc/hosts"):
    """{name: set of addresses} of /etc/hosts (read, never looked up)."""
    names = {}
    try:
        with open(path) as fh:
            for line in fh:
                fields = line.split("#", 1)[0].split()
                for name in fields[1:]:
                    names.setdefault(name.lower(), set()).add(fields[0])
    except OSError:
        pass
    return names


def name_is_loopback(address):
    """is_loopback, or a name that /etc/hosts maps to loopback addresses only (no lookup)."""
    if is_loopback(address):
        return True
    addresses = _hosts_file().get(str(address or "").strip().lower())
    return bool(addresses) and all(is_loopback(a) for a in addresses)


def _in_hosts_file(name):
    return str(name).strip().lower() in _hosts_file()


# -- refusals -------------------------------------------------------------------------------------

def record(message):
    """Keep a refusal: in RECORDED, and in the KVSHARE_GUARD_RECORD file (a child process's refusals)."""
    RECORDED.append(message)
    path = _STATE["record"]
    if path and _STATE.get("child"):
        try:
            with open(path, "a") as fh:
                fh.write(" ".join(str(message).split()) + "\n")
        except OSError:
            pass


def take_refusals():
    """Every refusal since the last call (this process's and its children's), then forget them."""
    found = list(RECORDED)
    del RECORDED[:]
    path = _STATE["record"]
    if path and not _STATE.get("child") and os.path.exists(path):
        taking = path + ".taking"  # a child that writes from now on starts a new file
        os.replace(path, taking)
        with open(taking) as fh:
            found += [line.strip() for line in fh if line.strip()]
        os.unlink(taking)
    return found


def _refuse(message):
    record(message)
    raise NonLoopbackAnsibleRun(message)


# -- commands through their wrappers ---------------------------------------------------------------

SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox")
_RESERVED = ("if", "then", "else", "elif", "fi", "do", "done", "while", "until", "{", "}", "!", "function", "case",
             "esac", "for", "select", "in")
_SEPARATORS = (";", "&&", "||", "|", "&", "(", ")", ";;", "\n", "|&", "$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class Invocation:
    """One command as it would be executed: argv after its wrappers, its environment and directory."""

    def __init__(self, argv, env, cwd):
        self.argv, self.env, self.cwd = argv, env, cwd

    @property
    def name(self):
        return os.path.basename(self.argv[0]) if self.argv else ""


def _skip_options(args, valued=()):
    """Index of the first argument after the options (``valued``: options whose value is the next argument)."""
    pos = 0
    while pos < len(args):
        arg = args[pos]
        if arg == "--":
            return pos + 1
        if not arg.startswith("-") or arg == "-":
            return pos
        pos += 2 if arg in valued else 1
    return pos


def _unwrap(argv, env, cwd, depth=0):
    """Yield an Invocation for every command argv runs (through wrappers and shell scripts)."""
    argv = [str(a) for a in argv]
    while argv and depth < 20:
        depth += 1
        name = os.path.basename(argv[0])
        args = argv[1:]
        if name == "env":
            env = dict(env)
            pos = 0
            while pos < len(args):
                arg = args[pos]
                if arg in ("-i", "--ignore-environment", "-"):
                    env = {}
                elif arg in ("-u", "--unset") and pos + 1 < len(args):
                    env.pop(args[pos + 1], None)
                    pos += 1
                elif arg.startswith("--unset="):
                    env.pop(arg.split("=", 1)[1], None)
                elif arg in ("-C", "--chdir") and pos + 1 < len(args):
                    cwd = os.path.join(cwd or os.getcwd(), args[pos + 1])
                    pos += 1
                elif arg.startswith("--chdir="):
                    cwd = os.path.join(cwd or os.getcwd(), arg.split("=", 1)[1])
                elif arg in ("-S", "--split-string") and pos + 1 < len(args):
                    args = args[:pos] + shlex.split(args[pos + 1]) + args[pos + 2:]
                    continue
                elif arg.startswith("--split-string="):
                    args = args[:pos] + shlex.split(arg.split("=", 1)[1]) + args[pos + 1:]
                    continue
                elif arg == "--":
                    pos += 1
                    break
                elif arg.startswith("-") and not _ASSIGNMENT.match(arg):
                    pass  # -0, -v, --debug, --block-signal...
                elif _ASSIGNMENT.match(arg):
                    key, _eq, value = arg.partition("=")
                    env[key] = value
                else:
                    break
                pos += 1
            while pos < len(args) and _ASSIGNMENT.match(args[pos]):
                key, _eq, value = args[pos].partition("=")
                env[key] = value
                pos += 1
            argv = args[pos:]
        elif name == "timeout":
            pos = _skip_options(args, ("-k", "--kill-after", "-s", "--signal"))
            argv = args[pos + 1:]  # the duration, then the command
        elif name == "nice":
            pos = _skip_options(args, ("-n", "--adjustment"))
            argv = args[pos:]
        elif name == "eval":
            yield from _script(" ".join(args), env, cwd, depth)
            return
        elif name in ("nohup", "exec", "builtin", "unbuffer", "eatmydata", "fakeroot"):
            argv = args[_skip_options(args, ("-a",)):] if name == "exec" else args
        elif name == "command":
            if any(a in ("-v", "-V") for a in args[:2]):
                return
            argv = args[1:] if args[:1] == ["-p"] else args
        elif name == "time":
            argv = args[_skip_options(args, ("-f", "--format", "-o", "--output")):]
        elif name == "setsid":
            argv = args[_skip_options(args, ()):]
        elif name == "stdbuf":
            argv = args[_skip_options(args, ("-i", "-o", "-e", "--input", "--output", "--error")):]
        elif name == "ionice":
            if "-p" in args or "-P" in args or "-u" in args:
                return
            argv = args[_skip_options(args, ("-c", "--class", "-n", "--classdata")):]
        elif name == "taskset":
            if any(a in ("-p", "--pid") or (a.startswith("-") and "p" in a and not a.startswith("--")) for a in args[:3]):
                return
            pos = _skip_options(args, ())
            argv = args[pos + 1:]  # the mask or CPU list, then the command
        elif name == "chrt":
            pos = _skip_options(args, ("-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"))
            argv = args[pos + 1:]
        elif name in ("sudo", "doas"):
            keep = any(a in ("-E", "--preserve-env") or a.startswith("--preserve-env=") for a in args)
            if not keep:
                env = dict((k, v) for k, v in env.items() if k in ("PATH", "HOME", "TERM", "USER", "LOGNAME", "SHELL"))
            pos = _skip_options(args, ("-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h",
                                       "--host", "-p", "--prompt", "-r", "--role", "-t", "--type", "-U",
                                       "--other-user", "-T", "--command-timeout"))
            rest = args[pos:]
            while rest and _ASSIGNMENT.match(rest[0]):
                key, _eq, value = rest[0].partition("=")
                env = dict(env, **{key: value})
                rest = rest[1:]
            argv = rest
        elif name == "xargs":
            pos = _skip_options(args, ("-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n", "--max-args",
                                       "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"))
            argv = args[pos:]
        elif name == "unshare":
            argv = args[_skip_options(args, ("-S", "--setuid", "-G", "--setgid", "-R", "--root", "-w", "--wd",
                                             "--map-user", "--map-group", "--propagation")):]
        elif name == "nsenter":
            argv = args[_skip_options(args, ("-t", "--target", "-S", "--setuid", "-G", "--setgid")):]
        elif name == "ip" and args[:2] == ["netns", "exec"] and len(args) > 3:
            argv = args[3:]
        elif name == "sshpass":
            argv = args[_skip_options(args, ("-p", "-f", "-d", "-P")):]
        elif name in SHELLS:
            if name == "busybox":
                if not args or args[0] not in SHELLS:
                    yield Invocation(argv, env, cwd)
                    return
                args = args[1:]
            yield from _shell(args, env, cwd, depth)
            return
        elif re.match(r"^python[0-9.]*$", name):
            pos = _skip_options(args, ("-W", "-X", "-Q"))
            rest = args[pos:]
            module = None
            for i, arg in enumerate(args[:pos]):
                if arg == "-m" and i + 1 < len(args):
                    module, rest = args[i + 1], args[i + 2:]
                elif arg.startswith("-m") and len(arg) > 2:
                    module, rest = arg[2:], args[i + 1:]
                elif arg == "-c" or (arg.startswith("-c") and len(arg) > 2):
                    return  # inline code: the run-time guard covers what it starts (see runtime_env)
            if module is None and pos > 0 and args[pos - 1] == "-m" and rest:
                module, rest = rest[0], rest[1:]
            bindir = os.path.dirname(argv[0])
            if module == "ansible" and rest:
                tool = {"adhoc": "ansible"}.get(rest[0], "ansible-" + rest[0])
                argv = [os.path.join(bindir, tool)] + rest[1:]
            elif module and module.startswith("ansible.cli."):
                tool = {"adhoc": "ansible"}.get(module.rsplit(".", 1)[1], "ansible-" + module.rsplit(".", 1)[1])
                argv = [os.path.join(bindir, tool)] + rest
            elif module == "molecule":
                argv = [os.path.join(bindir, "molecule")] + rest
            elif module is None and rest and os.path.basename(rest[0]) in GUARDED + RUNTIME_ONLY:
                argv = rest
            else:
                yield Invocation(argv, env, cwd)
                return
        else:
            yield Invocation(argv, env, cwd)
            return


def _shell(args, env, cwd, depth):
    """A shell's own arguments: the script of -c, or a script file."""
    pos, command = 0, False
    while pos < len(args):
        arg = args[pos]
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            pos += 2
            continue
        if arg == "--":
            pos += 1
            break
        if arg.startswith("--"):
            pos += 1
            continue
        if arg[:1] in ("-", "+") and len(arg) > 1:
            command = command or "c" in arg[1:]
            pos += 1 + arg[1:].count("o") + arg[1:].count("O")  # -euo pipefail: o and O take a value
            continue
        break
    if pos >= len(args):
        return
    if command:
        yield from _script(args[pos], env, cwd, depth)
        return
    path = os.path.join(cwd or os.getcwd(), args[pos])
    try:
        if os.path.getsize(path) < 1 << 20:
            with open(path, errors="replace") as fh:
                text = fh.read()
            yield from _script(text, env, cwd, depth)
    except OSError:
        pass


def _expand(word, env):
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word)


def _script(text, env, cwd, depth):
    """Every simple command of a shell script (split at ; && || | & ( ) and newlines)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:
        if _MENTION.search(text):
            yield Invocation(["sh", "-c", text], None, cwd)  # refused as unreadable (see violations)
        return
    env = dict(env)
    command = []
    tokens.append(";")
    skip_redirect = False
    for token in tokens:
        if skip_redirect:
            skip_redirect = False
            continue
        if token in _SEPARATORS:
            if command:
                current = [_expand(word, env) for word in command]
                while current and current[0] in _RESERVED:
                    current = current[1:]
                assignments = {}
                while current and _ASSIGNMENT.match(current[0]):
                    key, _eq, value = current[0].partition("=")
                    assignments[key] = value
                    current = current[1:]
                if not current:
                    env.update(assignments)
                elif current[0] == "cd":
                    cwd = os.path.join(cwd or os.getcwd(), current[1]) if len(current) > 1 else env.get("HOME", cwd)
                elif current[0] == "export":
                    for item in current[1:]:
                        key, eq, value = item.partition("=")
                        if eq:
                            env[key] = value
                elif current[0] == "unset":
                    for item in current[1:]:
                        env.pop(item, None)
                elif command[0] not in ("for", "case", "select"):
                    yield from _unwrap(current, dict(env, **assignments), cwd, depth + 1)
            command = []
            continue
        if set(token) <= set("<>&") and token not in ("&", "&&"):
            skip_redirect = True  # a redirection: its target is no argument
            if command and command[-1].isdigit():
                command.pop()
            continue
        command.append(token)


def invocations(argv, cwd=None, env=None):
    """Every command that running argv starts, as Invocations."""
    return list(_unwrap(argv, dict(os.environ if env is None else env), cwd))


# -- Ansible runs ------------------------------------------------------------------------------------

def _options(argv):
    """(inventories, limits, extra-var arguments, other flags, positional arguments) of an ansible argv."""
    inventories, limits, extras, flags, positional = [], [], [], [], []
    takes = {"-i": inventories, "--inventory": inventories, "--inventory-file": inventories,
             "-l": limits, "--limit": limits, "-e": extras, "--extra-vars": extras}
    valued = {"-u", "--user", "-c", "--connection", "-T", "--timeout", "-f", "--forks", "-t", "--tags",
              "--skip-tags", "-M", "--module-path", "--private-key", "--key-file", "--vault-id",
              "--vault-password-file", "--start-at-task", "-m", "--module-name", "-a", "--args",
              "--become-user", "--become-method", "--ssh-common-args", "--ssh-extra-args",
              "--scp-extra-args", "--sftp-extra-args", "-P", "--poll", "-B", "--background",
              "--playbook-dir", "--become-password-file", "--connection-password-file", "--tree"}
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


def _flag_values(argv, names):
    """The values of options ``names`` in argv (``--x v``, ``--x=v``)."""
    found = []
    args = [str(a) for a in argv]
    for pos, arg in enumerate(args):
        if arg in names and pos + 1 < len(args):
            found.append(args[pos + 1])
        elif "=" in arg and arg.split("=", 1)[0] in names:
            found.append(arg.split("=", 1)[1])
    return found


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


def inventory_hostvars(argv, cwd=None, env=None):
    """{host: variables} of every host the run targets, per ``ansible-inventory --list``, extra vars on top."""
    inventories, limits, extras, _flags, positional = _options(argv)
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
    for option in ("--vault-id", "--vault-password-file"):
        for value in _flag_values(argv, (option,)):
            cmd += [option, value]
    playbooks = [p for p in positional if p.endswith((".yml", ".yaml"))]
    playbook_dir = _flag_values(argv, ("--playbook-dir",))
    if playbook_dir or (os.path.basename(str(argv[0])) == "ansible-playbook" and playbooks):
        # group_vars/ and host_vars/ beside the playbook count (ansible-playbook reads them too)
        cmd += ["--playbook-dir", (playbook_dir or [os.path.dirname(os.path.join(cwd or os.getcwd(), playbooks[0]))])[-1]]
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
        out[host] = dict(hostvars.get(host) or {})
        out[host].update(extra)
    return out


def host_addresses(host, host_vars):
    """[(variable, address)]: every address a connection to the host may use (``{{ name }}`` followed)."""
    found = [(name, resolve_reference(str(host_vars[name]), host_vars)) for name in ADDRESS_VARS
             if host_vars.get(name) not in (None, "")]
    return found or [("ansible_host", host)]


def resolved_hosts(argv, cwd=None, env=None):
    """{host: (connection, address)} of every host the run targets (the address the ssh plugin uses)."""
    out = {}
    for host, host_vars in inventory_hostvars(argv, cwd, env).items():
        addresses = dict(host_addresses(host, host_vars))
        out[host] = (_connection(host_vars), addresses.get("ansible_ssh_host", addresses.get("ansible_host")))
    return out


def _connection(host_vars):
    return resolve_reference(str(host_vars.get("ansible_connection") or "ssh"), host_vars)


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


_REMOTE_DAEMON = re.compile(r"(tcp|ssh|https?)://|--url\b|--remote\b|(^|\s)-r(\s|$)|--connection\b|(^|\s)-H(\s|$)|--host\b")


def _container_violations(host, connection, host_vars, env):
    """A container connection stays here unless its runtime is told to use a remote daemon."""
    found = []
    for name, value in sorted(host_vars.items()):
        if re.match(r"^ansible_(docker|podman)_", name) and _REMOTE_DAEMON.search(str(value)):
            found.append("%s: %s %s points %s at a remote daemon" % (host, name, value, connection))
    for name in ("DOCKER_HOST", "CONTAINER_HOST"):
        value = (env or {}).get(name, "")
        if value and not value.startswith("unix://") and not value.startswith("/"):
            found.append("%s: %s=%s points %s at a remote daemon" % (host, name, value, connection))
    return found


def _ansible_violations(argv, cwd, env):
    _inventories, _limits, extras, flags, positional = _options(argv)
    if any(flag in NO_CONNECTION_FLAGS for flag in flags):
        return []
    extra = _extra_vars(extras, cwd)
    if os.path.basename(str(argv[0])) == "ansible-playbook" and _offline_validation(positional, extra):
        return []
    connection_flag = (_flag_values(argv, ("-c", "--connection")) or [None])[-1]
    found = []
    for host, host_vars in inventory_hostvars(argv, cwd, env).items():
        connection = _connection(host_vars)
        if "ansible_connection" not in host_vars and connection_flag:
            connection = connection_flag
        if connection in LOCAL_CONNECTIONS:
            if connection not in ("local", "ansible.builtin.local", "ansible.legacy.local"):
                found += _container_violations(host, connection, host_vars, env)
            continue
        if connection not in NETWORK_CONNECTIONS:
            found.append("%s: connection %s is not known to stay on loopback (known: %s)"
                         % (host, connection, ", ".join(LOCAL_CONNECTIONS + NETWORK_CONNECTIONS)))
            continue
        for name, address in host_addresses(host, host_vars):
            if not name_is_loopback(address):
                found.append("%s: %s %s over %s is not loopback" % (host, name, address, connection))
    return found


def _runtime_kept(invocation):
    """Why an invocation's environment lost the run-time guard ([] when it kept it)."""
    env = invocation.env or {}
    lost = ["%s=%s" % (var, env.get(var, "")) for var in TOOL_ENV.values() if not _is_guard_program(env.get(var))]
    if GUARD_DIR not in (env.get("PYTHONPATH") or "").split(os.pathsep):
        lost.append("PYTHONPATH=%s" % env.get("PYTHONPATH", ""))
    if lost:
        return ["%s: its environment drops the run-time loopback guard (%s)" % (invocation.name, ", ".join(lost))]
    return []


def violations(argv, cwd=None, env=None, runtime=False):
    """Why this command could reach a non-loopback host: a list of lines ([] when it cannot).

    ``runtime``: the command's environment carries ``runtime_env()``; refuse a wrapper that drops it."""
    if not argv:
        return []
    found = []
    _LOCAL.busy = getattr(_LOCAL, "busy", 0) + 1
    try:
        for invocation in invocations(argv, cwd, env):
            name = invocation.name
            if invocation.env is None:
                found.append("cannot parse the shell script %r, which names Ansible" % invocation.argv[-1][:200])
            elif name in GUARDED:
                found += _ansible_violations(invocation.argv, invocation.cwd, invocation.env)
            elif name in SSH_TOOLS and not _is_guard_program(invocation.argv[0]):
                found += ssh_violations(name, invocation.argv[1:])
            if runtime and invocation.env is not None and name in GUARDED + RUNTIME_ONLY:
                found += _runtime_kept(invocation)
    finally:
        _LOCAL.busy -= 1
    return found


def check_run(argv, cwd=None, env=None, runtime=False):
    """Raise NonLoopbackAnsibleRun when the command could reach a host outside 127.0.0.0/8."""
    found = violations(argv, cwd, env, runtime)
    if found:
        raise NonLoopbackAnsibleRun(
            "tests may contact loopback hosts only (127.0.0.0/8), or validate offline "
            "(playbooks/validate.yml -e kvshare_validate_offline=true); refused %s: %s"
            % (" ".join(map(str, argv)), "; ".join(found)))


def check_connect(address):
    """Raise NonLoopbackAnsibleRun for an AF_INET/AF_INET6 socket address outside loopback."""
    if isinstance(address, tuple) and address and isinstance(address[0], str) and not is_loopback(address[0]):
        raise NonLoopbackAnsibleRun("tests may connect to loopback only (127.0.0.0/8, ::1); refused %s" % (address,))


def check_lookup(host):
    """Raise NonLoopbackAnsibleRun for a name lookup that would leave this machine (not numeric,
    not localhost, not in /etc/hosts)."""
    if host is None:
        return
    text = host.decode() if isinstance(host, bytes) else str(host)
    text = text.strip().strip("[]")
    if not text or is_loopback(text) or _in_hosts_file(text):
        return
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
        return
    except ValueError:
        pass
    raise NonLoopbackAnsibleRun("tests may look up loopback names only (localhost, /etc/hosts); refused %r" % text)


# -- ssh, scp, sftp --------------------------------------------------------------------------------

# Options that take a value, per tool (OpenSSH 9).
_SSH_VALUED = "BbcDEeFIiJLlmOoPpQRSWw"
_SFTP_VALUED = "BbcDFiJloPRSsX"
_SCP_VALUED = "cDFiJloPSX"


def _parse_tool(tool, args):
    """([(option, value)], positional arguments) of an ssh/scp/sftp argv (without the program).

    ssh reads options after the destination too (``ssh HOST -p 22 CMD``), up to the command."""
    valued = {"ssh": _SSH_VALUED, "sftp": _SFTP_VALUED, "scp": _SCP_VALUED}[tool]
    options, positional, pos = [], [], 0
    while pos < len(args):
        arg = args[pos]
        if arg == "--":
            positional += args[pos + 1:]
            break
        if not arg.startswith("-") or arg == "-":
            if tool != "ssh" or positional:
                positional += args[pos:]
                break
            positional.append(arg)
            pos += 1
            continue
        index = 1
        while index < len(arg):
            char = arg[index]
            if char in valued:
                value = arg[index + 1:]
                if not value and pos + 1 < len(args):
                    pos += 1
                    value = args[pos]
                options.append(("-" + char, value))
                break
            options.append(("-" + char, None))
            index += 1
        pos += 1
    return options, positional


def _host_port(text):
    """(user, host, port) of ``[user@]host[:port]``, ``[user@][v6]:port`` or a ``scheme://`` URI."""
    if "://" in text:
        text = text.split("://", 1)[1].split("/", 1)[0]
    user, _at, rest = text.rpartition("@")
    if rest.startswith("["):
        host, _close, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:
        host, _colon, port = rest.partition(":")
    else:
        host, port = rest, ""
    return user, host, port


def _remote_spec(tool, spec):
    """(user, host, port) of a remote scp/sftp argument, None for a local path."""
    if re.match(r"^(scp|sftp)://", spec):
        return _host_port(spec)
    if tool == "sftp":
        user, _at, rest = spec.rpartition("@")
        if rest.startswith("["):
            return user, rest[1:].partition("]")[0], ""
        return user, rest.split(":", 1)[0], ""
    user, _at, rest = spec.rpartition("@") if "@" in spec.split(":", 1)[0] else ("", "", spec)
    if rest.startswith("["):
        host, _close, tail = rest[1:].partition("]")
        return (user, host, "") if tail.startswith(":") else None
    colon = rest.find(":")
    if colon <= 0 or "/" in rest[:colon]:
        return None
    return user, rest[:colon], ""


def _is_guard_program(path):
    if not path:
        return False
    try:
        return os.path.samefile(os.path.dirname(os.path.abspath(str(path))), GUARD_DIR)
    except OSError:
        return False


def real_program(tool):
    """The real ssh/scp/sftp on PATH (never this guard)."""
    for directory in (os.environ.get("PATH") or "/usr/bin:/bin").split(os.pathsep) + ["/usr/bin"]:
        candidate = os.path.join(directory or ".", tool)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and not _is_guard_program(candidate):
            return candidate
    return None


def _ssh_config(ssh_args):
    """ssh's own evaluation of its arguments and ssh_config (``ssh -G``: prints, connects nowhere)."""
    ssh = real_program("ssh")
    if not ssh:
        return None, "no ssh binary to evaluate its configuration"
    cmd = [ssh, "-G", "-o", "CanonicalizeHostname=no"] + ssh_args
    _LOCAL.busy = getattr(_LOCAL, "busy", 0) + 1
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    finally:
        _LOCAL.busy -= 1
    if proc.returncode != 0:
        return None, "ssh -G failed: %s" % proc.stderr.strip()[-300:]
    config = {}
    for line in proc.stdout.splitlines():
        key, _sp, value = line.partition(" ")
        config.setdefault(key.lower(), []).append(value.strip())
    return config, None


def _forward_target(value):
    """The host a LocalForward/RemoteForward line of ssh -G connects to, '' for a socket path, None for none."""
    fields = value.split()
    if len(fields) < 2:
        return None
    target = fields[1]
    if target.startswith("/"):
        return ""
    return _host_port(target)[1]


def _evaluate(ssh_args, what, config_file=None, depth=0):
    """Why ssh with these arguments could leave loopback: its HostName, proxies, forwards, tunnel."""
    config, error = _ssh_config(ssh_args)
    if error:
        return ["%s: %s" % (what, error)]
    found = []
    hostname = (config.get("hostname") or [""])[0]
    if not name_is_loopback(hostname):
        found.append("%s: HostName %s is not loopback" % (what, hostname))
    for command in config.get("proxycommand", []):
        if command.lower() != "none":
            found.append("%s: ProxyCommand %r runs any program (use ProxyJump to a loopback host)" % (what, command))
    for jumps in config.get("proxyjump", []):
        if jumps.lower() == "none":
            continue
        for jump in jumps.split(","):
            _user, host, port = _host_port(jump)
            if depth >= 4:
                found.append("%s: ProxyJump chain too long" % what)
            elif not name_is_loopback(host):
                found.append("%s: ProxyJump %s is not loopback" % (what, jump))
            else:  # the jump host's own ssh_config entry may send it elsewhere
                jump_args = (["-F", config_file] if config_file else []) + (["-p", port] if port else []) + ["--", host]
                found += _evaluate(jump_args, "%s via %s" % (what, jump), config_file, depth + 1)
    for kind in ("localforward", "remoteforward"):
        for value in config.get(kind, []):
            target = _forward_target(value)
            if target is None:
                found.append("%s: %s %s forwards to any host" % (what, kind, value))
            elif target and not name_is_loopback(target):
                found.append("%s: %s %s forwards to %s, not loopback" % (what, kind, value, target))
    for value in config.get("dynamicforward", []):
        found.append("%s: DynamicForward %s forwards to any host" % (what, value))
    if (config.get("tunnel") or ["false"])[0] != "false":
        found.append("%s: Tunnel %s" % (what, config["tunnel"][0]))
    return found


def ssh_violations(tool, args):
    """Why ``tool args`` (ssh, scp or sftp) could reach a host outside loopback: [] when it cannot.

    ssh's arguments go to ``ssh -G`` as they are, so that ssh itself says where they lead (HostName,
    ProxyJump, ProxyCommand, forwards from argv and ssh_config); scp's and sftp's remote arguments
    are handed to it as destinations with the options ssh shares."""
    args = [a.decode() if isinstance(a, bytes) else str(a) for a in args]
    options, positional = _parse_tool(tool, args)
    names = [opt for opt, _value in options]
    config_file = ([value for opt, value in options if opt == "-F"] or [None])[-1]
    found = []
    if tool == "ssh":
        if any(n in ("-G", "-V", "-Q") for n in names):
            return []
        if not positional:
            return ["ssh %s: no destination" % " ".join(args)]
        for opt, value in options:
            if opt == "-W" and not name_is_loopback(_host_port(value)[1]):
                found.append("ssh -W %s: %s is not loopback" % (value, _host_port(value)[1]))
        return found + _evaluate(args, "ssh to %s" % positional[0], config_file)
    if tool == "sftp" and "-D" in names:
        return []  # a local sftp-server, no connection
    opts = []
    for opt, value in options:
        if opt in ("-o", "-F", "-i", "-J", "-c"):
            opts += [opt, value]
        elif opt in ("-4", "-6", "-A", "-C"):
            opts.append(opt)
        elif opt == "-P":
            opts += ["-p", value]
        elif opt == "-S" and not _is_guard_program(value):
            found.append("%s -S %s: another ssh program than the guard's" % (tool, value))
    remotes = [_remote_spec(tool, spec) for spec in (positional[:1] if tool == "sftp" else positional)]
    for user, host, port in [r for r in remotes if r]:
        found += _evaluate(opts + (["-p", port] if port else []) + (["-l", user] if user else []) + ["--", host],
                           "%s to %s" % (tool, host), config_file)
    return found


def main(argv=None):
    """``python3 ansible_guard.py ssh|scp|sftp ARGS``: refuse (exit 255) or run the real tool."""
    argv = list(sys.argv if argv is None else argv)
    if len(argv) < 2 or argv[1] not in SSH_TOOLS:
        sys.stderr.write("usage: ansible_guard.py ssh|scp|sftp ARGS\n")
        return 2
    tool, args = argv[1], argv[2:]
    _STATE["record"], _STATE["child"] = os.environ.get(RECORD_ENV), True
    found = ssh_violations(tool, args)
    if found:
        message = "loopback guard: refused %s %s: %s" % (tool, " ".join(args), "; ".join(found))
        record(message)
        sys.stderr.write(message + "\n")
        return 255
    program = os.environ.get(EXEC_ENV[tool]) or real_program(tool)
    if not program:
        sys.stderr.write("loopback guard: no %s on PATH\n" % tool)
        return 255
    if tool == "ssh":
        args = ["-o", "CanonicalizeHostname=no"] + args
    else:  # the connection scp/sftp open goes through the guard's ssh too
        args = ["-S", os.path.join(GUARD_DIR, "ssh")] + args
    os.execv(program, [program] + args)
    return 255  # not reached


# -- the run-time guard ----------------------------------------------------------------------------

def runtime_env(env=None):
    """env (default os.environ) with the run-time guard: ssh/scp/sftp through tests/loopback_guard
    (an ssh program already named there runs once the guard passed), its sitecustomize on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    for tool, var in TOOL_ENV.items():
        current = env.get(var)
        if current and not _is_guard_program(current):
            env[EXEC_ENV[tool]] = current
        env[var] = os.path.join(GUARD_DIR, tool)
    paths = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p and p != GUARD_DIR]
    env["PYTHONPATH"] = os.pathsep.join([GUARD_DIR] + paths)
    env.setdefault("KVSHARE_GUARD_PYTHON", sys.executable)
    if _STATE["record"]:
        env[RECORD_ENV] = _STATE["record"]
    return env


def _command_argv(args, shell, executable):
    if isinstance(args, (str, bytes, os.PathLike)) and shell:
        script = os.fsdecode(args) if not isinstance(args, str) else args
        return ["sh", "-c", script]
    if isinstance(args, (str, bytes, os.PathLike)):
        argv = [os.fsdecode(args) if not isinstance(args, str) else args]
    else:
        argv = [a if isinstance(a, str) else os.fsdecode(a) for a in args]
    if executable and not shell and argv:
        argv[0] = os.fsdecode(executable)
    return argv


def _ssh_plugin_tool(frame, argv):
    """(tool, index of its program) when ansible's ssh connection plugin starts argv, else None."""
    if frame is None or frame.f_code.co_name != "_bare_run" or not frame.f_code.co_filename.endswith(
            os.path.join("connection", "ssh.py")):
        return None
    connection = frame.f_locals.get("self")
    index = 0
    if argv and os.path.basename(argv[0]) == "sshpass":
        index = len(argv) - len(list(_skip_sshpass(argv[1:])))
    program = argv[index] if index < len(argv) else ""
    for tool in SSH_TOOLS:
        try:
            if connection.get_option("%s_executable" % tool) == program:
                return tool, index
        except Exception:  # pylint: disable=broad-exception-caught  # any plugin, any version: fall back on the name
            break
    name = os.path.basename(program)
    return (name if name in SSH_TOOLS else "ssh"), index


def _skip_sshpass(args):
    return args[_skip_options(args, ("-p", "-f", "-d", "-P")):]


def _guard_popen(args, kwargs, frame):
    """Check (and give the run-time guard to) the command a Popen is about to start."""
    argv = _command_argv(args, kwargs.get("shell"), kwargs.get("executable"))
    if getattr(_LOCAL, "busy", 0):
        # the guard's own ansible-inventory / ssh -G: no checks, the run-time guard all the same
        if argv and os.path.basename(argv[0]) in GUARDED + RUNTIME_ONLY:
            kwargs["env"] = runtime_env(kwargs.get("env"))
        return
    plugin = _ssh_plugin_tool(frame, argv)
    if plugin:
        tool, index = plugin
        if not _is_guard_program(argv[index]):
            found = ssh_violations(tool, argv[index + 1:])
            if found:
                _refuse("loopback guard: refused %s: %s" % (" ".join(argv), "; ".join(found)))
        return
    text = " ".join(argv)
    runtime = bool(_MENTION.search(text)) or any(
        i.name in GUARDED + RUNTIME_ONLY for i in invocations(argv, kwargs.get("cwd"), kwargs.get("env")))
    if runtime:
        kwargs["env"] = runtime_env(kwargs.get("env"))
    try:
        check_run(argv, kwargs.get("cwd"), kwargs.get("env"), runtime)
    except NonLoopbackAnsibleRun as exc:
        _refuse(str(exc))


def install(child=False):
    """Patch subprocess.Popen and socket connects (and, in a guarded run's processes, name lookups) of
    this process. ``child``: a process of a guarded run (refusals go to the parent's record file);
    else this process keeps its own record file for its children's refusals. Idempotent."""
    import socket

    if getattr(subprocess.Popen.__init__, "_kvshare_guard", False):
        return
    if child:
        _STATE["record"], _STATE["child"] = os.environ.get(RECORD_ENV), True
    else:  # made by the first child that records a refusal, removed by take_refusals()
        import tempfile

        path = os.path.join(tempfile.gettempdir(), "kvshare-loopback-guard-%d.log" % os.getpid())
        if os.path.exists(path):
            os.unlink(path)  # an earlier process's with this pid
        _STATE["record"], _STATE["child"] = path, False
    popen_init = subprocess.Popen.__init__

    def guarded_popen_init(self, args, *rest, **kwargs):
        _guard_popen(args, kwargs, sys._getframe(1))  # pylint: disable=protected-access
        popen_init(self, args, *rest, **kwargs)
    guarded_popen_init._kvshare_guard = True
    subprocess.Popen.__init__ = guarded_popen_init

    def guarded(method):
        def connect(self, address):
            if self.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    check_connect(address)
                except NonLoopbackAnsibleRun as exc:
                    record(str(exc))
                    raise
            return method(self, address)
        connect.__name__ = method.__name__
        return connect
    socket.socket.connect = guarded(socket.socket.connect)
    socket.socket.connect_ex = guarded(socket.socket.connect_ex)
    if child:
        def looked_up(function):
            def lookup(host, *args, **kwargs):
                try:
                    check_lookup(host)
                except NonLoopbackAnsibleRun as exc:
                    record(str(exc))
                    raise
                return function(host, *args, **kwargs)
            lookup.__name__ = function.__name__
            return lookup
        for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex"):
            setattr(socket, name, looked_up(getattr(socket, name)))


if __name__ == "__main__":
    sys.exit(main())
