# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for the firewall plan in plugins/module_utils/firewall.py (plain-dict inventories)."""
import os

import pytest
import yaml

from ansible_collections.kvshare.dynamo.plugins.filter.internal import firewall as ffw
from ansible_collections.kvshare.dynamo.plugins.module_utils import firewall as fw
from lib.sandbox import service_defaults

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

# The real service defaults (the stack contract, roles/kvshare), as the firewall role passes them.
CONTRACT = service_defaults()
DEFAULTS = ffw.role_defaults(CONTRACT)

OPTIONS = {"policy": "drop", "table": "kvshare", "loopback_accept": "interface", "ssh_port": 22,
           "ssh_sources": ["0.0.0.0/0", "::/0"], "frontend_sources": [], "metrics_sources": [],
           "dynamic_port_range": "32768-60999", "extra_ports": []}


def three_hosts():
    """etcd on all three, frontend on a, workers on b (one without rpc_port), Maru on b, KVCR on c."""
    hostvars = {
        "a": {"kvshare_bind_address": "10.0.0.1"},
        "b": {"kvshare_bind_address": "10.0.0.2",
              "dynamo_workers": [{"name": "w0", "system_port": 18081, "rpc_port": 19081},
                                 {"name": "w1", "system_port": "18082"}]},
        "c": {"kvshare_bind_address": "10.0.0.3", "kvcr_cache_slot": 0,
              "dynamo_workers": [{"name": "kvcr", "system_port": 9090, "rpc_port": 9190}]},
        "bastion": {"kvshare_bind_address": "10.9.9.9"},
    }
    groups = {"all": ["a", "b", "c", "bastion"], "etcd": ["a", "b", "c"], "dynamo_frontend": ["a"],
              "dynamo_workers": ["b", "c"], "maru_pool": ["b"], "kvcr": ["c"]}
    return hostvars, groups


def plan(host, hostvars=None, groups=None, **options):
    if hostvars is None:
        hostvars, groups = three_hosts()
    opts = dict(OPTIONS, **options)
    return fw.host_plan(host, groups, hostvars, opts, DEFAULTS)


def test_role_defaults_are_read_from_the_roles():
    assert DEFAULTS["etcd_client_port"] == 2379 and DEFAULTS["etcd_peer_port"] == 2380
    assert DEFAULTS["dynamo_frontend_http_port"] == 8000
    assert (DEFAULTS["maru_pool_rm_port"], DEFAULTS["maru_pool_server_port"]) == (9850, 5555)
    assert (DEFAULTS["kvcr_control_port"], DEFAULTS["kvcr_kv_events_port"]) == (23280, 23080)
    assert DEFAULTS["kvcr_state_agent_system_port"] == 9091
    assert DEFAULTS["etcd_client_proxy_port"] == 23790 and DEFAULTS["etcd_client_proxy_enabled"] is True
    # the slot whose host runs the state agent (ports.runs_state_agent), not a copy of the kvcr default
    assert DEFAULTS["kvcr_state_agent_slot"] == 0 and "kvcr_state_agent_enabled" not in DEFAULTS


def test_frontend_and_etcd_host():
    p = plan("a")
    assert p["errors"] == []
    assert fw.port_table(p) == {
        "tcp/22": ["0.0.0.0/0", "::/0"],
        "tcp/2379": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "tcp/2380": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "tcp/32768-60999": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "tcp/8000": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "tcp/23790": [],   # the local etcd client proxy: loopback only
    }
    # a host outside the service groups (bastion) is no source
    assert "10.9.9.9" not in str(p)


def test_worker_and_maru_host():
    hostvars, groups = three_hosts()
    hostvars["b"]["maru_pool_bind_address"] = "10.0.0.2"  # serving workers on other hosts
    p = plan("b", hostvars, groups)
    assert p["errors"] == []
    table = fw.port_table(p)
    assert sorted(table) == ["tcp/18081", "tcp/18082", "tcp/19081", "tcp/22", "tcp/2379", "tcp/23790", "tcp/2380",
                             "tcp/32768-60999", "tcp/5555", "tcp/9850"]
    # Maru: only the worker hosts (and the pool host)
    assert table["tcp/9850"] == table["tcp/5555"] == ["10.0.0.2", "10.0.0.3"]
    variables = [r["variable"] for r in p["rules"]]
    assert "dynamo_workers[w0].rpc_port" in variables and "dynamo_workers[w1].rpc_port" not in variables


