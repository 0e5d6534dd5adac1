# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Sandbox copies: inventories/sandbox rewritten for other addresses, containers and directories.

make_copy(base, subnet, prefix, ...) writes base/inventory (outside the repository; an older copy
there is replaced): hosts on <subnet>N instead of 127.0.10.N, containers <prefix><host>, and under
base its own etcd PKI, fake FS_DAX pool (base/fakecxl) and, where asked, wheelhouse. The image, the
model, the upstream sources, the SSH key and (by default) the wheelhouse of the main sandbox
(KVSHARE_SANDBOX_DIR) are reused read-only. Two kinds:

  full copy (default)  every host, worker and the Maru pool, as in inventories/sandbox
  mockers_only=True    mocker workers only, no KV pool (maru_pool emptied): sb2's two vLLM workers
                       become two mockers sharing GPU 0 (a GPU group), sb3 keeps its two mockers;
                       extra_hosts=K adds sb4..sb(3+K), worker hosts with one mocker each (mock-e)

The suites' copies (Sandbox.of_copy(base) in sandbox.py drives one):
  faults  KVSHARE_FAULTS_DIR (default /var/tmp/kvshare-sandbox-f): full copy on 127.0.11.N,
          containers kvshare-f-sb1..3
  day2    KVSHARE_DAY2_DIR (default /var/tmp/kvshare-sandbox-d): mockers only on 127.0.12.N,
          containers kvshare-d-sb1..3, its own wheelhouse (build_wheelhouse(): ai-dynamo 1.6.0 and
          1.6.1, tests/day2/pins) and 1.6.1 pinned

    python tests/lib/sandbox_copy.py faults|day2 [BASE]   # writes that copy, prints its inventory path
