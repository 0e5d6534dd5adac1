# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Port values and listening-port clash detection shared by every role's preflight (stdlib only;
imports nothing from the collection: the firewall plan and the worker checks build on it).

``parse_port`` and ``parse_port_range`` read a port or a "lo-hi" range as the roles' variables
write them.

A service about to bind ``address:port`` clashes with any other process already listening on the
same port on that address or on a wildcard (0.0.0.0 / ::). The process that owns the listener is
ours (no clash; a re-run must pass) when its PID is one of the service's PIDs or when it runs in
the cgroup of one of the service's systemd units.

Listeners come from ``/proc/net/tcp{,6}`` (socket inodes) mapped to processes through
``/proc/<pid>/fd`` (so no ``ss``/iproute2 is needed), or from ``ss -H -ltnp`` output (kept for
callers that already have it).

Before any process runs, the same question is asked of the inventory: which ports will this
collection's services listen on on a host (``host_service_ports``: the host's own variable, else
the service role's default, passed in by the caller), and does a worker ask for one of them
(``worker_port_errors``); and does a host share its address with another (``bind_address_errors``).
"""

from __future__ import annotations

import fnmatch
import os
import re
import socket
import struct

from ansible.module_utils.parsing.convert_bool import boolean

__all__ = [
    "parse_port",
    "parse_port_range",
    "WILDCARDS",
    "parse_proc_net_tcp",
    "socket_inode_pids",
    "proc_listeners",
    "port_listeners",
    "pid_units",
    "clashes",
    "clash_text",
    "SERVICE_PORTS",
    "SERVICE_ROLES",
    "host_service_ports",
    "worker_port_errors",
    "bind_address_errors",
]

WILDCARDS = ("*", "0.0.0.0", "::", "")
_LISTEN = "0A"
_RANGE_RE = re.compile(r"^\s*([0-9]+)\s*-\s*([0-9]+)\s*$")


def parse_port(value):
    """An int in 1-65535 (ints or digit strings; bools refused), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        port = value
    elif isinstance(value, str) and value.strip().isdigit():
        port = int(value.strip())
    else:
        return None
    return port if 1 <= port <= 65535 else None


def parse_port_range(value):
    """A port or "lo-hi" -> (lo, hi) with 1 <= lo <= hi <= 65535, else None."""
    port = parse_port(value)
    if port is not None:
        return (port, port)
    if not isinstance(value, str):
        return None
    match = _RANGE_RE.match(value)
    if not match:
        return None
    lo, hi = parse_port(match.group(1)), parse_port(match.group(2))
    if lo is None or hi is None or lo > hi:
        return None
    return (lo, hi)


def _hex_ipv4(text):
    return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(text, 16)))


def _hex_ipv6(text):
    words = [struct.pack("<I", int(text[i:i + 8], 16)) for i in range(0, 32, 8)]
    addr = socket.inet_ntop(socket.AF_INET6, b"".join(words))
    if addr.startswith("::ffff:") and "." in addr:
        return addr[len("::ffff:"):]
    return addr


def parse_proc_net_tcp(text, ipv6=False):
    """Listening sockets of a ``/proc/net/tcp`` (or tcp6) table: [{address, port, inode}]."""
    out = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        addr_hex, dummy, port_hex = fields[1].partition(":")
        try:
            address = _hex_ipv6(addr_hex) if ipv6 else _hex_ipv4(addr_hex)
            port = int(port_hex, 16)
            inode = int(fields[9])
        except (ValueError, struct.error, OSError):
            continue
        out.append({"address": address, "port": port, "inode": inode})
    return out


def _read(path, default=""):
    try:
        with open(path) as fh:
            return fh.read()
    except (IOError, OSError):
        return default


def socket_inode_pids(proc_root="/proc"):
    """{socket inode: [pid, ...]} from the fd links of every process this user may read."""
    owners = {}
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return owners
    for pid in pids:
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                owners.setdefault(int(target[8:-1]), []).append(int(pid))
    return owners


def _comm(proc_root, pid):
    return _read(os.path.join(proc_root, str(pid), "comm")).strip() or "unknown"


def pid_units(proc_root, pid):
    """systemd units (last path element ending in .service/.scope) of a process's cgroups."""
    units = []
    for line in _read(os.path.join(proc_root, str(pid), "cgroup")).splitlines():
        path = line.split(":", 2)[-1]
        for part in path.split("/"):
            if part.endswith((".service", ".scope")) and part not in units:
                units.append(part)
    return units


