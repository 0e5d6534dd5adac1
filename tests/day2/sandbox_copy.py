"""The day-2 suite's own copy of the sandbox: 127.0.12.N, containers kvshare-d-sb1..3, mockers only.

inventories/sandbox is copied into KVSHARE_DAY2_DIR (default /var/tmp/kvshare-sandbox-d, outside the
repository) with hosts on 127.0.12.N, containers kvshare-d-<host>, its own kvpool directory, etcd PKI,
Maru test-double artifacts and wheelhouse (ai-dynamo 1.6.0 and 1.6.1, mocker only: built by
build_wheelhouse()). sb2's vLLM workers are replaced by two mockers sharing GPU 0 (a GPU group).
The image, the model and the SSH key of the main sandbox (KVSHARE_SANDBOX_DIR) are reused read-only.

    python tests/day2/sandbox_copy.py            # writes the copy, prints its inventory path
"""
import os
import shutil
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DAY2_DIR = os.environ.get("KVSHARE_DAY2_DIR", "/var/tmp/kvshare-sandbox-d")
SUBNET_FROM, SUBNET_TO = "127.0.10.", "127.0.12."
CONTAINER_PREFIX = "kvshare-d-"
PINS = {v: os.path.join(HERE, "pins", "dynamo-%s.yml" % v) for v in ("1.6.0", "1.6.1")}
BASE_VERSION = "1.6.1"


def mocker(name, gpu, port):
    return {"name": name, "engine": "mocker", "model": "/opt/kvshare/models/tiny-llama",
            "served_model_name": "tiny-mock", "endpoint": "dyn://dynamo.mocker.generate",
            "gpus": [gpu], "system_port": 18080 + port, "rpc_port": 19080 + port,
            "extra_args": ["--speedup-ratio", "10"]}


def pins(version):
    with open(PINS[version]) as handle:
        return yaml.safe_load(handle)["dynamo_runtime_pip_steps"]


def _write(path, data, note="Written by tests/day2/sandbox_copy.py from inventories/sandbox."):
    with open(path, "w") as handle:
        handle.write("---\n# %s\n" % note)
        yaml.safe_dump(data, handle, sort_keys=False, width=120)


def _update(path, changes, drop=()):
    data = {}
    if os.path.exists(path):
        with open(path) as handle:
            data = yaml.safe_load(handle) or {}
    for key in drop:
        data.pop(key, None)
    data.update(changes)
    _write(path, data)


def make_copy(base=DAY2_DIR, extra_workers=None, extra_host=False):
    """Write the copy under base/inventory (replacing an older one) and return its path.

    extra_workers: {host: [worker, ...]} appended to that host's dynamo_workers (scale-out).
    extra_host: add sb4 (127.0.12.4) as a worker host with one mocker (scale-out by a host).
    """
    src = os.path.join(REPO, "inventories", "sandbox")
    dest = os.path.join(base, "inventory")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest)
    hosts = os.path.join(dest, "hosts.yml")
    with open(hosts) as handle:
        inv = yaml.safe_load(handle.read().replace(SUBNET_FROM, SUBNET_TO))
    assert inv["all"]["children"]["sandbox"]["hosts"]["sb1"]["kvshare_bind_address"].startswith(SUBNET_TO)
    inv["all"]["children"]["maru_pool"]["hosts"] = {}
    if extra_host:
        inv["all"]["children"]["sandbox"]["hosts"]["sb4"] = {"kvshare_bind_address": SUBNET_TO + "4"}
        inv["all"]["children"]["dynamo"]["children"]["dynamo_workers"]["hosts"]["sb4"] = None
        _write(os.path.join(dest, "host_vars", "sb4.yml"), {"dynamo_workers": [mocker("mock-e", "0", 1)]})
    _write(hosts, inv)
    gv = os.path.join(dest, "group_vars")
    _update(os.path.join(gv, "all.yml"), {
        "etcd_pki_dir": base + "/pki/{{ etcd_cluster_name | default('kvshare') }}",
        "etcd_client_pki_dir": base + "/pki/{{ etcd_client_cluster_name | default('kvshare') }}",
        # The etcd client proxies listen on the copy's addresses (see inventories/sandbox).
        "etcd_cert_extra_sans": ["IP:" + h["kvshare_bind_address"] for h in inv["all"]["children"]["sandbox"]["hosts"].values()],
    })
    with open(os.path.join(gv, "sandbox.yml")) as handle:
        volumes = yaml.safe_load(handle)["sandbox_volumes"]
    for vol in volumes:
        if vol["path"] == "/opt/kvshare/wheelhouse":
            vol["host_path"] = base + "/" + os.path.basename(vol["path"])
    _update(os.path.join(gv, "sandbox.yml"), {
        "sandbox_container_name": CONTAINER_PREFIX + "{{ inventory_hostname }}",
        "sandbox_volumes": volumes,
        "sandbox_fsdax_dir": base + "/fakecxl",
    })
    _update(os.path.join(gv, "dynamo.yml"), {"dynamo_runtime_pip_steps": pins(BASE_VERSION),
                                             "dynamo_runtime_pip_remove": []})
    # sb2: two mockers on one GPU (a GPU group: they start one after the other) instead of vLLM,
    # and no vLLM on sb3: mockers need no KV pool, so the copy has none (maru_pool emptied above).
    pool_vars = ("dynamo_worker_requires", "dynamo_worker_read_write_paths", "sandbox_forced_overrides")
    _update(os.path.join(dest, "host_vars", "sb2.yml"),
            {"dynamo_workers": [mocker("mock-c", "0", 1), mocker("mock-d", "0", 2)]},
            drop=("dynamo_runtime_check_modules", "dynamo_worker_env") + pool_vars)
    with open(os.path.join(dest, "host_vars", "sb3.yml")) as handle:
        sb3 = [w for w in yaml.safe_load(handle)["dynamo_workers"] if w["engine"] == "mocker"]
    _update(os.path.join(dest, "host_vars", "sb3.yml"), {"dynamo_workers": sb3}, drop=("dynamo_worker_env",) + pool_vars)
    for host, extra in (extra_workers or {}).items():
        path = os.path.join(dest, "host_vars", "%s.yml" % host)
        with open(path) as handle:
            workers = (yaml.safe_load(handle) or {}).get("dynamo_workers", [])
        _update(path, {"dynamo_workers": workers + list(extra)})
    return dest


def build_wheelhouse(base=DAY2_DIR):
    """The copy's wheelhouse: both pinned versions, via sandbox/build-wheelhouse.py (cached)."""
    env = {**os.environ, "PIP_FIND_LINKS": os.environ.get("PIP_FIND_LINKS", "/opt/wheels /var/tmp/kvshare-sandbox/wheelhouse")}
    for version, path in sorted(PINS.items()):
        env["KVSHARE_WHEELHOUSE_STEPS"] = path
        subprocess.run([sys.executable, os.path.join(REPO, "sandbox", "build-wheelhouse.py"), base + "/wheelhouse"],
                       check=True, env=env)


if __name__ == "__main__":
    print(make_copy(sys.argv[1] if len(sys.argv) > 1 else DAY2_DIR))