def test_maru_on_loopback_by_default_admits_nobody():
    assert DEFAULTS["maru_pool_bind_address"] == "127.0.0.1"
    p = plan("b")
    table = fw.port_table(p)
    assert table["tcp/9850"] == table["tcp/5555"] == []
    assert {"maru_pool_rm_port", "maru_pool_server_port"} <= {r["variable"] for r in p["local_only"]}


def test_kvcr_host_state_agent_and_its_events_port():
    p = plan("c")
    table = fw.port_table(p)
    assert table["tcp/23280"] == ["10.0.0.3"]          # KVCR peers only (here: itself)
    assert table["tcp/9091"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]   # slot 0 runs the state agent
    assert table["tcp/23080"] == ["10.0.0.3"]          # the state agent (here: on this host) reads the events
    assert [r["variable"] for r in p["local_only"]] == ["etcd_client_proxy_port"]
    hostvars, groups = three_hosts()
    hostvars["c"]["kvcr_cache_slot"] = 1
    p = plan("c", hostvars, groups)
    assert "tcp/9091" not in fw.port_table(p)
    # no KVCR host runs the agent: nobody reads the events from outside, the port stays local
    assert fw.port_table(p)["tcp/23080"] == []
    assert [r["variable"] for r in p["local_only"]] == ["etcd_client_proxy_port", "kvcr_kv_events_port"]
    hostvars["c"]["kvcr_state_agent_enabled"] = "true"
    assert "tcp/9091" in fw.port_table(plan("c", hostvars, groups))


def two_kvcr_hosts():
    """c (slot 0, the state agent) and d (slot 1) are the KVCR hosts; a and b are service hosts, not KVCR."""
    hostvars, groups = three_hosts()
    hostvars["d"] = {"kvshare_bind_address": "10.0.0.4", "kvcr_cache_slot": 1, "kvcr_kv_events_port": 24080,
                     "firewall_host_addresses": ["10.0.4.4"],
                     "dynamo_workers": [{"name": "kvcr", "system_port": 9090, "rpc_port": 9190}]}
    hostvars["c"]["firewall_host_addresses"] = ["10.0.3.3"]
    groups["all"].append("d")
    groups["dynamo_workers"].append("d")
    groups["kvcr"] = ["c", "d"]
    return hostvars, groups


def test_kvcr_events_port_is_open_to_the_state_agent_hosts_only():
    """Every KVCR worker publishes its raw KV events on kvcr_kv_events_port; the state agent on the slot-0
    host connects to each (its own host's included). Only the agent's host is admitted, never another
    service host or anyone else; each host opens its own kvcr_kv_events_port."""
    hostvars, groups = two_kvcr_hosts()
    c, d = fw.port_table(plan("c", hostvars, groups)), fw.port_table(plan("d", hostvars, groups))
    assert c["tcp/23080"] == ["10.0.0.3", "10.0.3.3"] and "tcp/24080" not in c
    assert d["tcp/24080"] == ["10.0.0.3", "10.0.3.3"] and "tcp/23080" not in d   # not d itself, not a, b
    assert "tcp/9091" in c and "tcp/9091" not in d
    assert d["tcp/23280"] == ["10.0.0.3", "10.0.0.4", "10.0.3.3", "10.0.4.4"]
    rule = [r for r in plan("d", hostvars, groups)["rules"] if r["variable"] == "kvcr_kv_events_port"][0]
    assert rule["matches"] == ["ip saddr { 10.0.0.3, 10.0.3.3 } "] and rule["comment"] == "kvcr_kv_events_port"
    # non-KVCR hosts open no KVCR port at all
    assert not [k for k in fw.port_table(plan("a", hostvars, groups)) if k in ("tcp/23080", "tcp/24080")]
    # the agent moved to d: c admits d, d admits itself
    hostvars["c"]["kvcr_state_agent_enabled"] = False
    hostvars["d"]["kvcr_state_agent_enabled"] = "yes"
    c, d = fw.port_table(plan("c", hostvars, groups)), fw.port_table(plan("d", hostvars, groups))
    assert c["tcp/23080"] == ["10.0.0.4", "10.0.4.4"] and d["tcp/24080"] == ["10.0.0.4", "10.0.4.4"]


