# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The firewall plan of every host of the real inventories (sandbox, single_node, two_node_kvcr).

1. The inventories are loaded with Ansible's own inventory and variable managers and fed through
   the kvshare.dynamo.internal.firewall_plan filter exactly as the role calls it (hostvars templated on
   access; role defaults read from roles/*/defaults/main.yml). The expected port sets are spelled
   out per host.
2. playbooks/validate.yml, offline, with firewall_enabled on every host of each inventory: the
   firewall preflight runs, passes, and changes nothing.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.kvshare.dynamo.plugins.filter.internal import firewall as ffw
from ansible_collections.kvshare.dynamo.plugins.module_utils import firewall as fw
from lib.sandbox import service_defaults

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
with open(os.path.join(REPO, "roles", "firewall", "defaults", "main.yml")) as _fh:
    FIREWALL_DEFAULTS = yaml.safe_load(_fh)
CONTRACT = service_defaults()

ANY = ["0.0.0.0/0", "::/0"]
SB = ["127.0.10.1", "127.0.10.2", "127.0.10.3"]
DYN = "tcp/32768-60999"
PROXY = "tcp/23790"   # the local etcd client proxy of every Dynamo host: loopback only (no source)


@pytest.fixture(autouse=True)
def no_fact_cache(monkeypatch):
    """No facts from the checkout's cache (.ansible/facts of a sandbox run): the inventories' own variables only.

    ansible.cfg names the collection's cache plugin, which this process (no collection loader) cannot load.
    """
    from ansible import constants
    monkeypatch.setattr(constants, "CACHE_PLUGIN", "memory")


def load(name, host_vars=None):
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[os.path.join(REPO, "inventories", name)])
    manager = VariableManager(loader=loader, inventory=inventory)
    for host, values in (host_vars or {}).items():
        for key, value in values.items():
            manager.set_host_variable(host, key, value)
    return HostVars(inventory=inventory, variable_manager=manager, loader=loader), inventory.get_groups_dict()


def options(hostvars, host, **overrides):
    """The role's __firewall_options for `host` from the role defaults (firewall_ssh_port follows ansible_port)."""
    assert FIREWALL_DEFAULTS["firewall_ssh_port"] == "{{ ansible_port | default(22) }}"
    opts = {key[len("firewall_"):]: value for key, value in FIREWALL_DEFAULTS.items()
            if key[len("firewall_"):] in ("policy", "table", "loopback_accept", "ssh_sources", "frontend_sources",
                                          "metrics_sources", "dynamic_port_range", "extra_ports")}
    opts["ssh_port"] = hostvars[host]["ansible_port"] if "ansible_port" in hostvars[host] else 22
    opts.update(overrides)
    return opts


def tables(name, host_vars=None, **overrides):
    hostvars, groups = load(name, host_vars)
    out = {}
    for host in sorted(groups["all"]):
        plan = ffw.firewall_plan(hostvars, host, groups, options(hostvars, host, **overrides), CONTRACT)
        assert plan["errors"] == [], plan["errors"]
        out[host] = fw.port_table(plan)
    return out


def test_sandbox():
    assert tables("sandbox") == {
        # etcd member + frontend
        "sb1": {"tcp/2222": ANY, "tcp/2379": SB, "tcp/2380": SB, "tcp/8000": SB, DYN: SB, PROXY: []},
        # etcd member, two vLLM workers, the Maru pool (clients: the worker hosts sb2, sb3)
        "sb2": {"tcp/2222": ANY, "tcp/2379": SB, "tcp/2380": SB,
                "tcp/18081": SB, "tcp/19081": SB, "tcp/18082": SB, "tcp/19082": SB, DYN: SB, PROXY: [],
                "tcp/9850": SB[1:], "tcp/5555": SB[1:]},
        # etcd member, two mockers and a vLLM worker of sb2's Maru pool
        "sb3": {"tcp/2222": ANY, "tcp/2379": SB, "tcp/2380": SB,
                "tcp/18081": SB, "tcp/19081": SB, "tcp/18082": SB, "tcp/19082": SB,
                "tcp/18083": SB, "tcp/19083": SB, DYN: SB, PROXY: []},
    }


def test_single_node():
    me = ["192.0.2.11"]
    assert tables("single_node") == {
        # the Maru services listen on loopback (maru_pool_bind_address default): no rule admits them
        "gpu-node-1": {"tcp/22": ANY, "tcp/2379": me, "tcp/2380": me, "tcp/8000": me,
                       "tcp/18081": me, "tcp/19081": me, "tcp/18082": me, "tcp/19082": me, DYN: me, PROXY: [],
                       "tcp/9850": [], "tcp/5555": []},
    }


def test_two_node_kvcr():
    both = ["10.0.1.11", "10.0.1.12"]
    assert tables("two_node_kvcr") == {
        # etcd (single member), frontend, KVCR worker slot 0 + the KV state agent
        "gpu-a": {"tcp/22": ANY, "tcp/2379": both, "tcp/2380": ["10.0.1.11"], "tcp/8000": both,
                  "tcp/9090": both, "tcp/9190": both, DYN: both, PROXY: [],
                  "tcp/23280": both, "tcp/9091": both, "tcp/23080": ["10.0.1.11"]},
        # KVCR worker slot 1 (no state agent); the KV events port of both is open to the agent's host only
        "gpu-b": {"tcp/22": ANY, "tcp/9090": both, "tcp/9190": both, DYN: both, PROXY: [], "tcp/23280": both,
                  "tcp/23080": ["10.0.1.11"]},
    }


def test_operator_sources_on_the_sandbox():
    out = tables("sandbox", frontend_sources=["192.0.2.0/24"], metrics_sources=["198.51.100.7"],
                 ssh_sources=["10.20.0.0/16"],
                 extra_ports=[{"port": 9100, "sources": ["198.51.100.7"], "comment": "node exporter"}])
    assert out["sb1"]["tcp/8000"] == SB + ["192.0.2.0/24", "198.51.100.7"]
    assert out["sb1"]["tcp/2379"] == SB + ["198.51.100.7"]
    assert out["sb1"]["tcp/2380"] == SB
    assert out["sb2"]["tcp/18081"] == SB + ["198.51.100.7"]      # system port: metrics
    assert out["sb2"]["tcp/19081"] == SB                         # request plane: Dynamo hosts only
    assert out["sb3"]["tcp/2222"] == ["10.20.0.0/16"]
    assert all(t["tcp/9100"] == ["198.51.100.7"] for t in out.values())


def test_inventory_overrides_on_the_kvcr_inventory():
    out = tables("two_node_kvcr", host_vars={
        "gpu-b": {"rdma_ucx_bw_test": True, "rdma_ucx_bw_server": "gpu-a", "kvcr_state_agent_enabled": True},
        "gpu-a": {"kvcr_control_port": 24280, "dynamo_frontend_http_port": 8080}})
    assert out["gpu-a"]["tcp/18515"] == ["10.0.1.12"]        # ib_write_bw server, client gpu-b
    assert "tcp/18515" not in out["gpu-b"]
    assert out["gpu-b"]["tcp/9091"] == ["10.0.1.11", "10.0.1.12"]
    # two state agents: each reads both workers' KV events
    assert out["gpu-a"]["tcp/23080"] == out["gpu-b"]["tcp/23080"] == ["10.0.1.11", "10.0.1.12"]
    assert "tcp/24280" in out["gpu-a"] and "tcp/23280" not in out["gpu-a"] and "tcp/23280" in out["gpu-b"]
    assert "tcp/8080" in out["gpu-a"] and "tcp/8000" not in out["gpu-a"]
    # without the local etcd client proxy there is no proxy port to keep local
    out = tables("two_node_kvcr", host_vars={"gpu-b": {"etcd_client_proxy_enabled": False}})
    assert PROXY in out["gpu-a"] and PROXY not in out["gpu-b"]


# --- the preflight in validate.yml ------------------------------------------------------------

needs_ansible = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                   reason="ansible-playbook not in the venv")


@needs_ansible
@pytest.mark.parametrize("name", ["sandbox", "single_node", "two_node_kvcr"])
def test_offline_validation_with_the_firewall_enabled(tmp_path, name):
    inv = tmp_path / "inv"
    shutil.copytree(os.path.join(REPO, "inventories", name), inv)
    extra = tmp_path / "firewall.yml"
    extra.write_text(yaml.safe_dump({"firewall_enabled": True, "firewall_frontend_sources": ["192.0.2.0/24"]}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default")
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inv), "playbooks/validate.yml",
                           "-e", "kvshare_validate_offline=true", "-e", "@%s" % extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:] + proc.stderr[-2000:]
    assert "TASK [kvshare.dynamo.firewall : Check the ports and sources of this host's table]" in out
    assert "skipped offline: firewall on" in out
    recaps = re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)
    assert recaps and all(r[1:] == ("0", "0", "0") for r in recaps), recaps
