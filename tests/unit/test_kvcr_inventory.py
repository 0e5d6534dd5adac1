# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""inventories/two_node_kvcr: the validation play passes, bad input fails in it, and the KVCR units render.

The inventory is copied to pytest's tmp dir and its two hosts are run with `connection: local`
(nothing is installed or started; the render play only writes templates into tmp). Real hosts are
not reachable here: this runs the same preflight tasks and templates the real hosts would run.
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
INVENTORY = os.path.join(REPO, "inventories", "two_node_kvcr")
ROLE = os.path.join(REPO, "roles", "kvcr")
BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="ansible-playbook not in the venv")


def inventory_copy(tmp_path, host_vars=None, group_vars=None):
    inv = tmp_path / "inv"
    shutil.copytree(INVENTORY, inv)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}))
    for host, changes in (host_vars or {}).items():
        path = inv / "host_vars" / ("%s.yml" % host)
        data = yaml.safe_load(path.read_text())
        data.update(changes)
        path.write_text(yaml.safe_dump(data))
    for group, changes in (group_vars or {}).items():
        path = inv / "group_vars" / ("%s.yml" % group)
        data = yaml.safe_load(path.read_text()) if path.exists() else {}
        data.update(changes)
        path.write_text(yaml.safe_dump(data))
    return inv