def test_the_state_agent_slot_decides_which_peer_is_admitted():
    """The agent runs on the host of the contract's kvcr_state_agent_slot (0), as the kvcr role's
    default decides: with slot 1, d runs it and c's events port admits d; a host's own
    kvcr_state_agent_enabled wins."""
    hostvars, groups = two_kvcr_hosts()
    slot_1 = dict(DEFAULTS, kvcr_state_agent_slot=1)
    c = fw.port_table(fw.host_plan("c", groups, hostvars, dict(OPTIONS), slot_1))
    assert c["tcp/23080"] == ["10.0.0.4", "10.0.4.4"] and "tcp/9091" not in c
    assert "tcp/9091" in fw.port_table(fw.host_plan("d", groups, hostvars, dict(OPTIONS), slot_1))
    hostvars["c"]["kvcr_state_agent_enabled"] = True
    hostvars["d"]["kvcr_state_agent_enabled"] = False
    p = fw.host_plan("d", groups, hostvars, dict(OPTIONS), DEFAULTS)
    assert p["errors"] == [] and fw.port_table(p)["tcp/24080"] == ["10.0.0.3", "10.0.3.3"]


def test_inventory_values_win_over_role_defaults():
    hostvars, groups = three_hosts()
    hostvars["a"].update(etcd_client_port=12379, dynamo_frontend_http_port="8080", etcd_group_name="etcd")
    hostvars["b"].update(etcd_address="10.1.0.2")   # peers use the members' etcd_address
    table = fw.port_table(plan("a", hostvars, groups))
    assert "tcp/12379" in table and "tcp/8080" in table and "tcp/2379" not in table
    assert table["tcp/2380"] == ["10.0.0.1", "10.0.0.3", "10.1.0.2"]


def test_operator_sources_and_matches():
    p = plan("a", frontend_sources=["192.0.2.0/24", "192.0.2.7", "2001:db8::/32"], metrics_sources=["198.51.100.9"],
             ssh_sources=["10.0.0.0/8"])
    table = fw.port_table(p)
    assert table["tcp/8000"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "192.0.2.0/24", "198.51.100.9", "2001:db8::/32"]
    assert table["tcp/2379"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "198.51.100.9"]
    assert table["tcp/2380"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]   # no metrics on the peer port
    rules = dict((r["variable"], r) for r in p["rules"])
    assert rules["dynamo_frontend_http_port"]["matches"] == [
        "ip saddr { 10.0.0.1, 10.0.0.2, 10.0.0.3, 192.0.2.0/24, 198.51.100.9 } ", "ip6 saddr { 2001:db8::/32 } "]
    assert rules["firewall_ssh_port"]["matches"] == ["ip saddr { 10.0.0.0/8 } "]
    assert fw.port_table(plan("a", ssh_sources=["0.0.0.0/0"]))["tcp/22"] == ["0.0.0.0/0"]
    assert [r["matches"] for r in plan("a", ssh_sources=["0.0.0.0/0"])["rules"]][0] == ["meta nfproto ipv4 "]


def test_extra_ports_and_guarded_set():
    p = plan("a", extra_ports=[{"port": 9100, "sources": ["192.0.2.5"], "comment": "node \"exporter\""},
                               {"port": "40000-40010", "proto": "udp"},
                               {"port": 2379, "sources": ["0.0.0.0/0"]}])
    assert p["errors"] == []
    table = fw.port_table(p)
    assert table["tcp/9100"] == ["192.0.2.5"]
    assert table["udp/40000-40010"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]   # left out: the service hosts
    assert table["tcp/2379"] == ["0.0.0.0/0", "10.0.0.1", "10.0.0.2", "10.0.0.3"]
    extra = [r for r in p["rules"] if r["variable"] == "firewall_extra_ports[0].port"][0]
    assert '"' not in extra["description"]
    # merged, overlap-free port intervals for the accept policy's final drop
    assert p["guarded"] == {"tcp": "{ 22, 2379-2380, 8000, 9100, 23790, 32768-60999 }", "udp": "{ 40000-40010 }"}


