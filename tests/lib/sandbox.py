# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Sandbox driver of the tests and the benchmark: inventory, SSH, playbooks, HTTP, serving checks, waits.

One `Sandbox` per inventory (inventories/sandbox, or a copy written by sandbox_copy.py): its data
comes from `ansible-inventory --list` (read on first use; a new Sandbox is a new snapshot), its
hosts are reached over SSH on their loopback address (port 2222, the key under KVSHARE_SANDBOX_DIR)
or with `podman exec`, and its frontend over HTTP. Used by molecule/default/tests/conftest.py,
tests/faults, tests/day2 and bench/bench.py.

    KVSHARE_INVENTORY     the inventory a plain Sandbox() drives (default inventories/sandbox)
    KVSHARE_SANDBOX_DIR   the main sandbox's directory: SSH key, wheelhouse, model (default
                          /var/tmp/kvshare-sandbox)
"""
import functools
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)
SANDBOX_DIR = os.environ.get("KVSHARE_SANDBOX_DIR", "/var/tmp/kvshare-sandbox")
SSH_PORT = 2222
SSH_OPTIONS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"


def default_inventory():
    """KVSHARE_INVENTORY, else inventories/sandbox."""
    return os.environ.get("KVSHARE_INVENTORY", os.path.join(REPO, "inventories", "sandbox"))


def ssh_key():
    return os.path.join(SANDBOX_DIR, "ssh", "id_ed25519")


@functools.lru_cache(maxsize=None)
def _service_defaults():
    with open(os.path.join(REPO, "roles", "kvshare", "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)["kvshare_service_defaults"]


def service_defaults():
    """The stack contract's kvshare_service_defaults (roles/kvshare/defaults/main.yml, its only
    home), a copy each call (read once)."""
    return dict(_service_defaults())


def copy_env(base):
    """Environment of Ansible runs against a sandbox copy under `base`: its own fact cache (the
    cache is keyed by inventory name, sb1..3 in every copy) and verify.yml report."""
    return {"ANSIBLE_CACHE_PLUGIN_CONNECTION": os.path.join(base, "facts"),
            "KVSHARE_VERIFY_REPORT": os.path.join(base, "verify.json")}


def http_json(url, payload=None, timeout=30, headers=None):
    """(status, body): POST `payload` as JSON (GET without). An HTTP error gives its code and body
    (JSON when it parses); no answer at all gives (None, the reason)."""
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
    except (OSError, ValueError) as exc:
        return None, str(exc)[:300]


def wait_for(predicate, timeout, interval=0.5, what="condition"):
    """predicate()'s first true value, polled every `interval` s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


def must(res, what):
    """A finished ansible-playbook run passed (else its output's tail)."""
    assert res.returncode == 0, "%s failed:\n%s" % (what, (res.stdout + res.stderr)[-5000:])


def podman(*args, check=True):
    return subprocess.run(["podman"] + list(args), capture_output=True, text=True, check=check)


def podman_exec(container, command, check=True):
    """stdout of `bash -c command` in a sandbox container (asserts rc 0 when check)."""
    res = podman("exec", container, "bash", "-c", command, check=False)
    if check:
        assert res.returncode == 0, "%s: %s: %s" % (container, command, res.stderr)
    return res.stdout


