# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Host firewall plan for the firewall role: which ports each host needs, from which sources.

Stdlib only. Used on the controller by the ``kvshare.dynamo.firewall_*`` filters; no module
ships it to a host.

Every port comes from the variables the service roles already use (host or group variables of
the inventory, else the service's default from the stack contract (kvshare_service_defaults in
roles/kvshare), passed in as ``role_defaults``); nothing here repeats a port number, except the
perftest default (``ib_write_bw`` has no variable for it in rdma_ucx).

Sources are the service hosts' addresses (``kvshare_bind_address``, else the host's default IPv4
fact, plus each host's ``firewall_host_addresses``) plus the operator's CIDRs:

=====================================  ==========================================  =============================
port (variable)                        on hosts of                                 from
=====================================  ==========================================  =============================
firewall_ssh_port                      every host                                  firewall_ssh_sources
etcd_client_port                       etcd_group_name (etcd)                      cluster + metrics sources
etcd_peer_port                         etcd_group_name                             the members' etcd_address
dynamo_frontend_http_port              dynamo_frontend                             cluster + frontend + metrics
dynamo_workers[*].system_port          dynamo_workers                              cluster + metrics sources
dynamo_workers[*].rpc_port             dynamo_workers                              Dynamo hosts
firewall_dynamic_port_range            dynamo, kvcr                                Dynamo hosts
maru_pool_rm_port, maru_pool_server_port maru_pool                                 worker hosts + pool hosts;
                                                                                   nobody on 127.0.0.1 (the default)
kvcr_control_port                      kvcr_group_name (kvcr)                      KVCR hosts
kvcr_state_agent_system_port           kvcr hosts running the state agent          cluster + metrics sources
kvcr_kv_events_port                    kvcr                                        KVCR hosts running the state agent
                                                                                   (nobody, loopback only, when none does)
etcd_client_proxy_port                 dynamo (the local etcd client proxy)        nobody (loopback only)
perftest port (ib_write_bw, 18515)     a host named by rdma_ucx_bw_server          the rdma_ucx_bw_test clients
firewall_extra_ports[*]                every host that sets them                   their sources, else cluster
=====================================  ==========================================  =============================

