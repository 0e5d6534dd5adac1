# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Offline rendering of what the roles template, shared by the render tests.

One ``ansible-playbook`` run per inventory renders, for every host, every unit, drop-in, environment
file and config the roles write (as ``site.yml`` would, with ``connection: local`` into a directory):
each role's preflight runs in ``playbooks/validate.yml``'s order with ``kvshare_validate_offline``
(no host is probed; role defaults and exports made visible), then each role's templates are written
to ``<out>/<host>/<absolute destination path>``. Nothing is installed or started. Values that only a
live run produces are fixed (``RUNTIME_FIXED``).

Used by tests/unit/test_render_golden.py (byte-for-byte goldens) and
tests/unit/test_sandbox_matches_single_node.py (sandbox vs single_node).
"""
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
ANSIBLE_PLAYBOOK = os.path.join(BIN, "ansible-playbook")
INVENTORIES = ("sandbox", "single_node", "two_node_kvcr")


def templates(role):
    return os.path.join(REPO, "roles", role, "templates")


# What a live run decides and the render cannot know: fixed here, so that the goldens are stable.
RUNTIME_FIXED = {
    "__etcd_cluster_state": "new",
}

# Render-only inputs for hosts whose real values come from hardware probes: a fixed topology for an
# rdma_ucx host the inventory gives none (two_node_kvcr's GPU hosts), and a fixed UCX version.
RDMA_UCX_RENDER_TOPOLOGY = {
    "gpus": [{"index": 0, "uuid": "", "bus_id": "0000:17:00.0", "numa_node": 0, "hca": "mlx5_0", "port": 1,
              "ucx_net_devices": "mlx5_0:1", "path_class": "PIX", "topo_class": None, "link_layer": "InfiniBand",
              "netdevs": [], "hca_is_mlx5": True, "acs_bridges": [], "source": "render fixture", "warnings": []}],
    "hcas": [], "dax_devices": [], "topology_warnings": [],
}

RENDER = """
- name: Render every file the roles template, per host (into one JSON file per host)
  hosts: all
  gather_facts: false
  vars:
    firewall_enabled: true
    kvshare_validate_offline: true
  tasks:
    - name: Preflights in validate.yml's order (offline; role defaults and exports made visible)
      ansible.builtin.include_role:
        name: "kvshare.dynamo.{{ role.name }}"
        tasks_from: preflight.yml
        public: true
      when: role.group == 'all' or inventory_hostname in groups[role.group] | default([])
      loop:
        - {name: firewall, group: all}
        - {name: maru_pool, group: maru_pool}
        - {name: etcd, group: etcd}
        - {name: etcd_client, group: dynamo}
        - {name: dynamo_runtime, group: dynamo}
        - {name: dynamo_frontend, group: dynamo_frontend}
        - {name: kvcr, group: kvcr}
        - {name: dynamo_worker, group: dynamo_workers}
      loop_control:
        loop_var: role
        label: "{{ role.name }}"

    # Its plan needs the probe phase: run on fixture topology with no hardware (nothing of this
    # machine is read that the rendered files depend on).
    - name: The inventory's topology, if any
      ansible.builtin.set_fact:
        __render_topology: "{{ rdma_ucx_topology_facts | default({}) }}"
    - name: The RDMA/UCX preflight with its plan (fixture topology, no hardware)
      ansible.builtin.include_role:
        name: kvshare.dynamo.rdma_ucx
        tasks_from: preflight.yml
        public: true
      vars:
        kvshare_validate_offline: false
        rdma_ucx_require_hardware: false
        rdma_ucx_ucx_version: "1.21.0"
        rdma_ucx_topology_facts: "{{ __render_topology if __render_topology | length > 0 else render_topology }}"
      when: inventory_hostname in groups['rdma_ucx'] | default([])

    - name: The venv the Dynamo roles use (dynamo_runtime's export)
      ansible.builtin.set_fact:
        dynamo_runtime_venv: "{{ __dynamo_runtime_venv }}"
      when: inventory_hostname in groups['dynamo'] | default([])

    - name: The etcd client environment, and its checksum as etcd_client exports it
      ansible.builtin.set_fact:
        __render_client_env: "{{ lookup('ansible.builtin.template', '%(etcd_client)s/client.env.j2') }}"
      when: inventory_hostname in groups['dynamo'] | default([])
    - name: Its checksum
      ansible.builtin.set_fact:
        etcd_client_env_checksum: "{{ __render_client_env | checksum }}"
      when: inventory_hostname in groups['dynamo'] | default([])

    - name: What each role writes (destination, template, loop variables)
      ansible.builtin.set_fact:
        __render_plan: "{{ __render_plan | default([]) + item }}"
      loop:
        - "{{ [{'dest': __firewall_ruleset_path, 'src': '%(firewall)s/kvshare.nft.j2'}]
              if inventory_hostname in groups['etcd'] | default([]) + groups['dynamo'] | default([]) + groups['maru_pool'] | default([])
                 + groups['kvcr'] | default([]) + groups['rdma_ucx'] | default([]) else [] }}"
        - "{{ ([{'dest': __rdma_ucx_modules_load_file, 'src': '%(rdma_ucx)s/modules-load.conf.j2'},
                {'dest': __rdma_ucx_limits_file, 'src': '%(rdma_ucx)s/limits.conf.j2'}]
               + (rdma_ucx_memlock_dropin_units | map('regex_replace', '^(.*)$', __rdma_ucx_systemd_unit_dir ~ '/\\\\1.d/50-kvshare-memlock.conf')
                  | map('community.general.dict_kv', 'dest') | map('combine', {'src': '%(rdma_ucx)s/memlock-dropin.conf.j2'}) | list)
               + (__rdma_ucx_gpus | map('community.general.dict_kv', 'gpu')
                  | map('combine', {'src': '%(rdma_ucx)s/gpu.env.j2'}) | list)
               + ([{'dest': __rdma_ucx_acs_script, 'src': '%(rdma_ucx)s/acs-clear.sh.j2'},
                   {'dest': __rdma_ucx_systemd_unit_dir ~ '/' ~ __rdma_ucx_acs_unit, 'src': '%(rdma_ucx)s/kvshare-acs-clear.service.j2'}]
                  if rdma_ucx_clear_acs | bool and __rdma_ucx_acs_bridges | length > 0 else []))
              if inventory_hostname in groups['rdma_ucx'] | default([]) else [] }}"
        - "{{ ([{'dest': '/etc/systemd/system/maru-resource-manager.service', 'src': '%(maru_pool)s/maru-resource-manager.service.j2'},
                {'dest': '/etc/systemd/system/maru-resource-manager.service.d/10-args.conf', 'src': '%(maru_pool)s/maru-resource-manager-args.conf.j2'},
                {'dest': '/etc/systemd/system/maru-server.service', 'src': '%(maru_pool)s/maru-server.service.j2'}]
               + ([{'dest': '/etc/udev/rules.d/70-maru-dax.rules', 'src': '%(maru_pool)s/70-maru-dax.rules.j2'}] if maru_pool_udev_rule | bool else [])
               + ([{'dest': '/etc/udev/rules.d/71-maru-dax-hotplug.rules', 'src': '%(maru_pool)s/71-maru-dax-hotplug.rules.j2'}]
                  if maru_pool_udev_hotplug_hup | bool else [])
               + ([{'dest': '/etc/systemd/system/' ~ __maru_pool_health_unit ~ '.service', 'src': '%(maru_pool)s/maru-pool-health.service.j2'},
                   {'dest': '/etc/systemd/system/' ~ __maru_pool_health_unit ~ '.timer', 'src': '%(maru_pool)s/maru-pool-health.timer.j2'}]
                  if __maru_pool_health_active | bool else [])
               + ((__maru_pool_clients | map('community.general.dict_kv', 'item')
                   | map('combine', {'src': '%(maru_pool)s/lmcache-maru.yaml.j2'}) | list) if maru_pool_connector == 'lmcache' else []))
              if inventory_hostname in groups['maru_pool'] | default([]) else [] }}"
        - "{{ [{'dest': __etcd_config_dir ~ '/etcd.env', 'src': '%(etcd)s/etcd.env.j2'},
               {'dest': __etcd_config_dir ~ '/etcdctl.env', 'src': '%(etcd)s/etcdctl.env.j2'},
               {'dest': '/etc/systemd/system/etcd.service', 'src': '%(etcd)s/etcd.service.j2'},
               {'dest': __etcd_config_dir ~ '/bootstrap.env', 'src': '%(etcd)s/bootstrap.env.j2'}]
              if inventory_hostname in groups['etcd'] | default([]) else [] }}"
        - "{{ (([{'dest': __etcd_client_proxy_dir ~ '/haproxy.cfg', 'src': '%(etcd_client)s/etcd-client-proxy.cfg.j2'},
                 {'dest': '/etc/systemd/system/etcd-client-proxy.service', 'src': '%(etcd_client)s/etcd-client-proxy.service.j2'}]
                if etcd_client_proxy_enabled else [])
               + [{'dest': etcd_client_env_file, 'src': '%(etcd_client)s/client.env.j2'}])
              if inventory_hostname in groups['dynamo'] | default([]) else [] }}"
        - "{{ [{'dest': __dynamo_frontend_config_dir ~ '/frontend.env', 'src': '%(dynamo_frontend)s/frontend.env.j2'},
               {'dest': '/etc/systemd/system/dynamo-frontend.service', 'src': '%(dynamo_frontend)s/dynamo-frontend.service.j2'}]
              if inventory_hostname in groups['dynamo_frontend'] | default([]) else [] }}"
        - "{{ (([{'dest': __kvcr_tmpfiles_file, 'src': '%(kvcr)s/tmpfiles.conf.j2'},
                 {'dest': __kvcr_config_dir ~ '/kvcr-service.env', 'src': '%(kvcr)s/service.env.j2'},
                 {'dest': __kvcr_unit_dir ~ '/' ~ __kvcr_service_unit, 'src': '%(kvcr)s/kvcr-service.service.j2'}]
                if kvcr_variant == 'memory_service' else [])
               + ([{'dest': __kvcr_config_dir ~ '/kvcr-state-agent.env', 'src': '%(kvcr)s/state-agent.env.j2'},
                   {'dest': __kvcr_unit_dir ~ '/' ~ __kvcr_state_agent_unit, 'src': '%(kvcr)s/kvcr-state-agent.service.j2'}]
                  if kvcr_state_agent_enabled | bool else [])
               + [{'dest': __kvcr_unit_dir ~ '/dynamo-worker@' ~ kvcr_worker_name ~ '.service.d/20-kvcr.conf', 'src': '%(kvcr)s/worker-kvcr.conf.j2'}]
               + ([{'dest': __kvcr_unit_dir ~ '/' ~ __kvcr_health_unit ~ '.service', 'src': '%(kvcr)s/kvcr-health.service.j2'},
                   {'dest': __kvcr_unit_dir ~ '/' ~ __kvcr_health_unit ~ '.timer', 'src': '%(kvcr)s/kvcr-health.timer.j2'}]
                  if __kvcr_health_active | bool else []))
              if inventory_hostname in groups['kvcr'] | default([]) else [] }}"
        - "{{ ([{'dest': '/etc/systemd/system/dynamo-worker@.service', 'src': '%(dynamo_worker)s/dynamo-worker@.service.j2'}]
               + (__dynamo_worker_workers | map('community.general.dict_kv', 'worker')
                  | map('combine', {'src': '%(dynamo_worker)s/worker.env.j2'}) | list)
               + (__dynamo_worker_workers | map('community.general.dict_kv', 'worker')
                  | map('combine', {'src': '%(dynamo_worker)s/worker-exec.conf.j2'}) | list)
               + ([{'dest': '/etc/systemd/system/' ~ __dynamo_worker_health_unit ~ '.service', 'src': '%(dynamo_worker)s/dynamo-worker-health.service.j2'},
                   {'dest': '/etc/systemd/system/' ~ __dynamo_worker_health_unit ~ '.timer', 'src': '%(dynamo_worker)s/dynamo-worker-health.timer.j2'}]
                  if __dynamo_worker_health_active | bool else []))
              if inventory_hostname in groups['dynamo_workers'] | default([]) else [] }}"
      loop_control:
        label: "{{ item | map(attribute='src') | map('basename') | list }}"

    - name: Render them
      ansible.builtin.set_fact:
        __render_files: "{{ __render_files | default({}) | combine({item.dest | default(dest_of[item.src | basename]): text}) }}"
      vars:
        dest_of:
          gpu.env.j2: "{{ rdma_ucx_env_dir }}/gpu{{ item.gpu.index | default('') }}.env"
          lmcache-maru.yaml.j2: "{{ item.item.lmcache_config_file | default('') }}"
          worker.env.j2: "{{ __dynamo_worker_config_dir | default('') }}/workers/{{ item.worker.name | default('') }}.env"
          worker-exec.conf.j2: "/etc/systemd/system/dynamo-worker@{{ item.worker.name | default('') }}.service.d/10-exec.conf"
        text: "{{ lookup('ansible.builtin.template', item.src, template_vars=item) }}"
      loop: "{{ __render_plan }}"
      loop_control:
        label: "{{ item.src | basename }}"

    - name: The per-GPU plan rdma_ucx computes
      ansible.builtin.set_fact:
        __render_files: "{{ __render_files | combine({'rdma_ucx/gpu_plan.json': __rdma_ucx_gpus | to_nice_json(sort_keys=true) ~ '\\n'}) }}"
      when: inventory_hostname in groups['rdma_ucx'] | default([])

    - name: Write them (one JSON per host)
      ansible.builtin.copy:
        content: "{{ __render_files | default({}) | to_json }}"
        dest: "{{ render_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
