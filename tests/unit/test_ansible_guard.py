# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The loopback guard (tests/ansible_guard.py, installed by tests/conftest.py) refuses what it must.

Nothing here can reach a host even if the guard failed: the playbooks run no task on a far host
except through ssh stand-ins (which record their call and connect nowhere), ssh itself is only asked
``ssh -G`` (prints its configuration, connects nowhere), the socket checks use UDP, whose connect()
sends nothing, and where a fresh network namespace can be made the runs happen inside one (only lo).
"""
import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

import ansible_guard as guard

BIN = os.path.dirname(sys.executable)
PLAYBOOK = os.path.join(BIN, "ansible-playbook")
needs_ansible = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-inventory")),
                                   reason="ansible-inventory not in the venv")


def inventory(tmp_path, hosts):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return str(path)


def noop_play(tmp_path):
    path = tmp_path / "noop.yml"
    path.write_text("- name: Nothing\n  hosts: all\n  gather_facts: false\n  tasks: []\n")
    return str(path)


@pytest.mark.parametrize("address,loopback", [
    ("127.0.0.1", True), ("127.0.10.3", True), ("::1", True), ("localhost", True), ("[::1]", True),
    ("192.0.2.1", False), ("10.0.1.11", False), ("0.0.0.0", False), ("gpu-node-1", False), ("", False),
])
def test_is_loopback(address, loopback):
    assert guard.is_loopback(address) is loopback


def test_runs_that_connect_nowhere_are_not_resolved():
    # a missing inventory would fail resolution: these never get that far
    missing = "/nonexistent/inventory.yml"
    assert guard.violations([PLAYBOOK, "-i", missing, "site.yml", "--syntax-check"]) == []
    assert guard.violations([PLAYBOOK, "-i", missing, "playbooks/validate.yml", "-e", "kvshare_validate_offline=true"]) == []
    assert guard.violations([PLAYBOOK, "-i", missing, "playbooks/validate.yml", "-e", '{"kvshare_validate_offline": true}']) == []
    assert guard.violations(["/usr/bin/git", "status"]) == []


@needs_ansible
def test_non_loopback_hosts_are_refused(tmp_path):
    inv = inventory(tmp_path, {"a": {"ansible_host": "127.0.10.1"}, "b": {"ansible_host": "192.0.2.1"},
                               "c": {"ansible_host": "10.0.1.11", "ansible_connection": "local"}, "gpu-node-1": None,
                               "kvh-maru": {"ansible_connection": "containers.podman.podman"}})
    found = guard.violations([PLAYBOOK, "-i", inv, "site.yml"])
    assert found == ["b: ansible_host 192.0.2.1 over ssh is not loopback",
                     "gpu-node-1: ansible_host gpu-node-1 over ssh is not loopback"]
    # --limit narrows what is checked, the offline flag outside validate.yml does not count
    assert guard.violations([PLAYBOOK, "-i", inv, "site.yml", "--limit", "a,c,kvh-maru"]) == []
    assert len(guard.violations([PLAYBOOK, "-i", inv, "site.yml", "-e", "kvshare_validate_offline=true"])) == 2
    # --connection local keeps every host on this machine
    assert guard.violations([PLAYBOOK, "-i", inv, "site.yml", "-c", "local"]) == []


@needs_ansible
def test_extra_vars_count(tmp_path):
    inv = inventory(tmp_path, {"a": {"ansible_host": "127.0.0.1"}})
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml", "-e", "ansible_host=192.0.2.1"]) == [
        "a: ansible_host 192.0.2.1 over ssh is not loopback"]
    extra = tmp_path / "extra.yml"
    extra.write_text("ansible_host: 198.51.100.7\n")
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml", "-e", "@%s" % extra]) == [
        "a: ansible_host 198.51.100.7 over ssh is not loopback"]
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml", "-e", "ansible_port=9"]) == []


@needs_ansible
def test_installed_guard_stops_the_run_and_fails_the_test(tmp_path):
    inv = inventory(tmp_path, {"b": {"ansible_host": "203.0.113.5"}})
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="203.0.113.5"):
        subprocess.run([PLAYBOOK, "-i", inv, noop_play(tmp_path)], capture_output=True, timeout=60, check=False)
    # recorded: conftest fails the test even where the refusal was caught; cleared here on purpose
    assert len(guard.RECORDED) == 1
    del guard.RECORDED[:]
    ok = inventory(tmp_path, {"a": {"ansible_host": "127.0.0.1", "ansible_connection": "local"}})
    proc = subprocess.run([PLAYBOOK, "-i", ok, noop_play(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_sockets_of_the_test_process_stay_on_loopback():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        with pytest.raises(guard.NonLoopbackAnsibleRun, match="192.0.2.1"):
            sock.connect(("192.0.2.1", 9))
        assert sock.connect_ex(("127.0.0.1", 9)) == 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        with pytest.raises(guard.NonLoopbackAnsibleRun):
            sock.connect_ex(("10.0.0.1", 9))
    assert len(guard.RECORDED) == 2
    del guard.RECORDED[:]


def test_a_self_reference_is_followed_and_anything_else_refused():
    """ansible-inventory does not template: `{{ kvshare_bind_address }}` (the sandbox's ansible_host)
    is read as the host's own variable; an expression it cannot follow stays and is refused."""
    host_vars = {"kvshare_bind_address": "127.0.10.2", "alias": "{{ kvshare_bind_address }}", "lan": "192.0.2.9"}
    assert guard.resolve_reference("{{ kvshare_bind_address }}", host_vars) == "127.0.10.2"
    assert guard.resolve_reference("{{alias}}", host_vars) == "127.0.10.2"
    assert guard.resolve_reference("{{ lan }}", host_vars) == "192.0.2.9"
    assert guard.resolve_reference("{{ missing }}", host_vars) == "{{ missing }}"
    assert not guard.is_loopback(guard.resolve_reference("{{ groups['x'][0] }}", host_vars))


@needs_ansible
def test_the_sandbox_inventory_resolves_to_loopback():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    hosts = guard.resolved_hosts([PLAYBOOK, "-i", os.path.join(repo, "inventories", "sandbox"), "site.yml"], cwd=repo)
    assert hosts and all(guard.is_loopback(address) for dummy, address in hosts.values()), hosts
    assert guard.violations([PLAYBOOK, "-i", os.path.join(repo, "inventories", "sandbox"), "site.yml"], cwd=repo) == []


# -- issue 33 item 5: every way a test run can reach a host ------------------------------------------

FAR = "10.0.0.5"  # never contacted: every check below refuses before a packet could leave
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUARD_DIR = os.path.join(REPO, "tests", "loopback_guard")
UNSHARE = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
REAL_SSH = guard.real_program("ssh")
needs_ssh = pytest.mark.skipif(not REAL_SSH, reason="no ssh client (ssh -G evaluates the target)")


def _netns_usable():
    try:
        return subprocess.run(UNSHARE + ["true"], capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# Where a fresh network namespace can be made, the runs below happen inside one (only a down lo):
# even a guard that failed could not send a packet. The stand-ins prove the refusal came first.
NETNS = UNSHARE if _netns_usable() else []


def write_play(tmp_path, text):
    path = tmp_path / "play.yml"
    path.write_text(text)
    return str(path)


def recorder(tmp_path, name="ssh-standin", run=False):
    """An executable that records its argv (one JSON line in <name>.calls); with run, it then runs
    the last argument (ssh's remote command) here with /bin/sh -c, as a local stand-in for ssh."""
    calls = tmp_path / (name + ".calls")
    path = tmp_path / name
    tail = "os.execv('/bin/sh', ['/bin/sh', '-c', sys.argv[-1]])" if run else "sys.exit(255)"
    path.write_text("#!%s\nimport json, os, sys\nwith open(%r, 'a') as fh:\n    fh.write(json.dumps(sys.argv[1:]) + '\\n')\n%s\n"
                    % (sys.executable, str(calls), tail))
    path.chmod(0o755)
    return str(path), calls


def safe_ssh(tmp_path):
    """A directory with an ``ssh`` stand-in that records its call and connects nowhere (``ssh -G``,
    which connects nowhere either, goes on to the real ssh): what runs if the guard let a call through."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "ssh.calls"
    path = bindir / "ssh"
    path.write_text("#!%s\nimport json, os, sys\nif '-G' in sys.argv:\n    os.execv(%r, [%r] + sys.argv[1:])\n"
                    "with open(%r, 'a') as fh:\n    fh.write(json.dumps(sys.argv[1:]) + '\\n')\nsys.exit(255)\n"
                    % (sys.executable, REAL_SSH, REAL_SSH, str(calls)))
    path.chmod(0o755)
    return str(bindir), calls


def calls_of(calls):
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def run_playbook(inv, play, env_extra=None):
    """ansible-playbook through the installed guard (static check, run-time guard injected), in a fresh
    network namespace where one can be made; ssh's stand-ins are chained behind the guard's wrapper."""
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="false", ANSIBLE_RETRY_FILES_ENABLED="false", **(env_extra or {}))
    return subprocess.run(NETNS + [PLAYBOOK, "-i", inv, play], capture_output=True, text=True,
                          timeout=300, check=False, env=env, cwd=os.path.dirname(play))


def loopback_inventory(tmp_path, **host_vars):
    return inventory(tmp_path, {"a": dict({"ansible_host": "127.0.0.1", "ansible_python_interpreter": sys.executable},
                                          **host_vars)})


def taken(match):
    """The refusals recorded so far (then forgotten: this test expected them), each naming match."""
    refused = guard.take_refusals()
    assert refused and all(match in line for line in refused), refused
    return refused


@needs_ansible
def test_ansible_ssh_host_counts_in_inventory_host_vars_group_vars_and_beside_the_playbook(tmp_path):
    inv = inventory(tmp_path, {"a": {"ansible_ssh_host": FAR},
                               "b": {"ansible_host": "127.0.0.1", "ansible_ssh_host": "10.0.0.6"},
                               "c": {"ansible_host": "127.0.0.3"}})
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml"]) == [
        "a: ansible_ssh_host 10.0.0.5 over ssh is not loopback", "b: ansible_ssh_host 10.0.0.6 over ssh is not loopback"]
    assert guard.violations([PLAYBOOK, "-i", inv, "x.yml", "-e", "ansible_ssh_host=10.0.0.7", "--limit", "c"]) == [
        "c: ansible_ssh_host 10.0.0.7 over ssh is not loopback"]
    # a directory inventory: host_vars/ and group_vars/ beside it
    (tmp_path / "inv" / "host_vars").mkdir(parents=True)
    (tmp_path / "inv" / "group_vars").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"d": {"ansible_host": "127.0.0.4"},
                                                                                  "e": None}}}))
    (tmp_path / "inv" / "host_vars" / "d.yml").write_text("ansible_ssh_host: 10.0.0.8\n")
    (tmp_path / "inv" / "group_vars" / "all.yml").write_text("ansible_ssh_host: \"{{ lan }}\"\nlan: 10.0.0.9\n")
    assert guard.violations([PLAYBOOK, "-i", str(tmp_path / "inv"), "x.yml"]) == [
        "d: ansible_ssh_host 10.0.0.8 over ssh is not loopback", "e: ansible_ssh_host 10.0.0.9 over ssh is not loopback"]
    # host_vars/ beside the playbook (ansible-playbook reads them; ansible-inventory --playbook-dir too)
    (tmp_path / "pb" / "host_vars").mkdir(parents=True)
    (tmp_path / "pb" / "host_vars" / "c.yml").write_text("ansible_ssh_host: 10.0.0.10\n")
    play = write_play(tmp_path / "pb", "- hosts: all\n  gather_facts: false\n  tasks: []\n")
    assert guard.violations([PLAYBOOK, "-i", inv, play, "--limit", "c"]) == [
        "c: ansible_ssh_host 10.0.0.10 over ssh is not loopback"]
    # the installed guard refuses the run before it starts
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="ansible_ssh_host 10.0.0.5"):
        subprocess.run([PLAYBOOK, "-i", inv, noop_play(tmp_path), "--limit", "a"], capture_output=True, timeout=60, check=False)
    taken(FAR)


@needs_ansible
def test_a_connection_not_known_to_stay_on_loopback_is_refused(tmp_path):
    inv = inventory(tmp_path, {
        "ssm": {"ansible_host": "127.0.0.1", "ansible_connection": "community.aws.aws_ssm"},
        "remote-podman": {"ansible_connection": "containers.podman.podman", "ansible_podman_extra_args": "--url ssh://10.0.0.5"},
        "para": {"ansible_connection": "paramiko", "ansible_host": FAR},
        "here": {"ansible_connection": "containers.podman.podman"}, "lo": {"ansible_connection": "paramiko", "ansible_host": "::1"}})
    found = guard.violations([PLAYBOOK, "-i", inv, "x.yml"])
    assert [line.split(" ")[0:2] for line in found] == [["para:", "ansible_host"], ["remote-podman:", "ansible_podman_extra_args"],
                                                        ["ssm:", "connection"]], found
    assert "not known to stay on loopback" in found[2]


def test_commands_are_read_through_their_wrappers(tmp_path):
    """env, timeout, nice, setsid, stdbuf, nohup, sh/bash -c (cd, assignments, export, pipes),
    python -m ansible, a shell script file: what runs in the end, with its environment and directory."""
    def ansible_runs(argv, env=None):
        return [(os.path.basename(i.argv[0]), i.argv[1:], i.env.get("X"), i.cwd)
                for i in guard.invocations(argv, cwd="/start", env=env or {"PATH": "/bin"})
                if os.path.basename(i.argv[0]).startswith("ansible")]
    want = [("ansible-playbook", ["-i", "inv", "x.yml"], "1", "/start")]
    assert ansible_runs(["env", "X=1", PLAYBOOK, "-i", "inv", "x.yml"]) == want
    assert ansible_runs(["timeout", "-s", "KILL", "5", "env", "-u", "Y", "X=1", PLAYBOOK, "-i", "inv", "x.yml"]) == want
    assert ansible_runs(["nice", "-n", "5", "setsid", "-w", "stdbuf", "-oL", "nohup", "env", "X=1", PLAYBOOK,
                         "-i", "inv", "x.yml"]) == want
    assert ansible_runs(["sh", "-c", "X=1 ansible-playbook -i inv x.yml 2>&1 | tee log"]) == want
    assert ansible_runs(["bash", "-euo", "pipefail", "-c", "cd /srv && export X=2; timeout 5 ansible -i inv all -m ping; "
                         "echo done"]) == [("ansible", ["-i", "inv", "all", "-m", "ping"], "2", "/srv")]
    assert ansible_runs(["env", "-C", "/w", "X=3", "sh", "-c", "$(echo) ansible-inventory --list"]) == [
        ("ansible-inventory", ["--list"], "3", "/w")]
    assert ansible_runs([sys.executable, "-m", "ansible", "playbook", "-i", "inv", "x.yml"], {"X": "1"}) == want
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\nset -e\nif true; then\n  X=1 ansible-playbook -i inv x.yml\nfi\n")
    assert ansible_runs(["sh", str(script)]) == want
    # env -i drops everything, sudo without -E most: the run-time guard is checked again there
    assert [i.env for i in guard.invocations(["env", "-i", "A=1", PLAYBOOK], env={"B": "2"})] == [{"A": "1"}]


@needs_ansible
def test_wrapped_ansible_runs_are_refused_before_they_start(tmp_path):
    inv = inventory(tmp_path, {"far": {"ansible_host": FAR}})
    play = noop_play(tmp_path)
    marker = tmp_path / "started"
    commands = [
        (["env", "X=1", PLAYBOOK, "-i", inv, play], {}),
        (["sh", "-c", "touch %s; %s -i %s %s" % (marker, PLAYBOOK, inv, play)], {}),
        (["timeout", "5", PLAYBOOK, "-i", inv, play], {}),
        ("touch %s && timeout 5 env A=1 %s -i %s %s" % (marker, PLAYBOOK, inv, play), {"shell": True}),
    ]
    for argv, kwargs in commands:
        with pytest.raises(guard.NonLoopbackAnsibleRun, match="far: ansible_host 10.0.0.5"):
            subprocess.run(argv, capture_output=True, timeout=60, check=False, **kwargs)
        taken(FAR)
    assert not marker.exists()  # refused before the shell started
    # a script the guard cannot read, and a wrapper that drops the run-time guard, are refused too
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="cannot parse the shell script"):
        subprocess.run(["sh", "-c", "ansible-playbook 'unbalanced"], capture_output=True, timeout=60, check=False)
    ok = loopback_inventory(tmp_path, ansible_connection="local")
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="drops the run-time loopback guard"):
        subprocess.run(["env", "-i", PLAYBOOK, "-i", ok, play], capture_output=True, timeout=60, check=False)
    assert len(guard.take_refusals()) == 2


@needs_ansible
@needs_ssh
def test_delegate_to_a_far_host_is_refused_at_run_time_before_ssh_runs(tmp_path):
    """The inventory is all loopback, so the static check passes; the ssh wrapper refuses 10.0.0.5."""
    standin, calls = recorder(tmp_path)
    play = write_play(tmp_path, "- hosts: a\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"
                                "      delegate_to: %s\n" % FAR)
    proc = run_playbook(loopback_inventory(tmp_path), play, {"ANSIBLE_SSH_EXECUTABLE": standin})
    assert proc.returncode != 0
    assert "loopback guard: refused ssh" in proc.stdout and "HostName 10.0.0.5 is not loopback" in proc.stdout, proc.stdout[-3000:]
    assert calls_of(calls) == []  # ssh (its stand-in here) never ran
    taken(FAR)


@needs_ansible
@needs_ssh
def test_add_host_with_a_far_address_is_refused_at_run_time_before_ssh_runs(tmp_path):
    standin, calls = recorder(tmp_path)
    play = write_play(tmp_path, "- hosts: a\n  gather_facts: false\n  tasks:\n    - ansible.builtin.add_host:\n"
                                "        name: far\n        ansible_host: %s\n        ansible_connection: ssh\n"
                                "- hosts: far\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n" % FAR)
    proc = run_playbook(loopback_inventory(tmp_path, ansible_connection="local"), play, {"ANSIBLE_SSH_EXECUTABLE": standin})
    assert proc.returncode != 0
    assert "fatal: [far]: UNREACHABLE" in proc.stdout and "HostName 10.0.0.5 is not loopback" in proc.stdout, proc.stdout[-3000:]
    assert calls_of(calls) == []
    taken(FAR)


@needs_ansible
@needs_ssh
def test_a_loopback_delegate_passes_the_wrapper(tmp_path):
    """delegate_to 127.0.0.2: the guard's wrapper lets it through to ssh (a stand-in that runs the
    command here), which gets the task's own arguments, behind the guard's -o CanonicalizeHostname=no."""
    standin, calls = recorder(tmp_path, run=True)
    play = write_play(tmp_path, "- hosts: a\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"
                                "      delegate_to: 127.0.0.2\n      vars:\n        ansible_python_interpreter: %s\n"
                                % sys.executable)
    proc = run_playbook(loopback_inventory(tmp_path), play, {"ANSIBLE_SSH_EXECUTABLE": standin, "ANSIBLE_PIPELINING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ok: [a -> 127.0.0.2]" in proc.stdout
    made = calls_of(calls)
    assert made and all(argv[:2] == ["-o", "CanonicalizeHostname=no"] and "127.0.0.2" in argv for argv in made), made


@needs_ansible
@needs_ssh
def test_an_ssh_executable_set_in_the_play_is_checked_in_ansible_itself(tmp_path):
    """ansible_ssh_executable (here a task variable) outranks ANSIBLE_SSH_EXECUTABLE: the guard inside
    ansible-playbook (its sitecustomize) checks every ssh the ssh connection plugin starts, whatever
    program it names."""
    standin, calls = recorder(tmp_path)
    play = write_play(tmp_path, "- hosts: a\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n"
                                "      delegate_to: %s\n      vars:\n        ansible_ssh_executable: %s\n" % (FAR, standin))
    proc = run_playbook(loopback_inventory(tmp_path), play)
    assert proc.returncode != 0
    assert "loopback guard: refused %s" % standin in proc.stdout, proc.stdout[-3000:]
    assert calls_of(calls) == []
    taken(FAR)


def test_python_processes_of_a_guarded_run_refuse_sockets_and_lookups(tmp_path):
    """tests/loopback_guard/sitecustomize.py, on PYTHONPATH of every guarded run: a connect outside
    loopback (UDP: connect sends nothing) and a lookup of a name not in /etc/hosts never happen."""
    if not NETNS:
        pytest.skip("no fresh network namespace: a lookup the guard let through would reach the name server")
    code = ("import socket, sys\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for call in (lambda: s.connect(('%s', 9)), lambda: socket.getaddrinfo('gpu-node-1.invalid', 22)):\n"
            "    try:\n        call()\n        print('passed')\n"
            "    except AssertionError as exc:\n        print('refused', exc)\n"
            "s.connect(('127.0.0.1', 9))\nprint('loopback ok', socket.getaddrinfo('localhost', 22)[0][4][0])\n" % FAR)
    script = tmp_path / "probe.py"
    script.write_text(code)
    lo_up = ["sh", "-c", 'ip link set lo up 2>/dev/null || /usr/sbin/ip link set lo up; exec "$0" "$1"']
    proc = subprocess.run(NETNS + lo_up + [sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          check=False, env=guard.runtime_env())
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 3, proc.stdout + proc.stderr
    assert lines[0].startswith("refused") and FAR in lines[0]
    assert lines[1].startswith("refused") and "gpu-node-1.invalid" in lines[1]
    assert lines[2].startswith("loopback ok")
    assert len(guard.take_refusals()) == 2


@needs_ssh
@pytest.mark.parametrize("args,reason", [
    ([FAR, "true"], "HostName 10.0.0.5 is not loopback"),
    (["127.0.0.1", "-o", "HostName=%s" % FAR, "true"], "HostName 10.0.0.5"),  # options after the destination count
    (["-o", "ProxyCommand=nc %h %p", "127.0.0.1", "true"], "ProxyCommand"),
    (["-J", "root@%s" % FAR, "127.0.0.1", "true"], "ProxyJump"),
    (["-W", "%s:22" % FAR, "127.0.0.1"], "ssh -W 10.0.0.5:22"),
    (["-L", "8080:%s:80" % FAR, "127.0.0.1", "true"], "forwards to 10.0.0.5"),
    (["-D", "1080", "127.0.0.1", "true"], "DynamicForward"),
    (["gpu-node-1", "true"], "HostName gpu-node-1"),
])
def test_ssh_targets_are_read_as_ssh_reads_them(args, reason):
    found = guard.ssh_violations("ssh", args)
    assert found and reason in " ".join(found), found


@needs_ssh
def test_ssh_config_is_read_too(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host alias\n  HostName %s\nHost lo\n  HostName 127.0.10.1\nHost hop\n  HostName 127.0.0.1\n"
                      "  ProxyJump far\nHost far\n  HostName %s\n" % (FAR, FAR))
    assert "HostName 10.0.0.5" in " ".join(guard.ssh_violations("ssh", ["-F", str(config), "alias", "true"]))
    assert guard.ssh_violations("ssh", ["-F", str(config), "lo", "true"]) == []
    assert "ProxyJump far is not loopback" in " ".join(guard.ssh_violations("ssh", ["-F", str(config), "hop", "true"]))
    assert guard.ssh_violations("ssh", ["-p", "2222", "root@127.0.10.2", "true"]) == []
    assert guard.ssh_violations("ssh", ["-G", FAR]) == []  # prints the configuration, connects nowhere
    assert guard.ssh_violations("scp", ["-P", "2222", "/etc/hostname", "[%s]:/tmp/x" % FAR]) != []
    assert guard.ssh_violations("scp", ["-F", str(config), "/etc/hostname", "alias:/tmp/x"]) != []
    assert guard.ssh_violations("scp", ["/etc/hostname", "root@127.0.0.1:/tmp/x", "./local"]) == []
    assert guard.ssh_violations("sftp", ["-b", "-", "sftp://root@%s:22/x" % FAR]) != []
    assert guard.ssh_violations("sftp", ["-S", "/usr/bin/ssh", "127.0.0.1"]) != []  # -S would bypass the guard's ssh


@needs_ssh
def test_ssh_from_the_test_process_and_testinfra_is_checked(tmp_path, monkeypatch):
    """What testinfra's ssh backend (molecule's verifier) and tests/lib/sandbox.py start: plain ssh,
    here the safe stand-in first on PATH."""
    import testinfra

    bindir, calls = safe_ssh(tmp_path)
    monkeypatch.setenv("PATH", bindir + os.pathsep + os.environ["PATH"])
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="HostName 10.0.0.5"):
        subprocess.run(["ssh", "-o", "BatchMode=yes", "root@%s" % FAR, "true"], capture_output=True, timeout=30, check=False)
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="HostName 10.0.0.5"):
        testinfra.get_host("ssh://root@%s:2222" % FAR).run("true")
    inv = inventory(tmp_path, {"far": {"ansible_host": FAR}})
    with pytest.raises(guard.NonLoopbackAnsibleRun, match="HostName 10.0.0.5"):
        testinfra.get_host("ansible://far", ansible_inventory=inv).run("true")
    assert calls_of(calls) == []
    assert len(guard.take_refusals()) == 3


@needs_ssh
@pytest.mark.skipif(not (guard.real_program("scp") and guard.real_program("sftp")), reason="no scp/sftp client")
def test_the_scp_and_sftp_wrappers(tmp_path):
    """ANSIBLE_SCP/SFTP_EXECUTABLE: refused outright for a far host; for a loopback one the real
    scp/sftp runs with the guard's ssh (-S), which passes it on to ssh (a recording stand-in here)."""
    for tool, args in (("sftp", ["-b", "-", "-o", "User=root"]), ("scp", ["/etc/hostname"])):
        standin, calls = recorder(tmp_path, "%s-ssh-standin" % tool)
        env = guard.runtime_env(dict(os.environ, KVSHARE_GUARD_EXEC_SSH=standin))
        far = "[%s]:/tmp/x" % FAR if tool == "scp" else FAR
        near = "[127.0.0.1]:/tmp/x" if tool == "scp" else "127.0.0.1"
        proc = subprocess.run(NETNS + [os.path.join(GUARD_DIR, tool)] + args + [far], input="", capture_output=True,
                              text=True, timeout=60, check=False, env=env)
        assert proc.returncode != 0 and "loopback guard: refused %s" % tool in proc.stderr, proc.stderr
        assert calls_of(calls) == []
        taken(FAR)
        proc = subprocess.run(NETNS + [os.path.join(GUARD_DIR, tool)] + args + [near], input="", capture_output=True,
                              text=True, timeout=60, check=False, env=env)
        assert proc.returncode != 0  # the stand-in answers nothing
        made = calls_of(calls)
        assert len(made) == 1 and made[0][:2] == ["-o", "CanonicalizeHostname=no"] and "127.0.0.1" in made[0], made