"""
import os
import shutil
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SANDBOX_SUBNET = "127.0.10."
NOTE = "Written by tests/lib/sandbox_copy.py from inventories/sandbox."
# Variables of the hosts that use the KV pool, dropped where a mockers-only copy has none.
POOL_VARS = ("dynamo_worker_requires", "dynamo_worker_read_write_paths", "sandbox_forced_overrides")

FAULTS_DIR = os.environ.get("KVSHARE_FAULTS_DIR", "/var/tmp/kvshare-sandbox-f")
FAULTS = {"subnet": "127.0.11.", "prefix": "kvshare-f-"}
DAY2_DIR = os.environ.get("KVSHARE_DAY2_DIR", "/var/tmp/kvshare-sandbox-d")
# spare_sans: the day-2 suite adds a host (scale-out) and removes it again. config_dir: the copy
# keeps the Dynamo units' files elsewhere than the default /etc/dynamo, so that its playbooks
# (teardown.yml and remove_host.yml among them, in the day-2 and fault cases of CI's mocker lane)
# prove they follow an inventory's dynamo_runtime_config_dir.
DAY2 = {"subnet": "127.0.12.", "prefix": "kvshare-d-", "mockers_only": True, "spare_sans": 1,
        "config_dir": "/etc/dynamo-d2"}
DAY2_PINS = {v: os.path.join(REPO, "tests", "day2", "pins", "dynamo-%s.yml" % v) for v in ("1.6.0", "1.6.1")}
DAY2_VERSION = "1.6.1"
# bench/bench.py's scaling copy: mockers only, 3 + N hosts (127.0.13.N is the KVCR test's).
BENCH_DIR = os.environ.get("KVSHARE_BENCH_DIR", "/var/tmp/kvshare-sandbox-b")
BENCH = {"subnet": "127.0.14.", "prefix": "kvshare-b-", "mockers_only": True}


def mocker(name, gpu, port, extra_args=(), **fields):
    """A mocker worker on GPU `gpu`, system port 18080+port and request-plane port 19080+port;
    extra_args follow its own (--speedup-ratio 10), fields replace its others."""
    worker = {"name": name, "engine": "mocker", "model": "/opt/kvshare/models/tiny-llama",
              "served_model_name": "tiny-mock", "endpoint": "dyn://dynamo.mocker.generate",
              "gpus": [gpu], "system_port": 18080 + port, "rpc_port": 19080 + port,
              "extra_args": ["--speedup-ratio", "10"] + list(extra_args)}
    worker.update(fields)
    return worker


def _read(path):
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _write(path, data):
    with open(path, "w") as handle:
        handle.write("---\n# %s\n" % NOTE)
        yaml.safe_dump(data, handle, sort_keys=False, width=120)


def _update(path, changes, drop=()):
    data = _read(path)
    for key in drop:
        data.pop(key, None)
    data.update(changes)
    _write(path, data)


def _replace(path, old, new):
    with open(path) as handle:
        text = handle.read()
    with open(path, "w") as handle:
        handle.write(text.replace(old, new))


def make_copy(base, subnet, prefix, mockers_only=False, extra_hosts=0, extra_workers=None, mocker_args=(),
              wheelhouse=None, pip_steps=None, extra_etcd=False, spare_sans=0, config_dir=None):
    """Write the copy under base/inventory (replacing an older one) and return its path.

    mockers_only: mocker workers only, no KV pool (see the module's docstring).
    extra_hosts: that many worker hosts more (sb4, sb5, ... on <subnet>4, ...), one mocker each.
    extra_etcd: the extra hosts are etcd members too.
    extra_workers: {host: [worker, ...]} appended to that host's dynamo_workers (scale-out).
    mocker_args: appended to the extra_args of every mocker of the copy (e.g. ["--startup-time", "2"]).
    wheelhouse: the hosts' wheelhouse on this machine (default: the main sandbox's).
    pip_steps: dynamo_runtime_pip_steps of the copy (and nothing removed after them).
    config_dir: dynamo_runtime_config_dir of the copy's Dynamo hosts (default: the role's).
    spare_sans: the etcd member certificates also name the addresses of that many hosts after the
      base ones (sb4, ...), whether or not the copy has them, so that adding or removing such a
      host changes no member certificate (no etcd restarts). A sandbox artefact: here every host's
      etcd client proxy listens on its own address, which the member certificates must name; a
      real host's proxy listens on 127.0.0.1, always named.
    """
    assert subnet != SANDBOX_SUBNET, "a copy needs addresses of its own"
    dest = os.path.join(base, "inventory")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(os.path.join(REPO, "inventories", "sandbox"), dest)
    hosts = os.path.join(dest, "hosts.yml")
    with open(hosts) as handle:
        text = handle.read()
    assert SANDBOX_SUBNET in text, "inventories/sandbox no longer uses %s*" % SANDBOX_SUBNET
    text = text.replace(SANDBOX_SUBNET, subnet)
    inv = yaml.safe_load(text)
    groups = inv["all"]["children"]
    sandbox_hosts = groups["sandbox"]["hosts"]
    hv = os.path.join(dest, "host_vars")
    # Any address written in host_vars moves with the hosts (since kv_pool only comments have one;
    # an address added later must not point a copy at the main sandbox).
    for name in os.listdir(hv):
        _replace(os.path.join(hv, name), SANDBOX_SUBNET, subnet)
    base_hosts = len(sandbox_hosts)
    if mockers_only or extra_hosts:
        if mockers_only:
            groups["maru_pool"]["hosts"] = {}
        first = len(sandbox_hosts) + 1
        for number in range(first, first + extra_hosts):
            name = "sb%d" % number
            assert name not in sandbox_hosts, name
            sandbox_hosts[name] = {"kvshare_bind_address": subnet + str(number)}
            groups["dynamo"]["children"]["dynamo_workers"]["hosts"][name] = None
            if extra_etcd:
                groups["etcd"]["hosts"][name] = None
            _write(os.path.join(hv, name + ".yml"), {"dynamo_workers": [mocker("mock-e", "0", 1)]})
        _write(hosts, inv)
    else:
        # Written as text: the inventory's comments stay.
        with open(hosts, "w") as handle:
            handle.write(text)
    gv = os.path.join(dest, "group_vars")
    _update(os.path.join(gv, "all.yml"), {
        "etcd_pki_dir": base + "/pki/{{ etcd_cluster_name | default('kvshare') }}",
        "etcd_client_pki_dir": base + "/pki/{{ etcd_client_cluster_name | default('kvshare') }}",
        # The etcd client proxies listen on the copy's addresses (see inventories/sandbox).
        "etcd_cert_extra_sans": sorted(set(["IP:" + h["kvshare_bind_address"] for h in sandbox_hosts.values()]
                                           + ["IP:%s%d" % (subnet, n) for n in range(1, base_hosts + spare_sans + 1)]),
                                       key=lambda san: int(san.rsplit(".", 1)[1])),
    })
    sandbox_vars = {"sandbox_container_name": prefix + "{{ inventory_hostname }}", "sandbox_fsdax_dir": base + "/fakecxl"}
    if wheelhouse:
        volumes = _read(os.path.join(gv, "sandbox.yml"))["sandbox_volumes"]
        for vol in volumes:
            if vol["path"] == "/opt/kvshare/wheelhouse":
                vol["host_path"] = wheelhouse
        sandbox_vars["sandbox_volumes"] = volumes
    _update(os.path.join(gv, "sandbox.yml"), sandbox_vars)
    if pip_steps is not None:
        _update(os.path.join(gv, "dynamo.yml"), {"dynamo_runtime_pip_steps": pip_steps, "dynamo_runtime_pip_remove": []})
    if config_dir:
        _update(os.path.join(gv, "dynamo.yml"), {"dynamo_runtime_config_dir": config_dir})
    if mockers_only:
        # sb2: two mockers on one GPU (a GPU group: they start one after the other) instead of vLLM,
        # and no vLLM on sb3: mockers need no KV pool, so the copy has none (maru_pool emptied above).
        _update(os.path.join(hv, "sb2.yml"), {"dynamo_workers": [mocker("mock-c", "0", 1), mocker("mock-d", "0", 2)]},
                drop=("dynamo_runtime_check_modules", "dynamo_worker_env") + POOL_VARS)
        sb3 = [w for w in _read(os.path.join(hv, "sb3.yml"))["dynamo_workers"] if w["engine"] == "mocker"]
        _update(os.path.join(hv, "sb3.yml"), {"dynamo_workers": sb3}, drop=("dynamo_worker_env",) + POOL_VARS)
    for host, extra in (extra_workers or {}).items():
        path = os.path.join(hv, "%s.yml" % host)
        _update(path, {"dynamo_workers": _read(path).get("dynamo_workers", []) + list(extra)})
    if mocker_args:
        for name in sorted(os.listdir(hv)):
            workers = _read(os.path.join(hv, name)).get("dynamo_workers", [])
            if any(w["engine"] == "mocker" for w in workers):
                _update(os.path.join(hv, name), {"dynamo_workers": [
                    dict(w, extra_args=list(w.get("extra_args", [])) + list(mocker_args)) if w["engine"] == "mocker" else w
                    for w in workers]})
    return dest


def faults_copy(base=FAULTS_DIR):
    """The fault suite's copy (full, 127.0.11.N, kvshare-f-*)."""
    return make_copy(base, **FAULTS)