""" % {role: templates(role) for role in ("firewall", "rdma_ucx", "maru_pool", "etcd", "etcd_client",
                                          "dynamo_frontend", "kvcr", "dynamo_worker")}


def ansible_env(tmp_path, **extra):
    """The environment of an offline ansible-playbook run from the checkout (no fact cache, no colour)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default", KVSHARE_UPSTREAM_DIR=str(tmp_path))
    env.update(extra)
    return env


def run_local_play(tmp_path, text, hosts=None, **env):
    """ansible-playbook of play text `text` on hosts of connection local (this interpreter), with
    the json callback: (CompletedProcess, the first play's tasks). `hosts`: {name: host variables},
    default one host "local"; `env` adds to ansible_env()."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {name: dict(local, **values) for name, values in (hosts or {"local": {}}).items()}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(text)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml")],
                          cwd=REPO, env=ansible_env(tmp_path, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", **env),
                          capture_output=True, text=True, timeout=120, check=False)
    return proc, json.loads(proc.stdout)["plays"][0]["tasks"]


def copy_inventory(tmp_path, inventory):
    """A copy of inventories/<inventory> without local, uncommitted host_vars (zz-local.yml)."""
    inv = tmp_path / ("inv-" + inventory)
    shutil.copytree(os.path.join(REPO, "inventories", inventory), inv)
    for path in inv.glob("host_vars/zz-local.yml"):
        path.unlink()
    return inv


def host_names(inventory_dir):
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    return sorted(InventoryManager(loader=DataLoader(), sources=[str(inventory_dir)]).get_groups_dict()["all"])


def fake_client_pki(directory, hosts):
    """Placeholder PEM files where etcd_client reads the controller's PKI (client.env embeds them):
    the goldens never hold a real key, and do not depend on this machine's PKI."""
    os.makedirs(str(directory), exist_ok=True)
    names = ["ca.pem"] + ["client-%s%s.pem" % (host, suffix) for host in hosts for suffix in ("", "-key")]
    for name in names:
        with open(os.path.join(str(directory), name), "w") as fh:
            fh.write("<%s>\n" % name)
    return directory