def proc_listeners(proc_root="/proc"):
    """Every listening TCP socket with its processes: [{address, port, pid, process, units}].

    ``pid`` is 0 and ``process`` 'unknown' when no readable process holds the socket (another
    user's process, read without root).
    """
    sockets = parse_proc_net_tcp(_read(os.path.join(proc_root, "net", "tcp")))
    sockets += parse_proc_net_tcp(_read(os.path.join(proc_root, "net", "tcp6")), ipv6=True)
    owners = socket_inode_pids(proc_root) if sockets else {}
    out = []
    for sock in sockets:
        pids = sorted(set(owners.get(sock["inode"], []))) or [0]
        for pid in pids:
            out.append({
                "address": sock["address"], "port": sock["port"], "pid": pid,
                "process": _comm(proc_root, pid) if pid else "unknown",
                "units": pid_units(proc_root, pid) if pid else [],
            })
    return out


_SS_USERS_RE = re.compile(r'\("([^"]*)",pid=(\d+)')


def _split_addr(local):
    host, dummy, port = local.rpartition(":")
    host = host.strip("[]")
    if "%" in host:
        host = host.split("%", 1)[0]
    return host, port


def port_listeners(ss_output, port):
    """Parse ``ss -H -ltnp`` lines; return listeners on ``port`` as dicts (address, port, process, pid)."""
    found = []
    for line in (ss_output or "").splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[0] != "LISTEN":
            continue
        host, lport = _split_addr(fields[3])
        if lport != str(port):
            continue
        procs = _SS_USERS_RE.findall(line)
        if procs:
            for name, pid in procs:
                found.append({"address": host, "port": int(port), "process": name, "pid": int(pid)})
        else:
            found.append({"address": host, "port": int(port), "process": "unknown", "pid": 0})
    return found


def _own_unit(listener, units):
    return any(fnmatch.fnmatchcase(have, want) for have in listener.get("units") or [] for want in units or [])


def clashes(listeners, address, port, own_pids=None, own_units=None):
    """Listeners that would stop a service binding ``address:port`` and are not the service.

    A listener is the service's own when its pid is in ``own_pids`` or it runs in one of
    ``own_units`` (fnmatch patterns). A listener whose process cannot be seen (pid 0) is taken to
    be the service's own when the service is running (``own_pids`` non-empty): nothing else can
    hold the same address and port while it does.
    """
    own = set(int(p) for p in (own_pids or []) if str(p).isdigit() and int(p) > 0)
    found = []
    for item in listeners:
        if int(item["port"]) != int(port):
            continue
        if item["pid"] in own or _own_unit(item, own_units) or (item["pid"] == 0 and own):
            continue
        if item["address"] in WILDCARDS or address in WILDCARDS or item["address"] == address:
            found.append(item)
    return found


def clash_text(clash, variable, host=None):
    """One line naming the variable, port, process and pid (and the host when given)."""
    where = " (host %s)" % host if host else ""
    units = clash.get("units") or []
    return "%s %s is held by %s (pid %s%s) listening on %s%s" % (
        variable, clash["port"], clash["process"], clash["pid"] or "unknown",
        ", unit %s" % units[-1] if units else "", clash["address"] or "*", where)


# ---------------------------------------------------------------------------------------------
# inventory level: the ports a host's services will listen on
# ---------------------------------------------------------------------------------------------

# Every port a service of this collection listens on, and on which hosts: the role whose
# defaults/main.yml holds the default, the variable, the group whose hosts run the service (a
# group name, or the variable that names it) and the variable that switches it on (None: always).
# The values themselves are never written here: the caller passes the stack contract's defaults
# (kvshare_service_defaults, roles/kvshare).
SERVICE_PORTS = (
    {"role": "dynamo_frontend", "variable": "dynamo_frontend_http_port", "service": "the frontend's HTTP API",
     "group": "dynamo_frontend"},
    {"role": "etcd", "variable": "etcd_client_port", "service": "etcd (client URL)", "group_variable": "etcd_group_name"},
    {"role": "etcd", "variable": "etcd_peer_port", "service": "etcd (peer URL)", "group_variable": "etcd_group_name"},
    {"role": "etcd_client", "variable": "etcd_client_proxy_port", "service": "the local etcd client proxy",
     "group": "dynamo", "enabled": "etcd_client_proxy_enabled"},
    {"role": "maru_pool", "variable": "maru_pool_rm_port", "service": "the Maru resource manager", "group": "maru_pool"},
    {"role": "maru_pool", "variable": "maru_pool_server_port", "service": "the Maru metadata server",
     "group": "maru_pool"},
    {"role": "kvcr", "variable": "kvcr_control_port", "service": "the KVCR control channel", "group_variable": "kvcr_group_name"},
    {"role": "kvcr", "variable": "kvcr_kv_events_port", "service": "the KVCR KV events publisher",
     "group_variable": "kvcr_group_name"},
    {"role": "kvcr", "variable": "kvcr_state_agent_system_port", "service": "the KV state agent",
     "group_variable": "kvcr_group_name", "enabled": "kvcr_state_agent_enabled"},
)
# The roles whose defaults host_service_ports needs.
SERVICE_ROLES = tuple(sorted(set(item["role"] for item in SERVICE_PORTS)))

