"""The fault suite's own copy of the sandbox inventory (other addresses, containers, pool and PKI).

inventories/sandbox is copied into KVSHARE_FAULTS_DIR (default /var/tmp/kvshare-sandbox-f, outside
the repository) with hosts on 127.0.11.N instead of 127.0.10.N, containers kvshare-f-sb1..3, its own
fake FS_DAX pool (KVSHARE_FAULTS_DIR/fakecxl) and etcd PKI. The wheelhouse, the model, the upstream
sources and the SSH key of the main sandbox (KVSHARE_SANDBOX_DIR) are reused read-only.

    python tests/faults/sandbox_copy.py            # writes the copy, prints its inventory path
"""
import os
import shutil
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FAULTS_DIR = os.environ.get("KVSHARE_FAULTS_DIR", "/var/tmp/kvshare-sandbox-f")
SUBNET_FROM, SUBNET_TO = "127.0.10.", "127.0.11."
CONTAINER_PREFIX = "kvshare-f-"


def _update(path, changes):
    with open(path) as handle:
        data = yaml.safe_load(handle) or {}
    data.update(changes)
    with open(path, "w") as handle:
        handle.write("---\n# Written by tests/faults/sandbox_copy.py from inventories/sandbox.\n")
        yaml.safe_dump(data, handle, sort_keys=False, width=120)


def make_copy(base=FAULTS_DIR):
    """Write the copy under base/inventory (replacing an older one) and return its path."""
    src = os.path.join(REPO, "inventories", "sandbox")
    dest = os.path.join(base, "inventory")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest)
    hosts = os.path.join(dest, "hosts.yml")
    with open(hosts) as handle:
        text = handle.read()
    assert SUBNET_FROM in text, "inventories/sandbox no longer uses %s*" % SUBNET_FROM
    with open(hosts, "w") as handle:
        handle.write(text.replace(SUBNET_FROM, SUBNET_TO))
    # Addresses written in host_vars (the Maru server URL of the workers) move with the hosts.
    hv = os.path.join(dest, "host_vars")
    for name in os.listdir(hv):
        with open(os.path.join(hv, name)) as handle:
            text = handle.read()
        with open(os.path.join(hv, name), "w") as handle:
            handle.write(text.replace(SUBNET_FROM, SUBNET_TO))
    gv = os.path.join(dest, "group_vars")
    _update(os.path.join(gv, "all.yml"), {
        "etcd_pki_dir": base + "/pki/{{ etcd_cluster_name | default('kvshare') }}",
        "etcd_client_pki_dir": base + "/pki/{{ etcd_client_cluster_name | default('kvshare') }}",
        # The etcd client proxies listen on the copy's addresses (see inventories/sandbox).
        "etcd_cert_extra_sans": ["IP:" + SUBNET_TO + str(n) for n in (1, 2, 3)],
    })
    _update(os.path.join(gv, "sandbox.yml"), {
        "sandbox_container_name": CONTAINER_PREFIX + "{{ inventory_hostname }}",
        "sandbox_fsdax_dir": base + "/fakecxl",
    })
    return dest


if __name__ == "__main__":
    print(make_copy(sys.argv[1] if len(sys.argv) > 1 else FAULTS_DIR))
