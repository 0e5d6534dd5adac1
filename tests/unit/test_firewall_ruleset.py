# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The rendered kvshare nftables table, loaded into a real kernel, in a throwaway network namespace.

1. Render: the role's own preflight and configure tasks run for sandbox host sb1 (etcd member and
   frontend, 127.0.10.1) with `connection: local`, every path in pytest's tmp dir, inside
   `unshare -n` (the template's `nft -c` validation and the load handler touch only that
   namespace). Two variants: firewall_policy drop and accept; both with
   firewall_loopback_accept=localhost, so only 127.0.0.1 is accepted blindly on lo and the other
   loopback addresses (the sandbox hosts 127.0.10.N, a frontend client net 127.0.20.0/24, a
   stranger 127.0.99.1) are filtered like real addresses; with the default (`interface`) every
   probe here would pass and the test could not fail.
2. Load and probe (tests/unit/firewall_netns.py in a second fresh namespace): TCP listeners on
   127.0.10.1, connections from chosen loopback sources, 1 s timeouts. Phases: no table (every
   probe open: any later "dropped" is the table's doing), drop table loaded twice (a reload
   replaces the table, no duplicate rules), accept variant, boot path (`nft -f nftables.conf`
   with Debian's `flush ruleset` preamble and the role's include block), then the role's
   firewall_state=absent tasks (table, include block and file gone; everything open again).

3. KVCR (the inventories/two_node_kvcr layout on loopback addresses of the namespace: gpu-a
   127.0.30.1 runs KVCR slot 0 and the KV state agent, gpu-b 127.0.30.2 KVCR slot 1, plus edge
   127.0.30.3, a Dynamo worker host that is no KVCR host): the tables of gpu-b and gpu-a, loaded in
   turn. The state agent connects to every KVCR worker's raw KV-event endpoint
   (kvcr_kv_events_port, 23080): gpu-b admits gpu-a there and drops edge and a stranger; gpu-a
   admits its own agent and drops gpu-b (no agent) and edge.

Skipped, with the reason, where unshare/nft/ip are missing or the kernel refuses nf_tables in a
new namespace. Never sends anything outside the namespaces' loopback.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "firewall_netns.py")
UNSHARE = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]

# Debian 12's /etc/nftables.conf as the nftables package installs it.
DEBIAN_NFTABLES_CONF = """#!/usr/sbin/nft -f

flush ruleset

table inet filter {
\tchain input {
\t\ttype filter hook input priority filter;
\t}
\tchain forward {
\t\ttype filter hook forward priority filter;
\t}
\tchain output {
\t\ttype filter hook output priority filter;
\t}
}
"""

SB1, SB2, SB3 = "127.0.10.1", "127.0.10.2", "127.0.10.3"
CLIENT, STRANGER, LOCAL = "127.0.20.7", "127.0.99.1", "127.0.0.1"
# (source, port on sb1) -> expected with the drop table, with the accept table
PROBES = {
    (SB2, 2379): ("open", "open"),            # etcd client port from a service host
    (SB3, 2380): ("open", "open"),            # etcd peer port from a member
    (STRANGER, 2379): ("dropped", "dropped"),  # etcd from outside the inventory
    (CLIENT, 8000): ("open", "open"),         # frontend from firewall_frontend_sources
    (CLIENT, 2379): ("dropped", "dropped"),   # ... but not etcd
    (SB2, 9999): ("dropped", "open"),         # a port nothing opened (accept: not the stack's, passes)
    (STRANGER, 9999): ("dropped", "open"),
    (LOCAL, 9999): ("open", "open"),          # 127.0.0.1 on lo: always
    (STRANGER, 2222): ("open", "open"),       # SSH (firewall_ssh_port = ansible_port) from anywhere
    (SB3, 40000): ("open", "open"),           # Dynamo's ephemeral ports between Dynamo hosts
    (STRANGER, 40000): ("dropped", "dropped"),
    (SB2, 23790): ("dropped", "dropped"),     # the local etcd client proxy port: loopback only, even with accept
    (LOCAL, 23790): ("open", "open"),
}
LISTENERS = sorted({port for dummy, port in PROBES})