"cluster" = every host of the service groups (etcd, dynamo with dynamo_frontend and dynamo_workers,
maru_pool, kvcr, rdma_ucx); "Dynamo hosts" = dynamo (dynamo_frontend, dynamo_workers) + kvcr.
"""

from __future__ import annotations

import ipaddress
import re

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.kvshare.dynamo.plugins.module_utils import stack as _stack
from ansible_collections.kvshare.dynamo.plugins.module_utils.ports import parse_port, parse_port_range, runs_state_agent

__all__ = [
    "ROLE_DEFAULT_KEYS",
    "PERFTEST_DEFAULT_PORT",
    "FirewallError",
    "parse_sources",
    "host_plan",
    "port_table",
    "ssh_lockout_error",
    "local_port_range_error",
]

# The variables of the other roles this plan reads, per role: a host's own value wins, else the
# default from the stack contract (kvshare_service_defaults, roles/kvshare).
ROLE_DEFAULT_KEYS = {
    "etcd": ("etcd_group_name", "etcd_client_port", "etcd_peer_port"),
    "etcd_client": ("etcd_client_proxy_enabled", "etcd_client_proxy_port"),
    "dynamo_frontend": ("dynamo_frontend_http_port",),
    "maru_pool": ("maru_pool_rm_port", "maru_pool_server_port", "maru_pool_bind_address"),
    "kvcr": ("kvcr_group_name", "kvcr_control_port", "kvcr_kv_events_port", "kvcr_state_agent_system_port"),
    # The contract's own entries (no role variable): the slot whose host runs the KV state agent.
    "kvshare": ("kvcr_state_agent_slot",),
    "rdma_ucx": ("rdma_ucx_bw_test", "rdma_ucx_bw_server", "rdma_ucx_bw_extra_args"),
}
# ib_write_bw's out-of-band TCP port when rdma_ucx_bw_extra_args does not pass -p/--port.
PERFTEST_DEFAULT_PORT = 18515

# Addresses no other host can reach: a service bound there needs no rule for other hosts.
LOCAL_ONLY_ADDRESSES = ("127.0.0.1", "localhost", "::1")
# Groups the site.yml plays use by name.
DYNAMO_GROUP = "dynamo"
FRONTEND_GROUP = _stack.FRONTEND_GROUP   # one definition (stack.py), as frontend_url reads it
WORKERS_GROUP = "dynamo_workers"
MARU_GROUP = "maru_pool"
RDMA_GROUP = "rdma_ucx"

PROTOS = ("tcp", "udp")
POLICIES = ("drop", "accept")
LOOPBACK_MODES = ("interface", "localhost")
_TABLE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_COMMENT_BAD = re.compile(r"[^A-Za-z0-9 ._:/()\[\],+='-]")
_MISSING = object()


class FirewallError(ValueError):
    """An input the plan cannot be built from; the message names the variable and the host."""


# ---------------------------------------------------------------------------
# small parsers (parse_port and parse_port_range: module_utils/ports.py)
# ---------------------------------------------------------------------------

def parse_sources(values, variable, host):
    """A list of IPv4/IPv6 addresses or CIDRs -> ([ip_network], [errors])."""
    if not isinstance(values, (list, tuple)):
        return [], ["%s on %s: must be a list of addresses or CIDRs (got %s %r)"
                    % (variable, host, type(values).__name__, values)]
    nets, errors = [], []
    for pos, value in enumerate(values):
        if not isinstance(value, str) or not value.strip():
            errors.append("%s[%d] on %s: %r is not an address or CIDR" % (variable, pos, host, value))
            continue
        try:
            nets.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            errors.append("%s[%d] on %s: %r is not an IPv4/IPv6 address or CIDR" % (variable, pos, host, value))
    return nets, errors


def _port_text(lo, hi):
    return str(lo) if lo == hi else "%d-%d" % (lo, hi)


def _merge_ranges(ranges):
    out = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _nft_addr(net):
    return str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)


def _minimal(nets):
    """Distinct networks, none inside another (nft refuses overlapping set elements), sorted."""
    kept = []
    for net in sorted(set(nets), key=lambda n: (n.prefixlen, n)):
        if not any(net.subnet_of(k) for k in kept):
            kept.append(net)
    return sorted(kept)


def _comment(text):
    return _COMMENT_BAD.sub("_", str(text))[:120]


# ---------------------------------------------------------------------------
# inventory access
# ---------------------------------------------------------------------------

class _Inventory:
    """Reads variables of inventory hosts: the host's own value, else the role default."""

    def __init__(self, hostvars, groups, role_defaults):
        self.hostvars = hostvars
        self.groups = groups
        self.defaults = role_defaults or {}

    def group(self, name):
        members = self.groups.get(name) if name else None
        return list(members or [])

    def has(self, host, key):
        try:
            return key in self.hostvars[host]
        except KeyError:
            return False

    def own(self, host, key, default=_MISSING):
        if self.has(host, key):
            return self.hostvars[host][key]
        return default

    def var(self, host, key):
        value = self.own(host, key)
        if value is _MISSING:
            if key not in self.defaults:
                raise FirewallError("%s on %s: not set and no role default known" % (key, host))
            value = self.defaults[key]
        return value

    def address(self, host):
        """The host's service address: kvshare_bind_address, else its default IPv4 fact (stack.bind_address_of)."""
        value = _stack.bind_address_of({key: self.own(host, key, None) for key in _stack.BIND_ADDRESS_VARIABLES})
        if value in (None, ""):
            raise FirewallError("kvshare_bind_address of %s: unknown (not set, no facts gathered)" % host)
        try:
            return ipaddress.ip_network(str(value).strip(), strict=False)
        except ValueError:
            raise FirewallError("kvshare_bind_address of %s: %r is not an IP address" % (host, value))

    def etcd_address(self, host):
        value = self.own(host, "etcd_address", None)
        if value in (None, ""):
            return self.address(host)
        try:
            return ipaddress.ip_network(str(value).strip(), strict=False)
        except ValueError:
            raise FirewallError("etcd_address of %s: %r is not an IP address" % (host, value))