def pins(version):
    """dynamo_runtime_pip_steps of a pinned ai-dynamo version (tests/day2/pins)."""
    return _read(DAY2_PINS[version])["dynamo_runtime_pip_steps"]


def day2_copy(base=DAY2_DIR, **kwargs):
    """The day-2 suite's copy (mockers only, 127.0.12.N, kvshare-d-*, its own wheelhouse, 1.6.1
    pinned); kwargs: extra_hosts, extra_workers, mocker_args (scale-out)."""
    return make_copy(base, wheelhouse=base + "/wheelhouse", pip_steps=pins(DAY2_VERSION), **DAY2, **kwargs)


def build_wheelhouse(base=DAY2_DIR, steps=tuple(sorted(DAY2_PINS.values()))):
    """A copy's wheelhouse (base/wheelhouse) with every set of pins in `steps` (YAML files with
    dynamo_runtime_pip_steps), via sandbox/build-wheelhouse.py (cached)."""
    env = {**os.environ, "PIP_FIND_LINKS": os.environ.get("PIP_FIND_LINKS", "/opt/wheels /var/tmp/kvshare-sandbox/wheelhouse")}
    for path in steps:
        env["KVSHARE_WHEELHOUSE_STEPS"] = path
        subprocess.run([sys.executable, os.path.join(REPO, "sandbox", "build-wheelhouse.py"), base + "/wheelhouse"],
                       check=True, env=env)


if __name__ == "__main__":
    COPIES = {"faults": (faults_copy, FAULTS_DIR), "day2": (day2_copy, DAY2_DIR)}
    if len(sys.argv) not in (2, 3) or sys.argv[1] not in COPIES:
        sys.exit("usage: sandbox_copy.py faults|day2 [BASE]")
    write, default_base = COPIES[sys.argv[1]]
    print(write(sys.argv[2] if len(sys.argv) > 2 else default_base))