def playbook(tmp_path, inv, play, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default")
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", str(inv), str(play)] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_syntax_check_site():
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", INVENTORY, "site.yml", "--syntax-check"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_validation_passes(tmp_path):
    proc = playbook(tmp_path, inventory_copy(tmp_path), os.path.join(REPO, "playbooks", "validate.yml"),
                    "-e", "kvshare_validate_offline=true")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert re.search(r"gpu-a\s*:\s*ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", proc.stdout)
    assert re.search(r"gpu-b\s*:\s*ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", proc.stdout)


BAD = {
    "duplicate_slot": ({"host_vars": {"gpu-b": {"kvcr_cache_slot": 0}}},
                       "kvcr_cache_slot 0 on gpu-b is already used by gpu-a"),
    "out_of_range_slot": ({"host_vars": {"gpu-b": {"kvcr_cache_slot": 2}}},
                          "kvcr_cache_slot 2 on gpu-b is outside [0, 2)"),
    "both_on_one_host": ({"host_vars": {"gpu-b": {"ansible_host": "10.0.1.11", "kvshare_bind_address": "10.0.1.11"}}},
                         "KVCR hosts gpu-a, gpu-b are one machine (10.0.1.11)"),
    "missing_digest": ({"group_vars": {"kvcr": {"kvcr_compatibility_digest": ""}}},
                       "kvcr_compatibility_digest is required with kvcr_variant=memory_service"),
    "router_not_kv": ({"group_vars": {"dynamo_frontend": {"dynamo_frontend_router_mode": "direct"}}},
                      "dynamo_frontend_router_mode on gpu-a is 'direct'"),
    "loopback_advertise": ({"host_vars": {"gpu-b": {"kvshare_bind_address": "127.0.0.1"}}},
                           "kvcr_advertise_host: must not be loopback"),
    # RDMA only: a pinned HCA with another transport, and a HCA that is a network interface
    "tcp_transport": ({"host_vars": {"gpu-b": {"rdma_ucx_hca_overrides": {"0": "mlx5_1:1"}, "rdma_ucx_tls": "tcp,cuda"}}},
                      "GPU 0 on gpu-b: UCX_TLS=tcp,cuda, KVCR requires UCX_TLS=rc_x,cuda"),
    "pool_over_cap": ({"group_vars": {"kvcr": {"kvcr_service_pool_sizes_gb": [3]}}},
                      "more than kvcr_service_pool_limit_gb=3"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_fails_in_validation(tmp_path, case):
    changes, message = BAD[case]
    proc = playbook(tmp_path, inventory_copy(tmp_path, **changes), os.path.join(REPO, "playbooks", "validate.yml"),
                    "-e", "kvshare_validate_offline=true")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert message in out, out[-4000:]
    # validate.yml is read-only and the first play of site.yml (any_errors_fatal): nothing changed
    assert not re.search(r"changed=[1-9]", proc.stdout)


RENDER = """
- name: Render the KVCR units of both hosts into tmp (templates only)
  hosts: kvcr
  gather_facts: false
  vars:
    out: "{{ render_dir }}/{{ inventory_hostname }}"
  tasks:
    - name: Export the etcd client settings
      ansible.builtin.include_role:
        name: kvshare.dynamo.etcd_client
        tasks_from: preflight.yml
    - name: Validate and export (role defaults made visible to this play)
      ansible.builtin.include_role:
        name: kvshare.dynamo.kvcr
        tasks_from: preflight.yml
        public: true
    - name: Create the output directory
      ansible.builtin.file:
        path: "{{ out }}"
        state: directory
        mode: "0755"
      delegate_to: localhost
    - name: Render
      ansible.builtin.template:
        src: "%(role)s/templates/{{ item.src }}"
        dest: "{{ out }}/{{ item.dest }}"
        mode: "0644"
      loop:
        - {src: kvcr-service.service.j2, dest: kvcr-service.service}
        - {src: service.env.j2, dest: kvcr-service.env}
        - {src: kvcr-state-agent.service.j2, dest: kvcr-state-agent.service}
        - {src: state-agent.env.j2, dest: kvcr-state-agent.env}
        - {src: worker-kvcr.conf.j2, dest: 20-kvcr.conf}
        - {src: tmpfiles.conf.j2, dest: tmpfiles.conf}
        - {src: kvcr-health.service.j2, dest: kvcr-health.service}
        - {src: kvcr-health.timer.j2, dest: kvcr-health.timer}
      delegate_to: localhost
    - name: Dump the worker as its pool (kv_pool kvcr) configures it for the dynamo_worker role
      ansible.builtin.copy:
        content: "{{ {'workers': dynamo_workers | kvshare.dynamo.kv_pool_workers(inventory_hostname, hostvars, groups, kvshare_service_defaults)}
          | to_json }}"
        dest: "{{ out }}/worker.json"
        mode: "0644"
      delegate_to: localhost
""" % {"role": ROLE}


# The GPU-local HCA of each host, pinned (no hardware to discover it here).
PINNED = {"gpu-a": {"rdma_ucx_hca_overrides": {"0": "mlx5_0:1"}}, "gpu-b": {"rdma_ucx_hca_overrides": {"0": "mlx5_0:1"}}}


def render(tmp_path, host_vars=None, **changes):
    inv = inventory_copy(tmp_path, host_vars=dict(PINNED, **(host_vars or {})), **changes)
    play = tmp_path / "render.yml"
    play.write_text(RENDER)
    out = tmp_path / "out"
    # the preflight's host probe for RDMA verbs devices (hardware required): a stand-in directory
    uverbs = tmp_path / "infiniband"
    uverbs.mkdir()
    (uverbs / "uverbs0").write_text("")
    proc = playbook(tmp_path, inv, play, "-e", "render_dir=%s" % out,
                    "-e", "dynamo_runtime_venv=/opt/dynamo/venvs/current", "-e", "__kvcr_uverbs_dir=%s" % uverbs)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    return out


def read(out, host, name):
    return (out / host / name).read_text()


def _settings(worker):
    """What kv_pool: kvcr gave the worker: its connector, environment and arguments."""
    assert worker["kv_pool"] == {"type": "kvcr", "host": worker["kv_pool"]["host"]}
    return {"kv": worker["kv_transfer_config"], "env": worker["env"], "args": worker["extra_args"]}


def test_render_memory_service(tmp_path):
    out = render(tmp_path)
    svc = read(out, "gpu-a", "kvcr-service.service")
    assert svc.startswith("#\n# Ansible managed")
    assert ('ExecStart=/opt/dynamo/venvs/current/bin/python "-m" "kvcr.kvcr_service" "--socket-path" "/run/kvcr/memory.sock" '
            '"--pool-dir" "/dev/shm/kvcr" "--guard-count" "1" "--pool-sizes-gb" "2" '
            '"--compatibility-digest" "qwen3-0.6b-example-v1" "--log-level" "INFO"') in svc
    assert ('ExecStartPost=/usr/bin/python3 "/usr/local/libexec/kvshare/kvcr-ready" "unix" "/run/kvcr/memory.sock" '
            '"--timeout" "120"') in svc
    assert "RuntimeDirectory=kvcr\n" in svc and "Restart=on-failure" in svc and "LimitMEMLOCK=infinity" in svc
    # RDMA only: the GPU's UCX file is required and checked before the service starts
    assert "EnvironmentFile=/etc/kvshare/ucx/gpu0.env\n" in svc
    assert ('ExecStartPre=/usr/bin/python3 "/usr/local/libexec/kvshare/kvcr-ready" "env" "--label" '
            '"kvcr-service (GPU 0 on gpu-a)" "UCX_NET_DEVICES" "UCX_TLS=rc_x,cuda"') in svc
    assert "MemoryMax=4G" in svc
    # the service depends on nothing of the worker's
    assert "dynamo-worker" not in "\n".join(line for line in svc.splitlines() if not line.startswith("#"))
    assert "PYTHONHASHSEED=0" in read(out, "gpu-a", "kvcr-service.env")
    assert "UCX_PROTO_INFO=y" in read(out, "gpu-b", "kvcr-service.env")

    bond_a, bond_b = read(out, "gpu-a", "20-kvcr.conf"), read(out, "gpu-b", "20-kvcr.conf")
    for bond in (bond_a, bond_b):
        assert "BindsTo=kvcr-service.service\nAfter=kvcr-service.service" in bond
        assert '"unix" "/run/kvcr/memory.sock" "--timeout" "60"' in bond
        assert "Requires=" not in bond
        assert "EnvironmentFile=/etc/kvshare/ucx/gpu0.env\n" in bond and '"UCX_TLS=rc_x,cuda"' in bond
    assert '"dynamo-worker@kvcr (GPU 0 on gpu-b)"' in bond_b
    # the state agent is on the slot-0 host only; its restart restarts that worker (PartOf=)
    assert "Wants=kvcr-state-agent.service\nAfter=kvcr-state-agent.service\nPartOf=kvcr-state-agent.service" in bond_a
    assert "kvcr-state-agent" not in bond_b and "PartOf=" not in bond_b
    assert '"http" "http://10.0.1.11:9091/live"' in bond_a

    agent = read(out, "gpu-a", "kvcr-state-agent.service")
    assert 'ExecStart=/opt/dynamo/venvs/current/bin/python "-m" "dynamo.kv_state_agent" "--max-slots" "2"' in agent
    assert "UnsetEnvironment=NATS_SERVER DYN_CONNECTOR DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS" in agent
    assert "EnvironmentFile=/etc/kvshare/etcd/client.env" in agent
    assert "After=network-online.target etcd.service etcd-client-proxy.service\n" in agent
    # health: every 5 s; the service socket everywhere, /live where the agent runs
    health_a, health_b = read(out, "gpu-a", "kvcr-health.service"), read(out, "gpu-b", "kvcr-health.service")
    assert ('"watch" "--unit" "kvcr-service.service" "--state-dir" "/run/kvcr-health" "--failures" "3" "--timeout" "4" '
            '"unix" "/run/kvcr/memory.sock"') in health_a
    assert '"--unit" "kvcr-state-agent.service"' in health_a and '"http" "http://10.0.1.11:9091/live"' in health_a
    assert "kvcr-state-agent" not in health_b and "Type=oneshot" in health_b
    assert "OnUnitActiveSec=5s" in read(out, "gpu-a", "kvcr-health.timer")
    env = read(out, "gpu-a", "kvcr-state-agent.env")
    for line in ("DYN_SYSTEM_PORT=9091", "DYN_SYSTEM_HOST=10.0.1.11", "DYN_DISCOVERY_BACKEND=etcd",
                 "DYN_COMPONENT=kv_state_agent", "DYN_HEALTH_CHECK_ENABLED=false", "DYN_NAMESPACE=dynamo"):
        assert line + "\n" in env
    assert "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS" not in env.split("\n", 4)[-1]
    assert "d /dev/shm/kvcr 0700 dynamo dynamo -" in read(out, "gpu-a", "tmpfiles.conf")

    wa, wb = (_settings(json.loads(read(out, host, "worker.json"))["workers"][0]) for host in ("gpu-a", "gpu-b"))
    owner_a = wa["kv"]["kv_connector_extra_config"]["dynamo_state_agent"]["cache_owner_ids"]["0"]
    owner_b = wb["kv"]["kv_connector_extra_config"]["dynamo_state_agent"]["cache_owner_ids"]["0"]
    assert owner_a.endswith("/" + "0" * 32) and owner_b.endswith("/" + "0" * 31 + "1")
    assert wb["env"] == {"KVCR_CACHE_SLOT": "1", "KVCR_CACHE_SLOT_COUNT": "2", "PYTHONHASHSEED": "0", "UCX_PROTO_INFO": "y"}
    assert wa["env"]["PYTHONHASHSEED"] == wb["env"]["PYTHONHASHSEED"]
    tier = wb["kv"]["kv_connector_extra_config"]["secondary_tiers"][0]
    assert tier["kvcr_service_socket_path"] == "/run/kvcr/memory.sock" and tier["control_advertise_host"] == "10.0.1.12"
    # the pool's extra_args first, then the worker's own
    assert wb["args"] == ["--kv-events-config",
                          '{"enable_kv_cache_events":true,"endpoint":"tcp://*:23080","publisher":"zmq","topic":"kv-events"}',
                          "--block-size", "64", "--enforce-eager"]


def test_render_process_local(tmp_path):
    out = render(tmp_path, group_vars={"kvcr": {"kvcr_variant": "process_local", "kvcr_compatibility_digest": ""}})
    bond_a, bond_b = read(out, "gpu-a", "20-kvcr.conf"), read(out, "gpu-b", "20-kvcr.conf")
    assert "BindsTo" not in bond_a and "memory.sock" not in bond_a
    assert "Wants=kvcr-state-agent.service\nAfter=kvcr-state-agent.service" in bond_a
    # no socket or agent gate on the slot-1 host; the RDMA-only check holds in both variants
    assert '"unix"' not in bond_b and '"http"' not in bond_b and '"env"' in bond_b
    tier = _settings(json.loads(read(out, "gpu-a", "worker.json"))["workers"][0])["kv"]["kv_connector_extra_config"][
        "secondary_tiers"][0]
    assert tier["secondary_g2_slots"] == 1024 and "kvcr_service_socket_path" not in tier


WITHOUT_PREFLIGHT = """
- name: Read the worker lists without the kvcr preflight (as status.yml and verify.yml do)
  hosts: gpu-a
  gather_facts: false
  roles:
    - role: kvshare.dynamo.kvshare
  tasks:
    - name: Dump every KVCR host's worker list, read through hostvars, as the workers' pool configures it
      ansible.builtin.copy:
        content: "{{ {'gpu-a': hostvars['gpu-a'].dynamo_workers | kvshare.dynamo.kv_pool_workers('gpu-a', hostvars, groups, kvshare_service_defaults),
          'gpu-b': hostvars['gpu-b'].dynamo_workers | kvshare.dynamo.kv_pool_workers('gpu-b', hostvars, groups, kvshare_service_defaults)} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      delegate_to: localhost
"""


def test_worker_list_templates_without_the_preflight(tmp_path):
    # status.yml / verify.yml load no kvcr role: the worker's kv_pool resolves from the host's variables
    play = tmp_path / "read.yml"
    play.write_text(WITHOUT_PREFLIGHT)
    out = tmp_path / "workers.json"
    proc = playbook(tmp_path, inventory_copy(tmp_path), play, "-e", "out=%s" % out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    workers = json.loads(out.read_text())
    wb = workers["gpu-b"][0]
    tier = wb["kv_transfer_config"]["kv_connector_extra_config"]["secondary_tiers"][0]
    assert tier["control_advertise_host"] == "10.0.1.12" and tier["compatibility_digest"] == "qwen3-0.6b-example-v1"
    assert wb["env"]["KVCR_CACHE_SLOT"] == "1" and wb["extra_args"][0] == "--kv-events-config"
    owner_a = workers["gpu-a"][0]["kv_transfer_config"]["kv_connector_extra_config"]["dynamo_state_agent"]["cache_owner_ids"]["0"]
    assert owner_a.endswith("/" + "0" * 32)