class _Sources:
    """A set of sources: networks, or 'any' per address family."""

    def __init__(self, nets=()):
        self.nets = []
        self.any4 = self.any6 = False
        self.add(nets)

    def add(self, nets):
        for net in nets:
            if net.prefixlen == 0:
                if net.version == 4:
                    self.any4 = True
                else:
                    self.any6 = True
            else:
                self.nets.append(net)
        return self

    def v4(self):
        return [] if self.any4 else _minimal(n for n in self.nets if n.version == 4)

    def v6(self):
        return [] if self.any6 else _minimal(n for n in self.nets if n.version == 6)

    def empty(self):
        return not (self.any4 or self.any6 or self.nets)

    def matches(self):
        """nft match prefixes, one per rule line: '' (anyone), 'meta nfproto ipv4 ', 'ip saddr { ... } '."""
        if self.any4 and self.any6:
            return [""]
        out = []
        if self.any4:
            out.append("meta nfproto ipv4 ")
        elif self.v4():
            out.append("ip saddr { %s } " % ", ".join(_nft_addr(n) for n in self.v4()))
        if self.any6:
            out.append("meta nfproto ipv6 ")
        elif self.v6():
            out.append("ip6 saddr { %s } " % ", ".join(_nft_addr(n) for n in self.v6()))
        return out

    def texts(self):
        out = (["0.0.0.0/0"] if self.any4 else [_nft_addr(n) for n in self.v4()])
        out += (["::/0"] if self.any6 else [_nft_addr(n) for n in self.v6()])
        return out


# ---------------------------------------------------------------------------
# the plan
# ---------------------------------------------------------------------------

def _perftest_port(extra_args):
    args = [str(a) for a in (extra_args or [])] if isinstance(extra_args, (list, tuple)) else []
    for pos, arg in enumerate(args):
        if arg in ("-p", "--port") and pos + 1 < len(args):
            return parse_port(args[pos + 1])
        if arg.startswith("--port="):
            return parse_port(arg.split("=", 1)[1])
    return PERFTEST_DEFAULT_PORT


class _PlanBuilder:
    """The rules, local-only ports and errors of one host's plan as its sections add them."""

    def __init__(self, host, inv):
        self.host, self.inv = host, inv
        self.errors, self.rules, self.local_only = [], [], []

    def err(self, message):
        self.errors.append(message)

    def sources_of(self, variable, values):
        nets, problems = parse_sources(values, variable, self.host)
        self.errors.extend(problems)
        return nets

    def also(self, member):
        """The member's firewall_host_addresses: other addresses its connections may come from."""
        values = self.inv.own(member, "firewall_host_addresses", [])
        if values in (None, ""):
            return []
        nets, problems = parse_sources(values, "firewall_host_addresses", member)
        self.errors.extend("%s (needed as a firewall source on %s)" % (p, self.host) for p in problems)
        return nets

    def addresses(self, hosts, address_of=None):
        nets = []
        for member in hosts:
            try:
                nets.append((address_of or self.inv.address)(member))
            except FirewallError as exc:
                self.err("%s (needed as a firewall source on %s)" % (exc, self.host))
            nets.extend(self.also(member))
        return nets

    def add(self, proto, port_value, variable, description, sources):
        span = parse_port_range(port_value)
        if span is None:
            self.err("%s on %s: %r is not a port (1-65535) or a range lo-hi" % (variable, self.host, port_value))
            return
        if sources.empty():
            self.err("%s on %s: no source may reach port %s (an empty source list)" % (variable, self.host, port_value))
            return
        self.rules.append({"proto": proto, "ports": span, "dport": _port_text(*span), "variable": variable,
                           "comment": _comment(variable),
                           "description": _comment(description), "sources": sources.texts(),
                           "matches": sources.matches()})

    def own_var(self, key):
        try:
            return self.inv.var(self.host, key)
        except FirewallError as exc:
            self.err(str(exc))
            return None

    def local(self, variable):
        port = parse_port(self.own_var(variable))
        if port is None:
            self.err("%s on %s: %r is not a port" % (variable, self.host, self.own_var(variable)))
        else:
            self.local_only.append({"proto": "tcp", "ports": (port, port), "dport": str(port), "variable": variable,
                                    "comment": variable})


