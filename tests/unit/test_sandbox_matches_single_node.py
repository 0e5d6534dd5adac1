"""The sandbox's Maru host is inventories/single_node's host plus the forced overrides, and no more.

Both hosts (sandbox sb2, single_node gpu-node-1) are rendered the way site.yml writes them (worker
unit, each worker's environment and command-line drop-in with its connector JSON, the Maru units),
with `connection: local` into tmp: nothing is installed or started. Every difference, after each
host's addresses and name are put in neutral form, is reduced to a key (`env:NAME`, `unit:Key`,
`argv:--flag`, `connector:key`) and must be listed under `keys` in `sandbox_forced_overrides`
(inventories/sandbox/host_vars/sb2.yml); every listed key must really differ, so the list
cannot go stale.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="ansible-playbook not in the venv")

WORKER = os.path.join(REPO, "roles", "dynamo_worker", "templates")
MARU = os.path.join(REPO, "roles", "maru_pool", "templates")
RENDER = """
- name: Render what site.yml writes for the Maru host's workers and pool (templates only)
  hosts: "{{ render_host }}"
  gather_facts: false
  vars:
    out: "{{ render_dir }}/{{ inventory_hostname }}"
  tasks:
    - name: The etcd client settings the workers read
      ansible.builtin.include_role:
        name: kvshare.dynamo.etcd_client
        tasks_from: preflight.yml
    - name: The pool's preflight (exports, role defaults made visible)
      ansible.builtin.include_role:
        name: kvshare.dynamo.maru_pool
        tasks_from: preflight.yml
        public: true
    - name: The workers' preflight (role defaults made visible)
      ansible.builtin.include_role:
        name: kvshare.dynamo.dynamo_worker
        tasks_from: preflight.yml
        public: true
    - name: Output directory
      ansible.builtin.file:
        path: "{{ out }}"
        state: directory
        mode: "0755"
    - name: Units of the host
      ansible.builtin.template:
        src: "{{ item.src }}"
        dest: "{{ out }}/{{ item.dest }}"
        mode: "0644"
      loop:
        - {src: "%(worker)s/dynamo-worker@.service.j2", dest: dynamo-worker@.service}
        - {src: "%(maru)s/maru-resource-manager.service.j2", dest: maru-resource-manager.service}
        - {src: "%(maru)s/maru-resource-manager-args.conf.j2", dest: maru-resource-manager-10-args.conf}
        - {src: "%(maru)s/maru-server.service.j2", dest: maru-server.service}
    - name: Each worker's environment
      ansible.builtin.template:
        src: "%(worker)s/worker.env.j2"
        dest: "{{ out }}/{{ worker.name }}.env"
        mode: "0644"
      loop: "{{ dynamo_worker_instances }}"
      loop_control:
        loop_var: worker
    - name: Each worker's command line
      ansible.builtin.template:
        src: "%(worker)s/worker-exec.conf.j2"
        dest: "{{ out }}/{{ worker.name }}-10-exec.conf"
        mode: "0644"
      loop: "{{ dynamo_worker_instances }}"
      loop_control:
        loop_var: worker