def render_inventory(tmp_path, inventory, limit=None):
    """Render every host of inventories/<inventory>: {host: {absolute destination path: text}}."""
    inv = copy_inventory(tmp_path, inventory)
    play = tmp_path / "render.yml"
    play.write_text(RENDER)
    out = tmp_path / ("out-" + inventory)
    out.mkdir(exist_ok=True)
    pki = fake_client_pki(tmp_path / "pki", host_names(inv))
    fixed = dict(RUNTIME_FIXED, ansible_connection="local", ansible_python_interpreter=sys.executable,
                 render_dir=str(out), render_topology=RDMA_UCX_RENDER_TOPOLOGY, etcd_client_pki_dir=str(pki))
    cmd = [ANSIBLE_PLAYBOOK, "-i", str(inv), str(play), "-e", json.dumps(fixed)]
    if limit:
        cmd += ["--limit", limit]
    proc = subprocess.run(cmd, cwd=REPO, env=ansible_env(tmp_path), capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    rendered = {}
    for name in sorted(os.listdir(str(out))):
        with open(os.path.join(str(out), name)) as fh:
            rendered[name[:-len(".json")]] = dict(sorted(json.load(fh).items()))
    return rendered


def read_tree(root):
    """{relative path: text} of every file under root."""
    files = {}
    for dirpath, _dirs, names in os.walk(str(root)):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path) as fh:
                files[os.path.relpath(path, str(root))] = fh.read()
    return dict(sorted(files.items()))