def _plan_options(b, options):
    """This host's firewall settings, checked: {policy, ssh, frontend, metrics, dynamic, dynamic_span}."""
    host = b.host
    policy = options.get("policy", "drop")
    if policy not in POLICIES:
        b.err("firewall_policy on %s: %r is not one of %s" % (host, policy, ", ".join(POLICIES)))
    if options.get("loopback_accept", "interface") not in LOOPBACK_MODES:
        b.err("firewall_loopback_accept on %s: %r is not one of %s"
              % (host, options.get("loopback_accept"), ", ".join(LOOPBACK_MODES)))
    if not _TABLE_RE.match(str(options.get("table", "kvshare"))):
        b.err("firewall_table on %s: %r must be a plain nft name (letter, then letters, digits, _; at most 32)"
              % (host, options.get("table")))
    dynamic = options.get("dynamic_port_range", "")
    dynamic_span = parse_port_range(dynamic)
    if dynamic_span is None or dynamic_span[0] == dynamic_span[1]:
        dynamic_span = None
    return {"policy": policy,
            "ssh": b.sources_of("firewall_ssh_sources", options.get("ssh_sources", [])),
            "frontend": b.sources_of("firewall_frontend_sources", options.get("frontend_sources", [])),
            "metrics": b.sources_of("firewall_metrics_sources", options.get("metrics_sources", [])),
            "dynamic": dynamic, "dynamic_span": dynamic_span}


def _plan_placement(b):
    """Who is who: the hosts of each service and the source sets built from them."""
    inv = b.inv
    # The names come from the host, else the contract (inv.var); where neither gives one, own_var
    # has recorded the error and the plan fails: no group, rather than a second copy of the name.
    etcd_group = b.own_var("etcd_group_name") or ""
    kvcr_group = b.own_var("kvcr_group_name") or ""
    frontends, workers = inv.group(FRONTEND_GROUP), inv.group(WORKERS_GROUP)
    members, maru_hosts, kvcr_hosts = inv.group(etcd_group), inv.group(MARU_GROUP), inv.group(kvcr_group)
    dynamo_hosts = sorted(set(frontends + workers + kvcr_hosts + inv.group(DYNAMO_GROUP)))
    cluster_hosts = sorted(set(members + dynamo_hosts + maru_hosts + inv.group(RDMA_GROUP) + [b.host]))
    return {"etcd_group": etcd_group, "frontends": frontends, "workers": workers, "members": members,
            "maru_hosts": maru_hosts, "kvcr_hosts": kvcr_hosts, "dynamo_hosts": dynamo_hosts,
            "cluster": b.addresses(cluster_hosts), "dynamo_peers": b.addresses(sorted(set(dynamo_hosts + [b.host])))}


def _plan_ssh(b, opts, options):
    """SSH first: the operator's way in."""
    if opts["policy"] == "drop" and not opts["ssh"]:
        b.err("firewall_ssh_sources on %s: empty with firewall_policy=drop: nobody (Ansible included) could "
              "reach SSH any more" % b.host)
    if opts["ssh"]:
        b.add("tcp", options.get("ssh_port"), "firewall_ssh_port", "SSH", _Sources(opts["ssh"]))
    elif parse_port(options.get("ssh_port")) is None:
        b.err("firewall_ssh_port on %s: %r is not a port (1-65535)" % (b.host, options.get("ssh_port")))


def _plan_etcd(b, opts, where):
    if b.host in where["members"]:
        b.add("tcp", b.own_var("etcd_client_port"), "etcd_client_port", "etcd clients (every service host)",
              _Sources(where["cluster"] + opts["metrics"]))
        peers = b.addresses(where["members"], b.inv.etcd_address)
        b.add("tcp", b.own_var("etcd_peer_port"), "etcd_peer_port", "etcd peers (members of %s)" % where["etcd_group"],
              _Sources(peers))