@pytest.mark.parametrize("options,needle", [
    ({"extra_ports": [{"port": 70000}]}, "firewall_extra_ports[0].port on a: 70000 is not a port"),
    ({"extra_ports": [{"port": "9-1"}]}, "firewall_extra_ports[0].port on a: '9-1' is not a port"),
    ({"extra_ports": [{"port": 1, "proto": "icmp"}]}, "firewall_extra_ports[0].proto on a: 'icmp'"),
    ({"extra_ports": [{"port": 1, "sources": []}]}, "firewall_extra_ports[0].sources on a: empty"),
    ({"extra_ports": [{"port": 1, "srcs": ["10.0.0.1"]}]}, "firewall_extra_ports[0] on a: unknown keys srcs"),
    ({"extra_ports": {"port": 1}}, "firewall_extra_ports on a: must be a list"),
    ({"frontend_sources": ["10.0.0.0/33"]}, "firewall_frontend_sources[0] on a: '10.0.0.0/33'"),
    ({"metrics_sources": "10.0.0.1"}, "firewall_metrics_sources on a: must be a list"),
    ({"ssh_sources": []}, "firewall_ssh_sources on a: empty with firewall_policy=drop"),
    ({"ssh_port": "ssh"}, "firewall_ssh_port on a: 'ssh' is not a port"),
    ({"dynamic_port_range": "60999-32768"}, "firewall_dynamic_port_range on a: '60999-32768'"),
    ({"dynamic_port_range": ""}, "firewall_dynamic_port_range on a: ''"),
    ({"policy": "reject"}, "firewall_policy on a: 'reject'"),
    ({"table": "kv share"}, "firewall_table on a"),
    ({"loopback_accept": "none"}, "firewall_loopback_accept on a"),
])
def test_bad_options_name_variable_and_host(options, needle):
    errors = plan("a", **options)["errors"]
    assert any(needle in e for e in errors), errors


def test_empty_ssh_sources_are_fine_with_accept_policy():
    p = plan("a", policy="accept", ssh_sources=[])
    assert p["errors"] == [] and "tcp/22" not in fw.port_table(p)


def test_dynamic_range_only_on_dynamo_hosts():
    hostvars, groups = three_hosts()
    groups["etcd"].append("bastion")
    p = plan("bastion", hostvars, groups, dynamic_port_range="")
    assert p["errors"] == [] and sorted(fw.port_table(p)) == ["tcp/22", "tcp/2379", "tcp/2380"]


def test_unknown_address_and_bad_worker_ports_are_errors():
    hostvars, groups = three_hosts()
    del hostvars["c"]["kvshare_bind_address"]
    hostvars["b"]["dynamo_workers"][0]["system_port"] = "{{ undefined_port }}"
    errors = plan("b", hostvars, groups)["errors"]
    assert any("kvshare_bind_address of c: unknown" in e and "on b" in e for e in errors), errors
    assert any("dynamo_workers[w0].system_port on b" in e for e in errors), errors
    # the default IPv4 fact stands in for a missing kvshare_bind_address
    hostvars["c"]["ansible_facts"] = {"default_ipv4": {"address": "10.0.0.33"}}
    assert "10.0.0.33" in fw.port_table(plan("a", hostvars, groups))["tcp/2379"]