RENDER = """
- name: Render the firewall of sb1 (connection local, every path in tmp)
  hosts: sb1
  gather_facts: false
  vars:
    firewall_enabled: true
    firewall_loopback_accept: localhost
    firewall_frontend_sources: [127.0.20.0/24]
    __firewall_ruleset_path: "{{ out }}/drop/kvshare.nft"
    firewall_nftables_conf: "{{ out }}/drop/nftables.conf"
  tasks:
    - name: Validate (the role's preflight)
      ansible.builtin.include_role:
        name: kvshare.dynamo.firewall
        tasks_from: preflight
    - name: Render the drop table and include it from the Debian nftables.conf
      ansible.builtin.include_role:
        name: kvshare.dynamo.firewall
        tasks_from: configure
    - name: Render the accept variant (its nftables.conf does not exist yet)
      ansible.builtin.include_role:
        name: kvshare.dynamo.firewall
        tasks_from: configure
      vars:
        firewall_policy: accept
        __firewall_ruleset_path: "{{ out }}/accept/kvshare.nft"
        firewall_nftables_conf: "{{ out }}/accept/nftables.conf"
"""

ABSENT = """
- name: Remove the firewall of sb1 (firewall_state=absent, connection local, paths in tmp)
  hosts: sb1
  gather_facts: false
  vars:
    firewall_state: absent
    __firewall_ruleset_path: "{{ out }}/drop/kvshare.nft"
    firewall_nftables_conf: "{{ out }}/drop/nftables.conf"
  roles:
    - role: kvshare.dynamo.firewall
"""