def _plan_workers(b, opts, where):
    host = b.host
    worker_list = b.inv.own(host, "dynamo_workers", [])
    if worker_list in (None, ""):
        worker_list = []
    if not isinstance(worker_list, (list, tuple)):
        b.err("dynamo_workers on %s: must be a list of workers" % host)
        worker_list = []
    for pos, worker in enumerate(worker_list):
        if not isinstance(worker, dict) and not hasattr(worker, "get"):
            b.err("dynamo_workers[%d] on %s: must be a mapping" % (pos, host))
            continue
        name = worker.get("name") or str(pos)
        b.add("tcp", worker.get("system_port"), "dynamo_workers[%s].system_port" % name,
              "worker %s: DYN_SYSTEM_PORT (health, metrics)" % name, _Sources(where["cluster"] + opts["metrics"]))
        if worker.get("rpc_port") not in (None, ""):
            b.add("tcp", worker.get("rpc_port"), "dynamo_workers[%s].rpc_port" % name,
                  "worker %s: request plane (DYN_TCP_RPC_PORT)" % name, _Sources(where["dynamo_peers"]))


def _plan_dynamo(b, opts, where):
    host, dynamo_hosts = b.host, where["dynamo_hosts"]
    # The local etcd client proxy of every Dynamo host serves this host's Dynamo processes only.
    if host in dynamo_hosts and boolean(b.own_var("etcd_client_proxy_enabled"), strict=False):
        b.local("etcd_client_proxy_port")
    if host in where["frontends"]:
        b.add("tcp", b.own_var("dynamo_frontend_http_port"), "dynamo_frontend_http_port",
              "dynamo.frontend HTTP API (service hosts, firewall_frontend_sources)",
              _Sources(where["cluster"] + opts["frontend"] + opts["metrics"]))
    if host in where["workers"]:
        _plan_workers(b, opts, where)
    if host in dynamo_hosts and opts["dynamic_span"] is None:
        b.err("firewall_dynamic_port_range on %s: %r must be a range lo-hi within 1-65535 (Dynamo's unpinned "
              "transports listen on ephemeral ports; usually net.ipv4.ip_local_port_range, 32768-60999)"
              % (host, opts["dynamic"]))
    elif host in dynamo_hosts:
        b.add("tcp", _port_text(*opts["dynamic_span"]), "firewall_dynamic_port_range",
              "Dynamo's unpinned transports (Dynamo hosts): TCP response streams, ZMQ event plane, request planes without rpc_port",
              _Sources(where["dynamo_peers"]))


def _plan_maru(b, where):
    # On the host's loopback address (the default) no other host can reach the pool services.
    if b.host not in where["maru_hosts"]:
        return
    if str(b.own_var("maru_pool_bind_address")) in LOCAL_ONLY_ADDRESSES:
        b.local("maru_pool_rm_port")
        b.local("maru_pool_server_port")
        return
    maru_clients = _Sources(b.addresses(sorted(set(where["workers"] + where["maru_hosts"]))))
    b.add("tcp", b.own_var("maru_pool_rm_port"), "maru_pool_rm_port", "Maru resource manager (worker hosts)",
          maru_clients)
    b.add("tcp", b.own_var("maru_pool_server_port"), "maru_pool_server_port", "Maru metadata server (worker hosts)",
          maru_clients)