def test_host_addresses_of_a_multi_homed_host():
    hostvars, groups = three_hosts()
    hostvars["b"]["firewall_host_addresses"] = ["10.1.0.2", "fd00::2"]
    table = fw.port_table(plan("a", hostvars, groups))
    assert table["tcp/2379"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.1.0.2", "fd00::2"]
    assert table["tcp/2380"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.1.0.2", "fd00::2"]
    hostvars["b"]["firewall_host_addresses"] = "10.1.0.2"
    errors = plan("a", hostvars, groups)["errors"]
    assert any("firewall_host_addresses on b: must be a list" in e and "on a" in e for e in errors), errors


def test_perftest_port_for_the_bw_test_server():
    hostvars, groups = three_hosts()
    groups["rdma_ucx"] = ["b", "c"]
    hostvars["c"].update(rdma_ucx_bw_test=True, rdma_ucx_bw_server="b")
    assert fw.port_table(plan("b", hostvars, groups))["tcp/18515"] == ["10.0.0.3"]
    hostvars["c"]["rdma_ucx_bw_extra_args"] = ["--report_gbits", "-p", "20000"]
    table = fw.port_table(plan("b", hostvars, groups))
    assert table["tcp/20000"] == ["10.0.0.3"] and "tcp/18515" not in table
    assert "tcp/20000" not in fw.port_table(plan("c", hostvars, groups))


def test_overlapping_sources_are_reduced_for_nft():
    p = plan("a", frontend_sources=["10.0.0.0/8", "10.0.0.2", "10.0.0.0/8"])
    rule = [r for r in p["rules"] if r["variable"] == "dynamo_frontend_http_port"][0]
    assert rule["matches"] == ["ip saddr { 10.0.0.0/8 } "]


@pytest.mark.parametrize("conn,port,sources,needle", [
    ("10.9.0.5 51000 10.0.0.1 22", 22, ["0.0.0.0/0"], ""),
    ("10.9.0.5 51000 10.0.0.1 22", 22, ["10.9.0.0/16"], ""),
    ("10.9.0.5 51000 10.0.0.1 22", 22, ["10.8.0.0/16"], "firewall_ssh_sources on a: Ansible connects from 10.9.0.5"),
    ("10.9.0.5 51000 10.0.0.1 2222", 22, ["0.0.0.0/0"], "firewall_ssh_port on a: Ansible reaches sshd on port 2222"),
    ("2001:db8::5 51000 2001:db8::1 22", "22", ["2001:db8::/64"], ""),
    ("2001:db8::5 51000 2001:db8::1 22", 22, ["0.0.0.0/0"], "Ansible connects from 2001:db8::5"),
    ("", 22, [], ""),                                   # not over SSH (local connection): nothing to check
])
def test_ssh_lockout(conn, port, sources, needle):
    message = fw.ssh_lockout_error(conn, port, sources, "a")
    assert (needle in message and message) if needle else message == ""


@pytest.mark.parametrize("proc,configured,needle", [
    ("32768\t60999\n", "32768-60999", ""),
    ("40000 50000", "32768-60999", ""),
    ("1024 65000", "32768-60999", 'firewall_dynamic_port_range on a: 32768-60999 does not cover the host\'s ephemeral '
                                  'ports 1024-65000 (net.ipv4.ip_local_port_range); set firewall_dynamic_port_range: "1024-65000"'),
    ("32768 60999", "", "firewall_dynamic_port_range on a: empty"),
    ("garbage", "32768-60999", ""),
])
def test_local_port_range(proc, configured, needle):
    message = fw.local_port_range_error(proc, configured, "a")
    assert (needle in message and message) if needle else message == ""


def test_service_roles_read_their_defaults_from_the_contract():
    """Each service variable is defined once, in roles/kvshare; its role's default reads that entry."""
    for role, keys in fw.ROLE_DEFAULT_KEYS.items():
        with open(os.path.join(REPO, "roles", role, "defaults", "main.yml")) as fh:
            defaults = yaml.safe_load(fh)
        if role == "kvshare":   # the contract's own entries
            assert set(keys) <= set(CONTRACT), keys
            continue
        for key in keys:
            assert key in CONTRACT, key
            assert defaults[key] == "{{ kvshare_service_defaults.%s }}" % key, (role, key)


def test_a_contract_without_a_service_default_is_refused():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="etcd_client_port"):
        ffw.role_defaults(dict((k, v) for k, v in CONTRACT.items() if k != "etcd_client_port"))