""" % {"worker": WORKER, "maru": MARU}


def render(tmp_path, inventory, host, addresses):
    inv = tmp_path / ("inv-" + host)
    shutil.copytree(os.path.join(REPO, "inventories", inventory), inv)
    (inv / "host_vars" / "zz-local.yml").unlink(missing_ok=True)
    with open(inv / "group_vars" / "all.yml", "a") as fh:
        fh.write("\nansible_connection: local\nansible_python_interpreter: %s\n" % sys.executable)
    play = tmp_path / "render.yml"
    play.write_text(RENDER)
    out = tmp_path / "out"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default", KVSHARE_UPSTREAM_DIR=str(tmp_path))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inv), str(play),
                           "-e", "render_host=%s" % host, "-e", "render_dir=%s" % out,
                           "-e", "kvshare_validate_offline=true",
                           "-e", "dynamo_runtime_venv=/opt/dynamo/venvs/current"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    files = {}
    for name in sorted(os.listdir(out / host)):
        text = (out / host / name).read_text()
        for addr in addresses:
            text = text.replace(addr, "<ADDR>")
        files[name] = text.replace(host, "<HOST>")
    return files


def _line_key(name, line):
    """The key of one differing line: env:NAME, unit:Key (per file), or None for comments."""
    if not line.strip() or line.startswith("#"):
        return []
    key, _, value = line.partition("=")
    if name.endswith(".env"):
        return ["env:" + key]
    if key == "ExecStart" and "dynamo." in value:
        return None  # compared argument by argument
    return ["unit:%s:%s" % (re.sub(r"^(vllm-[a-z])-", "", name), key)]


def _argv(text):
    line = next(x for x in text.splitlines() if x.startswith("ExecStart=") and "dynamo." in x)
    return shlex.split(line.partition("=")[2])


def _argv_items(argv):
    """--flag -> value (the connector JSON parsed), in order; bare flags map to True."""
    items, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
            items[arg] = json.loads(value) if arg == "--kv-transfer-config" else value
            i += 2
        else:
            items[arg] = True
            i += 1
    return items


def differences(sandbox, single):
    keys = set()
    assert sorted(sandbox) == sorted(single), "different files: %s vs %s" % (sorted(sandbox), sorted(single))
    for name in sandbox:
        a, b = sandbox[name].splitlines(), single[name].splitlines()
        for line in set(a).symmetric_difference(b):
            found = _line_key(name, line)
            if found is not None:
                keys.update(found)
        if name.endswith("-10-exec.conf"):
            ia, ib = _argv_items(_argv(sandbox[name])), _argv_items(_argv(single[name]))
            for flag in set(ia) | set(ib):
                if flag == "--kv-transfer-config" and flag in ia and flag in ib:
                    ca, cb = ia[flag], ib[flag]
                    ea, eb = ca.pop("kv_connector_extra_config", {}), cb.pop("kv_connector_extra_config", {})
                    keys.update("connector:" + k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))
                    keys.update("connector:" + k for k in set(ea) | set(eb) if ea.get(k) != eb.get(k))
                elif ia.get(flag) != ib.get(flag):
                    keys.add("argv:" + flag)
    return keys


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("render")
    return (render(tmp, "sandbox", "sb2", ["127.0.10.2"]),
            render(tmp, "single_node", "gpu-node-1", ["192.0.2.11", "127.0.0.1"]))


def test_sandbox_pool_host_is_single_node_plus_listed_overrides(rendered):
    sandbox, single = rendered
    assert any(n.endswith("-10-exec.conf") for n in sandbox), sorted(sandbox)
    listed = yaml.safe_load(open(os.path.join(REPO, "inventories", "sandbox", "host_vars", "sb2.yml")))
    found = differences(sandbox, single)
    allowed = {k for item in listed["sandbox_forced_overrides"] for k in item["keys"]}
    assert found - allowed == set(), "differences not listed in sandbox_forced_overrides: %s" % sorted(found - allowed)
    assert allowed - found == set(), "listed overrides that no longer differ: %s" % sorted(allowed - found)
    # Both really run the collection's connector against a Maru server, with the same ordering.
    for files in (sandbox, single):
        exec_conf = files["vllm-b-10-exec.conf"]
        assert "PartOf=maru-server.service" in exec_conf and "-m kvshare_maru_connector wait tcp://<ADDR>:5555" in exec_conf
        cfg = _argv_items(_argv(exec_conf))["--kv-transfer-config"]
        assert cfg["kv_connector"] == "MaruKVConnector" and cfg["kv_connector_module_path"] == "kvshare_maru_connector"


def test_a_new_difference_is_caught(rendered):
    """The comparison is not blind: one more environment variable on the sandbox side is reported."""
    sandbox, single = dict(rendered[0]), rendered[1]
    sandbox["vllm-a.env"] += "EXTRA_KNOB=1\n"
    sandbox["vllm-a-10-exec.conf"] = sandbox["vllm-a-10-exec.conf"].replace("--no-enable-prefix-caching", "--enable-prefix-caching")
    found = differences(sandbox, single)
    assert "env:EXTRA_KNOB" in found
    assert "argv:--enable-prefix-caching" in found