class Sandbox:
    """The hosts of one sandbox inventory.

    request_timeout: seconds a completion may take; health_timeout: the frontend's /health;
    serve_timeout: wait_all_serving's default; log_dir: every playbook's output is kept there.
    """

    def __init__(self, inventory=None, env=None, log_dir=None, request_timeout=60, health_timeout=30,
                 serve_timeout=300):
        self.inventory = os.path.abspath(inventory or default_inventory())
        self.extra_env = dict(env or {})
        self.log_dir = log_dir
        self.request_timeout, self.health_timeout, self.serve_timeout = request_timeout, health_timeout, serve_timeout
        self._data = None
        self._hosts = {}
        self._runs = 0

    @classmethod
    def of_copy(cls, base, **kwargs):
        """The copy sandbox_copy.make_copy(base, ...) wrote: its fact cache, verify report and logs under base."""
        return cls(os.path.join(base, "inventory"), env=copy_env(base), log_dir=os.path.join(base, "logs"), **kwargs)

    def env(self, extra=None):
        """Environment of an Ansible run: this one's, no colours, the venv's tools first."""
        return {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "PATH": BIN + os.pathsep + os.environ["PATH"],
                **self.extra_env, **(extra or {})}

    # The inventory.
    @property
    def data(self):
        if self._data is None:
            self.refresh()
        return self._data

    def refresh(self):
        out = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", self.inventory, "--list"], check=True,
                             capture_output=True, text=True, cwd=REPO, env=self.env()).stdout
        self._data = json.loads(out)
        return self

    @property
    def hostvars(self):
        return self.data["_meta"]["hostvars"]

    def group(self, name):
        """Hosts of a group, its child groups' hosts included (in inventory order, no repeats)."""
        out = list(self.data.get(name, {}).get("hosts", []))
        for child in self.data.get(name, {}).get("children", []):
            out += [h for h in self.group(child) if h not in out]
        return out

    def address(self, host):
        return self.hostvars[host]["kvshare_bind_address"]

    @property
    def frontend(self):
        return self.group("dynamo_frontend")[0]

    @property
    def frontend_url(self):
        port = self.hostvars[self.frontend].get("dynamo_frontend_http_port") or service_defaults()["dynamo_frontend_http_port"]
        return "http://%s:%s" % (self.address(self.frontend), port)

    def workers(self):
        """[(host, worker)] for every worker in the inventory."""
        return [(host, worker) for host in self.group("dynamo_workers")
                for worker in self.hostvars[host].get("dynamo_workers", [])]

    def worker_map(self):
        """{"host/name": (host, worker)} for every worker."""
        return dict(("%s/%s" % (host, worker["name"]), (host, worker)) for host, worker in self.workers())

    def render(self, value, host=None):
        """The few inventory templates the sandbox uses for paths and names, rendered without Ansible."""
        out = str(value).replace("{{ sandbox_dir }}", SANDBOX_DIR)
        out = out.replace("{{ etcd_cluster_name | default('kvshare') }}", "kvshare")
        if host:
            out = out.replace("{{ inventory_hostname }}", host)
        assert "{{" not in out, "cannot render %r" % value
        return out

    def sandbox_var(self, name, default=None):
        """A sandbox group variable (as a sandbox host has it), unrendered."""
        return self.hostvars[self.group("sandbox")[0]].get(name, default)

    def container(self, host):
        return self.render(self.sandbox_var("sandbox_container_name"), host)

    # Commands on the hosts.
    def ssh_host(self, host):
        """A testinfra host over SSH (made once per host; forget_host() drops it, e.g. after a reboot)."""
        if host not in self._hosts:
            import testinfra
            # timeout: ssh's ConnectTimeout, which also bounds the wait for sshd's banner. The hosts'
            # sshd shares two cores with every CI lane, and testinfra's 10 s ran out once (CI 22, a
            # steady molecule check). A host that is down still fails at once (connection refused).
            self._hosts[host] = testinfra.get_host("ssh://root@%s:%d" % (self.address(host), SSH_PORT),
                                                   ssh_identity_file=ssh_key(), ssh_extra_args=SSH_OPTIONS,
                                                   timeout=30)
        return self._hosts[host]

    def forget_host(self, host):
        self._hosts.pop(host, None)

    def ssh(self, host, command, check=True):
        """stdout of `command` run by the ssh client as root on the host (asserts rc 0 when check)."""
        cmd = ["ssh", "-i", ssh_key(), "-p", str(SSH_PORT)] + SSH_OPTIONS.split() + ["root@%s" % self.address(host), command]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check:
            assert res.returncode == 0, "ssh %s %r failed: %s" % (host, command, res.stderr)
        return res.stdout

    def podman_exec(self, host, command, check=True):
        return podman_exec(self.container(host), command, check)

    # Playbooks.
    def playbook(self, *args, timeout=1500, env=None, log=None):
        """ansible-playbook -i <inventory> *args: (CompletedProcess, seconds). With a log_dir, the
        whole output is kept in <log_dir>/NN-<log or playbook name>.log."""
        t0 = time.monotonic()
        res = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", self.inventory] + list(args), cwd=REPO,
                             capture_output=True, text=True, timeout=timeout, env=self.env(env), check=False)
        took = time.monotonic() - t0
        if self.log_dir:
            self._runs += 1
            name = log or os.path.basename(next((a for a in args if a.endswith(".yml")), "run")).replace(".yml", "")
            os.makedirs(self.log_dir, exist_ok=True)
            with open(os.path.join(self.log_dir, "%02d-%s.log" % (self._runs, name)), "w") as handle:
                handle.write("# ansible-playbook %s\n# rc=%d, %.1f s\n%s%s"
                             % (" ".join(args), res.returncode, took, res.stdout, res.stderr))
        return res, took

    def playbook_json(self, *args, timeout=1500, env=None, log=None):
        """playbook() with the ansible.posix.json callback: (CompletedProcess, its document or None)."""
        res, dummy = self.playbook(*args, timeout=timeout, log=log,
                                   env=dict(env or {}, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"))
        try:
            doc, dummy = json.JSONDecoder().raw_decode(res.stdout[res.stdout.index("{"):])
        except ValueError:
            doc = None
        return res, doc

    def popen_playbook(self, *args, env=None):
        """ansible-playbook started in its own process group, output (merged) on .stdout as it comes."""
        cmd = [os.path.join(BIN, "ansible-playbook"), "-i", self.inventory] + list(args)
        return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=self.env({"PYTHONUNBUFFERED": "1", **(env or {})}), start_new_session=True)

    # The frontend and the workers behind it.
    def generate_instances(self, timeout=None):
        """Frontend /health generate instances: [(instance_id, component, transport host:port)]."""
        status, body = http_json(self.frontend_url + "/health?instances=true", timeout=timeout or self.health_timeout)
        assert status == 200 and isinstance(body, dict), "frontend /health: %s %s" % (status, body)
        out = []
        for inst in body.get("instances", []):
            if inst.get("endpoint") != "generate":
                continue
            tcp = (inst.get("transport") or {}).get("tcp") or ""
            out.append((int(inst["instance_id"]), inst["component"], tcp.split("/", 1)[0]))
        return out

    def instance_of(self, host, worker):
        """Instance ids registered by this worker (matched by its pinned request-plane port)."""
        target = "%s:%s" % (self.address(host), worker["rpc_port"])
        return [iid for iid, dummy, hostport in self.generate_instances() if hostport == target]

    def instance_map(self):
        """{"host/name": [instance ids]} of the workers the frontend lists ({} when it does not answer)."""
        try:
            listed = self.generate_instances()
        except AssertionError:
            return {}
        rpc = dict(("%s:%s" % (self.address(h), w["rpc_port"]), key) for key, (h, w) in self.worker_map().items())
        out = {}
        for iid, dummy, hostport in listed:
            if hostport in rpc:
                out.setdefault(rpc[hostport], []).append(iid)
        return out

    def completion(self, worker, instance_id, prompt="hello world", max_tokens=2, timeout=None):
        """(status, body) of a completion routed to this instance of the worker."""
        return http_json(self.frontend_url + "/v1/completions", {
            "model": worker.get("served_model_name", worker["model"]), "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0, "nvext": {"backend_instance_id": instance_id}}, timeout=timeout or self.request_timeout)

    def worker_serving(self, host, worker, exclude=(), **completion_args):
        """An instance id of this worker that answers a direct-routed completion, or None."""
        try:
            for iid in self.instance_of(host, worker):
                if iid not in exclude and self.completion(worker, iid, **completion_args)[0] == 200:
                    return iid
        except (OSError, AssertionError, ValueError):
            return None
        return None

    def serving(self, only=None, need_all=False, **completion_args):
        """{"host/name": instance id} of the workers (those in `only`) answering a direct-routed
        completion; with need_all, None as soon as one does not."""
        ids = self.instance_map()
        out = {}
        for key, (dummy, worker) in self.worker_map().items():
            if only is not None and key not in only:
                continue
            iid = next((i for i in ids.get(key, []) if self.completion(worker, i, **completion_args)[0] == 200), None)
            if iid is None and need_all:
                return None
            if iid is not None:
                out[key] = iid
        return out

    def wait_all_serving(self, timeout=None, only=None, interval=0.5):
        """serving() once every worker (those in `only`) serves, polled every `interval` s."""
        timeout = timeout or self.serve_timeout
        want = set(k for k in self.worker_map() if only is None or k in only)
        deadline = time.monotonic() + timeout
        while True:
            got = self.serving(only)
            if set(got) == want:
                return got
            if time.monotonic() >= deadline:
                raise AssertionError("not every worker serves after %ss: %s of %s" % (timeout, sorted(got), sorted(want)))
            time.sleep(interval)