def _runs_state_agent(b, member, role_defaults):
    """Whether the kvcr role runs the KV state agent on ``member`` (ports.runs_state_agent: its
    kvcr_state_agent_enabled, else whether its slot is the contract's agent slot)."""
    def own(key):
        value = b.inv.own(member, key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value
    return runs_state_agent(own, role_defaults)


def _plan_kvcr(b, opts, where, role_defaults):
    host = b.host
    if host not in where["kvcr_hosts"]:
        return
    kvcr_hosts = sorted(set(where["kvcr_hosts"]))
    b.add("tcp", b.own_var("kvcr_control_port"), "kvcr_control_port", "KVCR control channel (KVCR hosts)",
          _Sources(b.addresses(kvcr_hosts)))
    # This host's vLLM publishes its raw KV events on tcp://*:kvcr_kv_events_port and advertises
    # tcp://<kvcr_advertise_host>:<port> (dynamo_state_agent.raw_advertise_host); the state agent
    # connects to that endpoint of every KVCR worker, its own host's included. Only the KVCR hosts
    # that run the agent need it; with none, the port stays local.
    agents = dict((member, _runs_state_agent(b, member, role_defaults)) for member in kvcr_hosts)
    agent_hosts = [member for member in kvcr_hosts if agents[member]]
    if agent_hosts:
        b.add("tcp", b.own_var("kvcr_kv_events_port"), "kvcr_kv_events_port",
              "vLLM raw KV events: the KV state agent (KVCR hosts that run it)", _Sources(b.addresses(agent_hosts)))
    else:
        b.local("kvcr_kv_events_port")
    if agents[host]:
        b.add("tcp", b.own_var("kvcr_state_agent_system_port"), "kvcr_state_agent_system_port",
              "KV state agent: DYN_SYSTEM_PORT (health, metrics)", _Sources(where["cluster"] + opts["metrics"]))


def _plan_perftest(b):
    """ib_write_bw's out-of-band port on the server of rdma_ucx_bw_test clients."""
    inv, host, clients = b.inv, b.host, []
    for client in inv.group(RDMA_GROUP):
        try:
            if not boolean(inv.var(client, "rdma_ucx_bw_test"), strict=False) or str(inv.var(client, "rdma_ucx_bw_server")) != host:
                continue
        except FirewallError as exc:
            b.err(str(exc))
            continue
        port = _perftest_port(inv.var(client, "rdma_ucx_bw_extra_args"))
        if port is None:
            b.err("rdma_ucx_bw_extra_args of %s: -p/--port is not a port (needed on %s)" % (client, host))
            continue
        clients.append((port, client))
    for port in sorted(set(p for p, dummy in clients)):
        b.add("tcp", port, "rdma_ucx_bw_server", "ib_write_bw out-of-band port (rdma_ucx_bw_test clients)",
              _Sources(b.addresses(sorted(c for p, c in clients if p == port))))


def _plan_extras(b, where, options):
    """The operator's firewall_extra_ports."""
    host = b.host
    extras = options.get("extra_ports", [])
    if extras in (None, ""):
        extras = []
    if not isinstance(extras, (list, tuple)):
        b.err("firewall_extra_ports on %s: must be a list of {port, proto, sources, comment} (got %s)"
              % (host, type(extras).__name__))
        extras = []
    for pos, item in enumerate(extras):
        variable = "firewall_extra_ports[%d]" % pos
        if not isinstance(item, dict) and not hasattr(item, "get"):
            b.err("%s on %s: must be a mapping {port, proto, sources, comment}" % (variable, host))
            continue
        unknown = sorted(set(item) - {"port", "proto", "sources", "comment"})
        if unknown:
            b.err("%s on %s: unknown keys %s (use port, proto, sources, comment)" % (variable, host, ", ".join(unknown)))
        proto = item.get("proto", "tcp")
        if proto not in PROTOS:
            b.err("%s.proto on %s: %r is not one of %s" % (variable, host, proto, ", ".join(PROTOS)))
            continue
        if "sources" in item:
            nets = b.sources_of(variable + ".sources", item.get("sources"))
            if isinstance(item.get("sources"), (list, tuple)) and not item.get("sources"):
                b.err("%s.sources on %s: empty; leave it out for the service hosts or list 0.0.0.0/0 for anyone"
                      % (variable, host))
                continue
            sources = _Sources(nets)
        else:
            sources = _Sources(where["cluster"])
        b.add(proto, item.get("port"), variable + ".port", item.get("comment") or "operator port", sources)


def _guarded_sets(rules, local_only):
    guarded = {}
    for proto in PROTOS:
        spans = _merge_ranges([r["ports"] for r in rules if r["proto"] == proto]
                              + [r["ports"] for r in local_only if r["proto"] == proto])
        if spans:
            guarded[proto] = "{ %s }" % ", ".join(_port_text(lo, hi) for lo, hi in spans)
    return guarded


def host_plan(host, groups, hostvars, options, role_defaults):
    """The firewall plan of one host.

    ``groups``: group -> hosts. ``hostvars``: host -> mapping of that host's variables (resolved).
    ``options``: this host's firewall settings: ssh_port, ssh_sources, frontend_sources,
    metrics_sources, dynamic_port_range, extra_ports, policy, loopback_accept, table.
    ``role_defaults``: variable -> default of the service roles (see ROLE_DEFAULT_KEYS).

    Returns {"host", "rules": [{"proto", "dport", "ports": (lo, hi), "variable", "comment", "description",
    "sources": [text], "matches": [nft prefix]}], "local_only": [{"proto", "dport", "variable", "comment"}],
    "guarded": {"tcp": "{ ... }", "udp": ...}, "errors": [text]} -- errors name variable and host.
    Sections in rule order: SSH, etcd, Dynamo, Maru, KVCR, ib_write_bw, the operator's extra ports.
    """
    b = _PlanBuilder(host, _Inventory(hostvars, groups, role_defaults))
    opts = _plan_options(b, options)
    where = _plan_placement(b)
    _plan_ssh(b, opts, options)
    _plan_etcd(b, opts, where)
    _plan_dynamo(b, opts, where)
    _plan_maru(b, where)
    _plan_kvcr(b, opts, where, role_defaults)
    _plan_perftest(b)
    _plan_extras(b, where, options)
    return {"host": host, "rules": b.rules, "local_only": b.local_only,
            "guarded": _guarded_sets(b.rules, b.local_only), "errors": b.errors}


def port_table(plan):
    """{"tcp/2379": ["10.0.0.1", ...]}: the plan's rules as port -> sorted sources (for reports and tests)."""
    table = {}
    for rule in plan["rules"]:
        key = "%s/%s" % (rule["proto"], rule["dport"])
        table.setdefault(key, set()).update(rule["sources"])
    for rule in plan["local_only"]:
        table.setdefault("%s/%s" % (rule["proto"], rule["dport"]), set())
    return dict((key, sorted(value)) for key, value in sorted(table.items()))


# ---------------------------------------------------------------------------
# host checks (online preflight)
# ---------------------------------------------------------------------------

def ssh_lockout_error(ssh_connection, ssh_port, ssh_sources, host):
    """'' when the SSH session Ansible uses now stays allowed, else a message naming the variable.

    ``ssh_connection``: the host's SSH_CONNECTION ("client_ip client_port server_ip server_port").
    """
    fields = str(ssh_connection or "").split()
    if len(fields) != 4:
        return ""
    client, server_port = fields[0], parse_port(fields[3])
    if server_port is not None and parse_port(ssh_port) != server_port:
        return ("firewall_ssh_port on %s: Ansible reaches sshd on port %d, but firewall_ssh_port is %r: "
                "the table would lock Ansible out" % (host, server_port, ssh_port))
    nets, problems = parse_sources(ssh_sources, "firewall_ssh_sources", host)
    if problems:
        return ""  # reported by the plan
    try:
        address = ipaddress.ip_address(client.split("%", 1)[0])
    except ValueError:
        return ""
    if address.version == 6 and address.ipv4_mapped:
        address = address.ipv4_mapped
    if not any(address in net for net in nets if net.version == address.version):
        return ("firewall_ssh_sources on %s: Ansible connects from %s, which no entry covers (%s): "
                "the table would lock Ansible out" % (host, address, ", ".join(str(n) for n in nets) or "empty"))
    return ""


def local_port_range_error(proc_text, dynamic_port_range, host):
    """'' when the host's ephemeral port range (net.ipv4.ip_local_port_range) lies within
    firewall_dynamic_port_range, else a message naming the variable."""
    fields = str(proc_text or "").split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return ""
    lo, hi = int(fields[0]), int(fields[1])
    span = parse_port_range(dynamic_port_range) if dynamic_port_range not in (None, "") else None
    if span is None:
        return ("firewall_dynamic_port_range on %s: empty, but Dynamo's unpinned transports (response streams, "
                "ZMQ event plane) listen on ephemeral ports %d-%d here: they would be dropped" % (host, lo, hi))
    if lo < span[0] or hi > span[1]:
        return ("firewall_dynamic_port_range on %s: %s does not cover the host's ephemeral ports %d-%d "
                "(net.ipv4.ip_local_port_range); set firewall_dynamic_port_range: \"%d-%d\""
                % (host, dynamic_port_range, lo, hi, lo, hi))
    return ""
