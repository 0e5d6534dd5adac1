# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/module_utils/ports.py (shared listening-port clash check)."""
import os
import socket

from ansible_collections.kvshare.dynamo.plugins.module_utils import ports
from lib.sandbox import service_defaults

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0
   1: 00000000:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0
   2: 0B01000A:094C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1003 1 0
   3: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1004 1 0
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:46A1 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 0
   1: 0000000000000000FFFF00000B01000A:4E20 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2002 1 0
"""


def fake_proc(tmp_path, procs):
    """procs: {pid: (comm, cgroup line, [inodes])}."""
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(TCP)
    (root / "net" / "tcp6").write_text(TCP6)
    for pid, (comm, cgroup, inodes) in procs.items():
        pdir = root / str(pid)
        (pdir / "fd").mkdir(parents=True)
        (pdir / "comm").write_text(comm + "\n")
        (pdir / "cgroup").write_text("0::%s\n" % cgroup)
        for fd, inode in enumerate(inodes):
            os.symlink("socket:[%d]" % inode, str(pdir / "fd" / str(fd)))
        os.symlink("/dev/null", str(pdir / "fd" / "99"))
    return str(root)


def test_port_parsers():
    assert ports.parse_port(True) is None and ports.parse_port("22") == 22 and ports.parse_port(0) is None
    assert ports.parse_port_range(" 1 - 2 ") == (1, 2) and ports.parse_port_range(80) == (80, 80)
    assert ports.parse_port_range("2-1") is None and ports.parse_port_range(None) is None


def test_parse_proc_net_tcp_listen_only_and_addresses():
    rows = ports.parse_proc_net_tcp(TCP)
    assert rows == [
        {"address": "127.0.0.1", "port": 8080, "inode": 1001},
        {"address": "0.0.0.0", "port": 2379, "inode": 1002},
        {"address": "10.0.1.11", "port": 2380, "inode": 1003},
    ]
    rows6 = ports.parse_proc_net_tcp(TCP6, ipv6=True)
    assert rows6 == [{"address": "::", "port": 18081, "inode": 2001},
                     {"address": "10.0.1.11", "port": 20000, "inode": 2002}]


def test_proc_listeners_maps_processes_and_units(tmp_path):
    root = fake_proc(tmp_path, {
        10: ("nginx", "/system.slice/nginx.service", [1002]),
        20: ("etcd", "/system.slice/etcd.service", [1003]),
        30: ("python3", "/system.slice/system-dynamo\\x2dworker.slice/dynamo-worker@w0.service", [2001]),
    })
    found = {(i["port"], i["pid"]): i for i in ports.proc_listeners(root)}
    assert found[(2379, 10)]["process"] == "nginx" and found[(2379, 10)]["units"] == ["nginx.service"]
    assert found[(18081, 30)]["units"] == ["dynamo-worker@w0.service"]
    assert found[(8080, 0)]["process"] == "unknown"


def test_clash_on_wildcard_and_same_address_only(tmp_path):
    listeners = ports.proc_listeners(fake_proc(tmp_path, {10: ("nginx", "/system.slice/nginx.service", [1002, 1003])}))
    assert [c["process"] for c in ports.clashes(listeners, "10.0.1.11", 2379)] == ["nginx"]  # wildcard listener
    assert ports.clashes(listeners, "10.0.1.12", 2380) == []  # another address
    assert len(ports.clashes(listeners, "0.0.0.0", 2380)) == 1  # we want the wildcard


def test_own_service_is_ignored_by_unit_or_pid(tmp_path):
    listeners = ports.proc_listeners(fake_proc(tmp_path, {20: ("etcd", "/system.slice/etcd.service", [1003])}))
    assert ports.clashes(listeners, "10.0.1.11", 2380, own_units=["etcd.service"]) == []
    assert ports.clashes(listeners, "10.0.1.11", 2380, own_pids=[20]) == []
    assert ports.clashes(listeners, "10.0.1.11", 2380, own_units=["dynamo-worker@*.service"])[0]["pid"] == 20


def test_unknown_process_is_own_only_while_the_service_runs(tmp_path):
    listeners = ports.proc_listeners(fake_proc(tmp_path, {}))
    assert ports.clashes(listeners, "127.0.0.1", 8080)[0]["process"] == "unknown"
    assert ports.clashes(listeners, "127.0.0.1", 8080, own_pids=[4242]) == []


def test_clash_text_names_variable_port_process_host():
    text = ports.clash_text({"port": 2379, "process": "nginx", "pid": 10, "address": "0.0.0.0",
                             "units": ["nginx.service"]}, "etcd_client_port", "gpu-a")
    assert text == "etcd_client_port 2379 is held by nginx (pid 10, unit nginx.service) listening on 0.0.0.0 (host gpu-a)"


def test_real_proc_sees_this_process_listening():
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        mine = [i for i in ports.proc_listeners() if i["port"] == port]
        assert mine and mine[0]["pid"] == os.getpid() and mine[0]["address"] == "127.0.0.1"
        assert ports.clashes(mine, "127.0.0.1", port)[0]["pid"] == os.getpid()
        assert ports.clashes(mine, "127.0.0.1", port, own_pids=[os.getpid()]) == []
    finally:
        sock.close()


def test_ss_output_parser_kept():
    out = 'LISTEN 0 4096 0.0.0.0:5555 0.0.0.0:* users:(("nc",pid=77,fd=3))\n'
    assert ports.port_listeners(out, 5555) == [{"address": "0.0.0.0", "port": 5555, "process": "nc", "pid": 77}]


# --- inventory level: the ports a host's services will listen on --------------------------------


def role_defaults():
    """The real service defaults (the stack contract, roles/kvshare), as validate.yml passes them."""
    from ansible_collections.kvshare.dynamo.plugins.filter.internal import validation

    return validation._role_defaults(service_defaults())


GROUPS = {"etcd": ["a", "b"], "dynamo": ["a", "b", "c"], "dynamo_frontend": ["a"], "dynamo_workers": ["b", "c"],
          "maru_pool": ["b"], "kvcr": ["c"]}


def listening(host, host_vars=None, groups=None, defaults=None):
    found, errors = ports.host_service_ports(host, groups or GROUPS, host_vars or {}, defaults or role_defaults())
    assert errors == []
    return dict((i["port"], i["variable"]) for i in found)


def test_every_service_port_has_a_role_default():
    defaults = role_defaults()
    for item in ports.SERVICE_PORTS:
        for key in ("variable", "group_variable", "enabled"):
            if item.get(key):
                assert item[key] in defaults[item["role"]], (item["role"], item[key])


def test_host_ports_follow_groups_and_defaults():
    # kvcr_state_agent_enabled's default is a template: on c it is given as the resolved value
    assert listening("a") == {8000: "dynamo_frontend_http_port", 2379: "etcd_client_port", 2380: "etcd_peer_port",
                              23790: "etcd_client_proxy_port"}
    assert listening("b") == {2379: "etcd_client_port", 2380: "etcd_peer_port", 23790: "etcd_client_proxy_port",
                              9850: "maru_pool_rm_port", 5555: "maru_pool_server_port"}
    assert listening("c", {"kvcr_state_agent_enabled": True}) == {
        23790: "etcd_client_proxy_port", 23280: "kvcr_control_port", 23080: "kvcr_kv_events_port",
        9091: "kvcr_state_agent_system_port"}
    assert 9091 not in listening("c", {"kvcr_state_agent_enabled": "false"})


def test_host_values_win_and_switches_count():
    got = listening("a", {"dynamo_frontend_http_port": "8080", "etcd_client_proxy_enabled": False, "etcd_group_name": "kv"},
                    dict(GROUPS, kv=["c"]))
    assert got == {8080: "dynamo_frontend_http_port"}
    found, dummy = ports.host_service_ports("a", GROUPS, {"dynamo_frontend_http_port": 8080}, role_defaults())
    origins = dict((i["variable"], i["origin"]) for i in found)
    assert origins["dynamo_frontend_http_port"] == "set for a"
    assert origins["etcd_client_port"] == "the etcd role's default"


def test_unreadable_values_are_named_and_bad_ports_left_to_the_specs():
    def lookup(key):
        if key == "etcd_client_port":
            raise RuntimeError("'undefined_var' is undefined")
        if key == "etcd_peer_port":
            return "peer"
        raise KeyError(key)
    found, errors = ports.host_service_ports("a", GROUPS, lookup, role_defaults())
    assert errors == ["etcd_client_port on a: cannot be resolved ('undefined_var' is undefined)"]
    assert "etcd_peer_port" not in [i["variable"] for i in found]
    dummy, errors = ports.host_service_ports("a", GROUPS, {}, {})
    assert "dynamo_frontend_http_port on a: not set, and the dynamo_frontend role has no default for it" in errors


def test_worker_port_on_a_service_port_names_worker_key_and_service():
    found, dummy = ports.host_service_ports("a", GROUPS, {}, role_defaults())
    workers = [{"name": "w0", "system_port": 8000, "rpc_port": "2380"}, {"name": "w1", "system_port": 18081},
               "junk", {"system_port": 23790}]
    assert ports.worker_port_errors("a", workers, found) == [
        "dynamo_workers[w0].system_port on a: 8000 is the port the frontend's HTTP API listens on here "
        "(dynamo_frontend_http_port, the dynamo_frontend role's default); choose another port",
        "dynamo_workers[w0].rpc_port on a: 2380 is the port etcd (peer URL) listens on here "
        "(etcd_peer_port, the etcd role's default); choose another port",
        "dynamo_workers[3].system_port on a: 23790 is the port the local etcd client proxy listens on here "
        "(etcd_client_proxy_port, the etcd_client role's default); choose another port",
    ]
    assert ports.worker_port_errors("a", "not a list", found) == []


def test_bind_address_shared_by_two_hosts():
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.2", "d": None, "e": ""}
    assert ports.bind_address_errors("a", addresses) == []
    assert ports.bind_address_errors("d", addresses) == []
    assert ports.bind_address_errors("b", addresses) == [
        "kvshare_bind_address on b: 10.0.0.2 is also the address of c; every host needs its own (each service "
        "listens on and advertises it)"]


def test_validation_filter_refuses_the_frontends_default_port_for_a_worker():
    """A worker on the frontend host asking for the frontend's port, which the inventory leaves at the
    contract's default, is refused (the one check of it: the worker role's preflight has none)."""
    from ansible_collections.kvshare.dynamo.plugins.filter.internal import validation

    contract = service_defaults()
    port = contract["dynamo_frontend_http_port"]
    groups = {"dynamo_frontend": ["a"], "dynamo_workers": ["a", "b"]}
    hostvars = {"a": {}, "b": {}}
    workers = [{"name": "w", "system_port": port}]
    errors = validation.worker_service_port_errors(workers, "a", groups, hostvars, contract)
    assert any(str(port) in e and "dynamo_frontend_http_port" in e for e in errors), errors
    assert validation.worker_service_port_errors(workers, "b", groups, hostvars, contract) == []


def test_validation_filter_evaluates_the_state_agent_default_per_host():
    """The kvcr role runs the state agent on slot 0 by default: its port counts there, not on slot 1."""
    from ansible_collections.kvshare.dynamo.plugins.filter.internal import validation

    contract = service_defaults()
    groups = {"kvcr": ["a", "b"], "dynamo": ["a", "b"], "dynamo_workers": ["a", "b"]}
    hostvars = {"a": {"kvcr_cache_slot": 0}, "b": {"kvcr_cache_slot": 1}}
    workers = [{"name": "kvcr", "system_port": 9091}]
    errors = validation.worker_service_port_errors(workers, "a", groups, hostvars, contract)
    assert any("9091" in e and "kvcr_state_agent_system_port" in e for e in errors), errors
    assert validation.worker_service_port_errors(workers, "b", groups, hostvars, contract) == []


# --- clashes read from `ss -H -ltnp` output -----------------------------------------------------

SS = """\
LISTEN 0      4096      127.0.30.1:9850       0.0.0.0:*    users:(("maru-resource-m",pid=4242,fd=3))
LISTEN 0      100        127.0.0.1:5555       0.0.0.0:*    users:(("python3",pid=77,fd=5))
LISTEN 0      128          0.0.0.0:22         0.0.0.0:*    users:(("sshd",pid=1,fd=3))
LISTEN 0      128             [::]:6000          [::]:*    users:(("nc",pid=99,fd=3))
LISTEN 0      128   127.0.10.1:9850       0.0.0.0:*
"""


def _ss_clashes(ss_output, address, port, own_pids=None):
    """Clashes on ``ss -H -ltnp`` output: the listeners on ``port``, then those in the way."""
    return ports.clashes(ports.port_listeners(ss_output, port), address, port, own_pids)


def test_port_listeners_parses_ss():
    found = ports.port_listeners(SS, 9850)
    assert {"address": "127.0.30.1", "port": 9850, "process": "maru-resource-m", "pid": 4242} in found
    assert {"address": "127.0.10.1", "port": 9850, "process": "unknown", "pid": 0} in found


def test_port_clashes_same_address_other_process():
    clashes = _ss_clashes(SS, "127.0.30.1", 9850)
    assert [c["pid"] for c in clashes] == [4242]
    assert _ss_clashes(SS, "127.0.30.1", 9850, own_pids=["4242"]) == []


def test_port_clashes_other_address_is_fine_wildcards_are_not():
    assert _ss_clashes(SS, "127.0.30.1", 5555) == []
    assert [c["process"] for c in _ss_clashes(SS, "127.0.30.1", 6000)] == ["nc"]
    assert [c["process"] for c in _ss_clashes(SS, "127.0.30.1", 22)] == ["sshd"]
    assert len(_ss_clashes(SS, "0.0.0.0", 5555)) == 1


def test_port_clashes_unknown_owner_is_ours_only_when_our_service_runs():
    line = "LISTEN 0 100 127.0.30.1:5555 0.0.0.0:*\n"
    assert len(_ss_clashes(line, "127.0.30.1", 5555)) == 1
    assert len(_ss_clashes(line, "127.0.30.1", 5555, own_pids=["0"])) == 1
    assert _ss_clashes(line, "127.0.30.1", 5555, own_pids=["321"]) == []


def test_runs_state_agent_follows_the_host_else_the_contract_slot():
    """One rule (ports.runs_state_agent) for the firewall plan and validation, as the kvcr role's
    default decides it: the host's kvcr_state_agent_enabled, else its slot against the contract's."""
    contract = {"kvcr_state_agent_slot": 0}
    assert ports.runs_state_agent({"kvcr_cache_slot": 0}, contract) is True
    assert ports.runs_state_agent({"kvcr_cache_slot": "0"}, contract) is True
    assert ports.runs_state_agent({"kvcr_cache_slot": 1}, contract) is False
    assert ports.runs_state_agent({}, contract) is False
    assert ports.runs_state_agent({"kvcr_cache_slot": 1}, {"kvcr_state_agent_slot": 1}) is True
    assert ports.runs_state_agent({"kvcr_cache_slot": 0, "kvcr_state_agent_enabled": "false"}, contract) is False
    assert ports.runs_state_agent({"kvcr_cache_slot": 1, "kvcr_state_agent_enabled": True}, contract) is True

    def lookup(key):
        raise KeyError(key)
    assert ports.runs_state_agent(lookup, contract) is False


def test_the_kvcr_default_reads_the_contract_slot():
    """The kvcr role's default is the same rule over the same contract entry (no copy of its text
    elsewhere): rendered with ansible's templar for slots 0 and 1 and the contract's slot."""
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    with open(os.path.join(root, "roles", "kvcr", "defaults", "main.yml")) as handle:
        kvcr = yaml.safe_load(handle)
    default = kvcr["kvcr_state_agent_enabled"]
    with open(os.path.join(root, "roles", "kvshare", "defaults", "main.yml")) as handle:
        contract = yaml.safe_load(handle)["kvshare_service_defaults"]
    for agent_slot in (0, 1):
        agreed = dict(contract, kvcr_state_agent_slot=agent_slot)
        for slot in (0, 1, 2):
            variables = {"kvcr_cache_slot": slot, "kvshare_service_defaults": agreed}
            rendered = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(default))
            assert str(rendered).lower() == str(ports.runs_state_agent({"kvcr_cache_slot": slot}, agreed)).lower(), \
                (agent_slot, slot, rendered)