_MISSING = object()


def runs_state_agent(host_vars, service_defaults):
    """Whether a KVCR host runs the KV state agent, as the kvcr role's default decides it: the
    host's kvcr_state_agent_enabled where it sets one, else whether its kvcr_cache_slot is the
    contract's kvcr_state_agent_slot (``service_defaults``: kvshare_service_defaults).
    ``host_vars``: the host's own variables (a mapping, or a callable key -> value raising
    KeyError when unset)."""
    lookup = host_vars if callable(host_vars) else host_vars.__getitem__

    def own(key, default):
        try:
            return lookup(key)
        except KeyError:
            return default
    enabled = own("kvcr_state_agent_enabled", _MISSING)
    if enabled is not _MISSING:
        return boolean(enabled, strict=False)
    return str(own("kvcr_cache_slot", None)) == str(service_defaults["kvcr_state_agent_slot"])


def host_service_ports(host, groups, host_vars, role_defaults):
    """The ports this collection's services will listen on on ``host``.

    ``groups``: group -> hosts. ``host_vars``: the host's own variables (inventory, extra vars,
    facts; a mapping, or a callable key -> value raising KeyError when unset).
    ``role_defaults``: role -> {variable: default} for SERVICE_ROLES.

    Returns ([{"port", "variable", "service", "origin"}], [errors]); origin says whether the host
    sets the variable or the role's default applies. A value that is not a port is left to the
    role's own argument spec; one that cannot be read is an error naming variable and host.
    """
    lookup = host_vars if callable(host_vars) else host_vars.__getitem__
    found, errors = [], []

    def value(item_role, variable):
        try:
            return lookup(variable), "set for %s" % host
        except KeyError:
            pass
        defaults = (role_defaults or {}).get(item_role) or {}
        if variable not in defaults:
            raise LookupError("%s on %s: not set, and the %s role has no default for it" % (variable, host, item_role))
        return defaults[variable], "the %s role's default" % item_role

    for item in SERVICE_PORTS:
        try:
            group = item.get("group") or value(item["role"], item["group_variable"])[0]
            if host not in (groups.get(str(group)) or []):
                continue
            if item.get("enabled") and not boolean(value(item["role"], item["enabled"])[0], strict=False):
                continue
            raw, origin = value(item["role"], item["variable"])
        except LookupError as exc:
            errors.append(str(exc))
            continue
        except Exception as exc:  # a template that cannot be resolved here
            errors.append("%s on %s: cannot be resolved (%s)" % (item["variable"], host, exc))
            continue
        port = parse_port(raw)
        if port is not None:
            found.append({"port": port, "variable": item["variable"], "service": item["service"], "origin": origin})
    return found, errors


def worker_port_errors(host, workers, service_ports):
    """A worker's system_port/rpc_port that another service of the same host listens on.

    Compared by port number alone, whatever the addresses: services may bind wildcards or
    loopback, a later change of address must not turn into a clash at start, and the host
    firewall admits or drops by port.
    """
    taken = {}
    for item in service_ports or []:
        taken.setdefault(item["port"], item)
    errors = []
    for pos, worker in enumerate(workers if isinstance(workers, list) else []):
        if not isinstance(worker, dict):
            continue
        name = worker.get("name") if isinstance(worker.get("name"), str) and worker.get("name") else pos
        for key in ("system_port", "rpc_port"):
            port = parse_port(worker.get(key))
            if port in taken:
                item = taken[port]
                errors.append("dynamo_workers[%s].%s on %s: %d is the port %s listens on here (%s, %s); "
                              "choose another port" % (name, key, host, port, item["service"], item["variable"],
                                                       item["origin"]))
    return errors


def bind_address_errors(host, host_addresses):
    """``host``'s address (kvshare_bind_address) used by another host too.

    ``host_addresses``: host -> its address ('' or None when unknown). Every service of a host
    listens on and advertises this one address: two hosts with one address register each
    other's workers and fight over the same ports.
    """
    mine = str(host_addresses.get(host) or "").strip()
    if not mine:
        return []
    others = sorted(h for h, a in host_addresses.items() if h != host and str(a or "").strip() == mine)
    if not others:
        return []
    return ["kvshare_bind_address on %s: %s is also the address of %s; every host needs its own (each service "
            "listens on and advertises it)" % (host, mine, ", ".join(others))]