def _usable():
    for tool in ("unshare", "nft", "ip"):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/%s" % tool):
            return "%s is not installed" % tool
    if not os.path.exists("/usr/sbin/nft"):
        return "nft is not at /usr/sbin/nft (the role's path)"
    try:
        proc = subprocess.run(UNSHARE + ["/usr/sbin/nft", "list", "ruleset"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "unshare failed: %s" % exc
    if proc.returncode != 0:
        return "nftables unusable in a new network namespace (%s): %s" % (" ".join(UNSHARE), proc.stderr.strip())
    if not os.path.exists(os.path.join(BIN, "ansible-playbook")):
        return "ansible-playbook not in the venv"
    return ""


REASON = _usable()
pytestmark = pytest.mark.skipif(bool(REASON), reason=REASON or "usable")


def _env(tmp_path):
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
                ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default", ANSIBLE_RETRY_FILES_ENABLED="0")


def _inventory(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(os.path.join(REPO, "inventories", "sandbox"), inv)
    path = inv / "group_vars" / "all.yml"
    data = yaml.safe_load(path.read_text())
    data.update(ansible_connection="local", ansible_python_interpreter=sys.executable, ansible_become=False)
    path.write_text(yaml.safe_dump(data))
    # group_vars/sandbox.yml sets ansible_python_interpreter for the real containers: local here.
    path = inv / "group_vars" / "sandbox.yml"
    data = yaml.safe_load(path.read_text())
    data.pop("ansible_python_interpreter", None)
    path.write_text(yaml.safe_dump(data))
    return inv


def _render(tmp_path, text, inv, out):
    """ansible-playbook of the play TEXT on INV (inside the test's own namespaces), files into OUT."""
    play = tmp_path / "render.yml"
    play.write_text(text)
    proc = subprocess.run(UNSHARE + [os.path.join(BIN, "ansible-playbook"), "-i", str(inv), str(play),
                                     "-e", "out=%s" % out], cwd=REPO, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("firewall")
    out = tmp_path / "out"
    (out / "drop").mkdir(parents=True)
    (out / "drop" / "nftables.conf").write_text(DEBIAN_NFTABLES_CONF)
    inv = _inventory(tmp_path)
    proc = _render(tmp_path, RENDER, inv, out)
    return {"tmp": tmp_path, "out": out, "inv": inv, "log": proc.stdout}


def test_rendered_files(rendered):
    out = rendered["out"]
    drop = (out / "drop" / "kvshare.nft").read_text()
    accept = (out / "accept" / "kvshare.nft").read_text()
    assert drop.startswith("#\n# Ansible managed")
    statements = [line for text in (drop, accept) for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in statements if "flush" in line]
    assert "table inet kvshare\ndelete table inet kvshare\n" in drop
    assert "policy drop;" in drop and "policy accept;" in accept
    assert 'iif "lo" ip saddr 127.0.0.1 accept' in drop and 'iif "lo" accept' not in drop
    assert "tcp dport 2222 accept" in drop            # SSH: firewall_ssh_port follows ansible_port (2222)
    assert re.search(r'ip saddr \{ 127\.0\.10\.1, 127\.0\.10\.2, 127\.0\.10\.3, 127\.0\.20\.0/24 \} '
                     r'tcp dport 8000 accept comment "dynamo_frontend_http_port"', drop)
    assert 'tcp dport { 2222, 2379-2380, 8000, 23790, 32768-60999 } drop' in accept
    assert 'tcp dport 23790 drop comment "etcd_client_proxy_port: local only"' in drop
    # the include block went after Debian's flush ruleset; a fresh conf was created for the accept variant
    conf = (out / "drop" / "nftables.conf").read_text()
    assert conf.startswith(DEBIAN_NFTABLES_CONF)
    assert conf.index("flush ruleset") < conf.index('include "%s/drop/kvshare.nft"' % out)
    assert "# BEGIN kvshare.dynamo firewall (table inet kvshare)" in conf
    assert (out / "accept" / "nftables.conf").read_text().startswith("#!/usr/sbin/nft -f\n")


@pytest.fixture(scope="module")
def probed(rendered):
    out, tmp_path = rendered["out"], rendered["tmp"]
    absent = tmp_path / "absent.yml"
    absent.write_text(ABSENT)
    probes = [[src, SB1, port] for src, port in PROBES]
    nft = "/usr/sbin/nft"
    drop_file, accept_file = str(out / "drop" / "kvshare.nft"), str(out / "accept" / "kvshare.nft")
    spec = {
        "listeners": [[SB1, port] for port in LISTENERS],
        "timeout": 1.0,
        "phases": [
            {"name": "none", "probes": probes},
            {"name": "drop", "commands": [[nft, "-f", drop_file], [nft, "list", "table", "inet", "kvshare"],
                                          [nft, "-f", drop_file], [nft, "list", "table", "inet", "kvshare"]],
             "probes": probes},
            {"name": "accept", "commands": [[nft, "-f", accept_file], [nft, "list", "tables"]], "probes": probes},
            {"name": "boot", "commands": [[nft, "flush", "ruleset"], [nft, "-f", str(out / "drop" / "nftables.conf")],
                                          [nft, "list", "tables"]], "probes": probes},
            {"name": "absent", "commands": [[os.path.join(BIN, "ansible-playbook"), "-i", str(rendered["inv"]),
                                             str(absent), "-e", "out=%s" % out],
                                            [nft, "list", "tables"]], "probes": probes},
        ],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(UNSHARE + [sys.executable, HELPER, str(path)], cwd=REPO, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout)


def _expected(column):
    return {"%s>%s:%d" % (src, SB1, port): want[column] for (src, port), want in PROBES.items()}


def _commands_ok(phase):
    for cmd in phase["commands"]:
        assert cmd["rc"] == 0, cmd


def test_without_a_table_every_probe_connects(probed):
    assert probed["none"]["probes"] == {key: "open" for key in _expected(0)}


def test_drop_table(probed):
    phase = probed["drop"]
    _commands_ok(phase)
    first, second = phase["commands"][1]["stdout"], phase["commands"][3]["stdout"]
    assert first == second and first.count("accept comment") >= 8   # the reload replaced, not appended
    assert phase["probes"] == _expected(0)


def test_accept_table(probed):
    phase = probed["accept"]
    _commands_ok(phase)
    assert phase["commands"][1]["stdout"].split() == ["table", "inet", "kvshare"]
    assert phase["probes"] == _expected(1)


def test_boot_path_through_nftables_conf(probed):
    phase = probed["boot"]
    _commands_ok(phase)
    assert phase["commands"][2]["stdout"].split() == ["table", "inet", "filter", "table", "inet", "kvshare"]
    assert phase["probes"] == _expected(0)


def test_absent_removes_table_include_and_file(probed, rendered):
    phase = probed["absent"]
    _commands_ok(phase)
    log = phase["commands"][0]["stdout"]
    assert re.search(r"sb1\s*:\s*ok=\d+\s+changed=3\s+unreachable=0\s+failed=0", log), log[-3000:]
    assert phase["commands"][1]["stdout"].split() == ["table", "inet", "filter"]
    assert phase["probes"] == {key: "open" for key in _expected(0)}
    out = rendered["out"]
    assert (out / "drop" / "nftables.conf").read_text() == DEBIAN_NFTABLES_CONF
    assert not (out / "drop" / "kvshare.nft").exists()


# --- KVCR: the raw KV-event port between the KVCR hosts -----------------------------------------

GPU_A, GPU_B, EDGE = "127.0.30.1", "127.0.30.2", "127.0.30.3"
# phase (whose table is loaded) -> {(source, destination, port): expected}
KVCR_PROBES = {
    "kvcr-b": {
        (GPU_A, GPU_B, 23080): "open",      # the state agent on gpu-a reads gpu-b's KV events
        (EDGE, GPU_B, 23080): "dropped",    # a Dynamo host that is no KVCR host
        (STRANGER, GPU_B, 23080): "dropped",
        (EDGE, GPU_B, 9190): "open",        # ... while edge may reach the worker's request plane
        (GPU_A, GPU_B, 23280): "open",      # KVCR control channel between the KVCR hosts
        (EDGE, GPU_B, 23280): "dropped",
    },
    "kvcr-a": {
        (GPU_A, GPU_A, 23080): "open",      # the agent reads its own host's worker on the advertised address
        (GPU_B, GPU_A, 23080): "dropped",   # gpu-b runs no state agent
        (EDGE, GPU_A, 23080): "dropped",
    },
}
KVCR_LISTENERS = sorted({(dst, port) for probes in KVCR_PROBES.values() for dummy, dst, port in probes})

RENDER_KVCR = """
- name: Render the firewall of the two KVCR hosts (connection local, every path in tmp)
  hosts: gpu-a:gpu-b
  gather_facts: false
  vars:
    firewall_enabled: true
    firewall_loopback_accept: localhost
    __firewall_ruleset_path: "{{ out }}/{{ inventory_hostname }}/kvshare.nft"
    firewall_nftables_conf: "{{ out }}/{{ inventory_hostname }}/nftables.conf"
  tasks:
    - name: Validate (the role's preflight)
      ansible.builtin.include_role:
        name: kvshare.dynamo.firewall
        tasks_from: preflight
    - name: Render the drop table
      ansible.builtin.include_role:
        name: kvshare.dynamo.firewall
        tasks_from: configure
"""


def _kvcr_inventory(tmp_path):
    """inventories/two_node_kvcr with loopback addresses, a local connection and one more host, edge: a
    Dynamo worker host outside the kvcr group."""
    inv = tmp_path / "inv"
    shutil.copytree(os.path.join(REPO, "inventories", "two_node_kvcr"), inv)
    for host, address in (("gpu-a", GPU_A), ("gpu-b", GPU_B), ("edge", EDGE)):
        path = inv / "host_vars" / ("%s.yml" % host)
        data = yaml.safe_load(path.read_text()) if path.exists() else {}
        data.pop("ansible_host", None)
        data["kvshare_bind_address"] = address
        path.write_text(yaml.safe_dump(data))
    (inv / "host_vars" / "edge.yml").write_text(yaml.safe_dump({"kvshare_bind_address": EDGE, "dynamo_workers": []}))
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(
        {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}))
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["dynamo"]["children"]["dynamo_workers"]["hosts"]["edge"] = None
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return inv


@pytest.fixture(scope="module")
def kvcr_probed(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("firewall_kvcr")
    out = tmp_path / "out"
    for host in ("gpu-a", "gpu-b"):
        (out / host).mkdir(parents=True)
    inv = _kvcr_inventory(tmp_path)
    proc = _render(tmp_path, RENDER_KVCR, inv, out)
    nft = "/usr/sbin/nft"
    phases = [{"name": "kvcr-none", "probes": [list(k) for probes in KVCR_PROBES.values() for k in probes]}]
    for name, host in (("kvcr-b", "gpu-b"), ("kvcr-a", "gpu-a")):
        phases.append({"name": name, "commands": [[nft, "-f", str(out / host / "kvshare.nft")]],
                       "probes": [list(k) for k in KVCR_PROBES[name]]})
    spec = {"listeners": [list(item) for item in KVCR_LISTENERS], "timeout": 1.0, "phases": phases}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(UNSHARE + [sys.executable, HELPER, str(path)], cwd=REPO, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {"out": out, "report": json.loads(proc.stdout)}


def test_kvcr_rendered_events_rule(kvcr_probed):
    out = kvcr_probed["out"]
    for host in ("gpu-a", "gpu-b"):
        text = (out / host / "kvshare.nft").read_text()
        assert 'ip saddr { 127.0.30.1 } tcp dport 23080 accept comment "kvcr_kv_events_port"' in text, text
        assert "tcp dport 23080 drop" not in text


def test_kvcr_events_port_between_kvcr_hosts_only(kvcr_probed):
    report = kvcr_probed["report"]
    assert set(report["kvcr-none"]["probes"].values()) == {"open"}   # without a table everything connects
    for name, probes in KVCR_PROBES.items():
        _commands_ok(report[name])
        assert report[name]["probes"] == {"%s>%s:%d" % key: want for key, want in probes.items()}, name
