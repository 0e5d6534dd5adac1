"""Unit tests for plugins/module_utils/ports.py (shared listening-port clash check)."""
import os
import socket

from ansible_collections.kvshare.dynamo.plugins.module_utils import ports

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
