"""Fixtures for the sandbox scenario's testinfra checks: hosts over SSH, inventory data, helpers."""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import testinfra

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# Another copy of the sandbox (other addresses and container names) can be tested with KVSHARE_INVENTORY.
INVENTORY = os.environ.get("KVSHARE_INVENTORY", os.path.join(REPO, "inventories", "sandbox"))
SANDBOX_DIR = os.environ.get("KVSHARE_SANDBOX_DIR", "/var/tmp/kvshare-sandbox")
BIN = os.path.dirname(sys.executable)


def _inventory():
    out = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", INVENTORY, "--list"],
                         check=True, capture_output=True, text=True, cwd=REPO).stdout
    return json.loads(out)


INV = _inventory()
HOSTVARS = INV["_meta"]["hostvars"]


def group(name):
    """Hosts of a group, its child groups' hosts included (in inventory order, no repeats)."""
    out = list(INV.get(name, {}).get("hosts", []))
    for child in INV.get(name, {}).get("children", []):
        out += [h for h in group(child) if h not in out]
    return out


def address(host):
    return HOSTVARS[host]["kvshare_bind_address"]


def ssh_host(host):
    return testinfra.get_host(
        "ssh://root@%s:2222" % address(host),
        ssh_identity_file=os.path.join(SANDBOX_DIR, "ssh", "id_ed25519"),
        ssh_extra_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
    )


FRONTEND = group("dynamo_frontend")[0]
FRONTEND_URL = "http://%s:8000" % address(FRONTEND)


def workers():
    """(host, worker) for every worker in the inventory."""
    for host in group("dynamo_workers"):
        for worker in HOSTVARS[host].get("dynamo_workers", []):
            yield host, worker


def http_json(url, payload=None, timeout=30, headers=None):
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body.decode(errors="replace")


def generate_instances():
    """Frontend /health generate instances: [(instance_id, component, transport_host_port)]."""
    status, body = http_json(FRONTEND_URL + "/health?instances=true")
    assert status == 200, body
    out = []
    for inst in body.get("instances", []):
        if inst.get("endpoint") != "generate":
            continue
        tcp = (inst.get("transport") or {}).get("tcp", "")
        out.append((int(inst["instance_id"]), inst["component"], tcp.split("/", 1)[0]))
    return out


def instance_of(host, worker):
    """Instance ids registered by this worker (matched by its pinned request-plane port)."""
    target = "%s:%s" % (address(host), worker["rpc_port"])
    return [iid for iid, dummy, hp in generate_instances() if hp == target]


def completion(worker, instance_id, prompt="hello world", max_tokens=2):
    return http_json(FRONTEND_URL + "/v1/completions", {
        "model": worker.get("served_model_name", worker["model"]), "prompt": prompt,
        "max_tokens": max_tokens, "temperature": 0, "nvext": {"backend_instance_id": instance_id}}, timeout=60)


def wait_for(predicate, timeout, interval=0.5, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def ansible_playbook(*args, timeout=1200):
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", INVENTORY] + list(args)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "ANSIBLE_FORCE_COLOR": "0", "PATH": BIN + os.pathsep + os.environ["PATH"]}, check=False)


@pytest.fixture(scope="session")
def hosts():
    return {h: ssh_host(h) for h in group("sandbox")}