@needs_ansible
@needs_ssh
def test_the_molecule_verifier_installs_the_same_guard(tmp_path):
    """molecule/default/tests/conftest.py (the verifier's pytest never loads tests/conftest.py)."""
    inv = inventory(tmp_path, {"far": {"ansible_host": FAR}})
    bindir, calls = safe_ssh(tmp_path)
    script = tmp_path / "verifier.py"
    script.write_text(
        "import importlib.util, os, subprocess, sys\n"
        "assert 'loopback_guard' not in os.environ.get('PYTHONPATH', '')\n"
        "assert not getattr(subprocess.Popen.__init__, '_kvshare_guard', False)\n"
        "spec = importlib.util.spec_from_file_location('verifier_conftest', %r)\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "for argv in ([%r, '-i', %r, 'x.yml'], '%s root@%s true'):\n"
        "    try:\n        subprocess.run(argv, shell=isinstance(argv, str), capture_output=True, timeout=60)\n"
        "        print('ran', argv)\n"
        "    except AssertionError as exc:\n        print('refused', type(exc).__name__)\n"
        % (os.path.join(REPO, "molecule", "default", "tests", "conftest.py"), PLAYBOOK, inv, os.path.join(bindir, "ssh"), FAR))
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(NETNS + [sys.executable, str(script)], capture_output=True, text=True, timeout=180, check=False,
                          env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["refused NonLoopbackAnsibleRun"] * 2, proc.stdout + proc.stderr
    assert calls_of(calls) == []
