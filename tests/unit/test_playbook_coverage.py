# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""tests/playbook_coverage.py counts what ran on hosts, from records written by real ansible-playbook runs
(the test-only callback tests/callback_plugins/kvshare_run_record.py, KVSHARE_RUN_RECORD set).

The "remote" host is reached through ansible's ssh connection plugin, with ansible_ssh_executable the
ssh test double (tests/doubles/ssh/ssh_standin.py: runs the remote command here, loopback only), so its
tasks really go through the ssh plugin (pipelining, interpreter discovery) without a network."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import playbook_coverage as pc  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)
CALLBACKS = os.path.join(REPO, "tests", "callback_plugins")
SSH_DOUBLE = os.path.join(REPO, "tests", "doubles", "ssh", "ssh_standin.py")

# A stand-in for playbooks/: what each file exercises.
DEMO = {
    # only skipped tasks on the ssh host, and imports of the others
    "entry.yml": """
- name: Tasks over ssh (imported)
  ansible.builtin.import_playbook: imported.yml
- name: Tasks with connection local (imported)
  ansible.builtin.import_playbook: local.yml
- name: Only skipped tasks on the ssh host
  hosts: remote
  gather_facts: false
  tasks:
    - name: Skipped
      ansible.builtin.command: "true"
      when: false
      changed_when: false
- name: A controller-only playbook (imported)
  ansible.builtin.import_playbook: controller.yml
- name: A failing task over ssh (imported, last)
  ansible.builtin.import_playbook: failing.yml
""",
    "imported.yml": """
- name: Run a command over the ssh connection plugin
  hosts: remote
  gather_facts: false
  tasks:
    - name: Echo on the remote host
      ansible.builtin.command: echo over-ssh
      changed_when: false
    - name: Echo on the controller (delegated)
      ansible.builtin.command: echo delegated
      delegate_to: localhost
      changed_when: false
""",
    "local.yml": """
- name: Run a command with connection local
  hosts: offline
  gather_facts: false
  tasks:
    - name: Echo on the controller
      ansible.builtin.command: echo local
      changed_when: false
""",
    "controller.yml": """
- name: Run on the controller only
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Echo on the controller
      ansible.builtin.command: echo controller
      changed_when: false
""",
    "failing.yml": """
- name: Fail over ssh on purpose
  hosts: remote
  gather_facts: false
  tasks:
    - name: A failure that a rescue handles does not fail the run
      block:
        - name: Fail inside a block
          ansible.builtin.command: "false"
          changed_when: false
      rescue:
        - name: Rescued
          ansible.builtin.debug:
            msg: rescued
    - name: Fail
      ansible.builtin.command: "false"
      changed_when: false
""",
    "never.yml": """
- name: Never run
  hosts: all
  gather_facts: false
  tasks:
    - name: Nothing
      ansible.builtin.debug:
        msg: never
""",
}


def _env(tmp, records, **extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCAL_TEMP=str(tmp / "tmp"), ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp / "cp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_CALLBACK_PLUGINS=CALLBACKS, KVSHARE_RUN_RECORD=str(records),
               KVSHARE_RUN_SUITE="")
    env.pop("MOLECULE_SCENARIO_NAME", None)
    env.update(extra)
    return env


def _records(rdir):
    files = sorted(os.listdir(rdir))
    return files, pc.load_records(str(rdir))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One real run of entry.yml: (CompletedProcess, playbooks dir, record dir)."""
    tmp = tmp_path_factory.mktemp("coverage")
    pdir, rdir = tmp / "playbooks", tmp / "records"
    pdir.mkdir()
    for name, text in DEMO.items():
        (pdir / name).write_text("---" + text)
    ssh = tmp / "ssh"
    ssh.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, SSH_DOUBLE))
    ssh.chmod(0o755)
    (tmp / "hosts.yml").write_text(
        "all:\n  children:\n"
        "    remote:\n      hosts:\n        r1:\n          ansible_host: 127.0.0.1\n          ansible_connection: ssh\n"
        "          ansible_ssh_executable: %s\n          ansible_python_interpreter: %s\n"
        "    offline:\n      hosts:\n        l1:\n          ansible_connection: local\n"
        "          ansible_python_interpreter: %s\n" % (ssh, sys.executable, sys.executable))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "hosts.yml", "playbooks/entry.yml"],
                          cwd=str(tmp), env=_env(tmp, rdir), capture_output=True, text=True, timeout=300, check=False)
    return proc, pdir, rdir


def test_the_run_writes_one_record_beside_the_other_callbacks(demo):
    proc, pdir, rdir = demo
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]          # failing.yml's last task, on purpose
    assert "TASKS RECAP" in out, out[-3000:]           # ansible.posix.profile_tasks (ansible.cfg) still ran
    assert "Echo on the remote host" in out            # and the default stdout callback
    files, records = _records(rdir)
    assert len(files) == 1 and files[0].endswith(".jsonl") and len(records) == 1, files
    record = records[0]
    assert record["complete"] and record["version"] == 1 and not record["check"]
    assert record["playbook"] == "playbooks/entry.yml"
    assert record["playbook_path"] == os.path.realpath(str(pdir / "entry.yml"))
    assert record["start"] <= record["end"]
    assert record["stats"]["r1"]["failures"] == 1 and record["stats"]["r1"]["rescued"] == 1, record["stats"]
    assert record["stats"]["l1"]["failures"] == 0
    # PYTEST_CURRENT_TEST reaches ansible-playbook from the test that started it (here: this module's first test)
    assert "tests/unit/test_playbook_coverage.py::" in record["launcher"]["PYTEST_CURRENT_TEST"], record["launcher"]


def test_each_playbook_file_records_its_own_hosts_and_connections(demo):
    dummy, pdir, rdir = demo
    entries = _records(rdir)[1][0]["playbooks"]
    real = {name: os.path.realpath(str(pdir / name)) for name in DEMO}
    assert set(entries) == {real[n] for n in ("entry.yml", "imported.yml", "local.yml", "controller.yml", "failing.yml")}
    imported = entries[real["imported.yml"]]["hosts"]
    assert imported["r1"]["ran"] == {"ssh": 1}, imported           # the task ran through the ssh plugin
    assert imported["localhost"]["ran"] == {"local": 1}, imported  # the delegated one on the controller
    assert entries[real["local.yml"]]["hosts"] == {
        "l1": {"ran": {"local": 1}, "skipped": 0, "changed": 0, "failed": 0, "unreachable": 0}}
    assert entries[real["entry.yml"]]["hosts"]["r1"]["ran"] == {} and entries[real["entry.yml"]]["hosts"]["r1"]["skipped"] == 1
    assert [p["name"] for p in entries[real["entry.yml"]]["plays"]] == ["Only skipped tasks on the ssh host"]
    assert entries[real["failing.yml"]]["hosts"]["r1"]["failed"] == 2   # the rescued failure and the last one


def test_only_tasks_run_on_hosts_count(demo):
    dummy, pdir, rdir = demo
    rows = {r["name"]: r for r in pc.table(pc.load_records(str(rdir)), str(pdir))}
    assert set(rows) == {n[:-4] for n in DEMO}
    # (b, c) a task over ssh counts, for the imported file, via the playbook given
    assert rows["imported"]["runs"] == 1 and rows["imported"]["via"] == {os.path.realpath(str(pdir / "entry.yml"))}
    # (a) connection local only: not a run against hosts, shown as such
    assert rows["local"]["runs"] == 0 and rows["local"]["local_only"] == 1
    # (d) only skipped tasks on the ssh host: not a run
    assert rows["entry"]["runs"] == 0 and rows["entry"]["local_only"] == 0
    # a playbook whose only target is the controller counts its localhost tasks
    assert rows["controller"]["controller_only"] and rows["controller"]["runs"] == 1
    assert rows["failing"]["runs"] == 1 and rows["failing"]["failed"] == 1
    assert rows["imported"]["failed"] == 0 and rows["never"]["runs"] == 0
    assert all(label.startswith("tests/unit/test_playbook_coverage.py::") for label in rows["imported"]["launchers"])
    text = pc.render(list(rows.values()), [None], str(rdir))
    assert text.endswith("playbooks run against hosts in this CI run: 3/6"), text
    assert "NOT RUN against hosts; 1 run(s) with connection local only" in text, text


def _record(playbook, files, launcher=None, check=False, complete=True, failures=0):
    """A record as the callback writes it: files {path: {host: connection}}, one task run per host."""
    hosts = {h for per_host in files.values() for h in per_host}
    return {"version": 1, "pid": 1, "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:01:00.000Z",
            "complete": complete, "playbook": playbook, "playbook_path": os.path.join(REPO, playbook), "check": check,
            "skip_tags": [], "launcher": dict({"KVSHARE_RUN_SUITE": None, "PYTEST_CURRENT_TEST": None}, **(launcher or {})),
            "playbooks": {os.path.join(REPO, path): {"plays": [], "hosts": {
                host: {"ran": {connection: 1}, "skipped": 0, "changed": 0, "failed": failures, "unreachable": 0}
                for host, connection in per_host.items()}} for path, per_host in files.items()},
            "stats": {h: {"failures": failures, "unreachable": 0} for h in hosts}}


def test_the_gate_counts_shipped_playbooks_from_records(tmp_path, capsys):
    """(e) a real run of the shipped prometheus_targets.yml (stdout callback ansible.posix.json, callbacks_enabled
    overridden as bench.py and other tests do: the record still comes), plus recorded rollouts."""
    rdir = tmp_path / "records"
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    sb1:\n      ansible_host: 127.0.0.1\n")
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           "playbooks/prometheus_targets.yml", "-e", "prometheus_sd_dir=%s" % (tmp_path / "sd")],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                          env=_env(tmp_path, rdir, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                                   ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.default"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert json.loads(proc.stdout[proc.stdout.index("{"):])["stats"]["localhost"]["changed"] == 2
    total = len(pc.playbooks())
    assert total >= 13

    assert pc.main([str(rdir)]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith("playbooks run against hosts in this CI run: 1/%d" % total), out
    row = next(line.split() for line in out.splitlines() if line.startswith("  prometheus_targets.yml "))
    assert row[1:4] == ["1", "0", "0"] and row[4].startswith("tests/unit/test_playbook_coverage.py::test_the_gate"), out

    with open(rdir / "1.jsonl", "w", encoding="utf-8") as handle:
        for record in (
                # molecule converge: converge.yml -> playbooks/site.yml, which imports validate.yml and etcd.yml
                _record("molecule/default/converge.yml",
                        {"playbooks/site.yml": {"sb1": "ssh", "localhost": "local"},
                         "playbooks/validate.yml": {"sb1": "ssh"}, "playbooks/etcd.yml": {"sb1": "ssh"}},
                        launcher={"MOLECULE_SCENARIO_NAME": "default"}),
                # an offline validation: connection local on every host
                _record("playbooks/validate.yml", {"playbooks/validate.yml": {"sb1": "local", "sb2": "local"}},
                        launcher={"PYTEST_CURRENT_TEST": "tests/validation/test_offline_validation.py::test_x (call)"}),
                # a failed verify.yml from a molecule verify test, killed before its stats
                _record("verify.yml", {"playbooks/verify.yml": {"sb2": "ssh"}}, failures=1, complete=False,
                        launcher={"MOLECULE_SCENARIO_NAME": "default",
                                  "PYTEST_CURRENT_TEST": "molecule/default/tests/test_3_sharing.py::test_share (call)"}),
                # teardown.yml over a non-kvshare directory is not the shipped one
                _record("elsewhere/playbooks/teardown.yml", {"elsewhere/playbooks/teardown.yml": {"sb1": "ssh"}})):
            handle.write(json.dumps(record) + "\n")
    assert pc.main([str(rdir), "--allow-missing"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("playbooks run against hosts in this CI run: 5/%d" % total), out
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line.startswith("  ") and line.split()[0].endswith(".yml")}
    assert rows["site.yml"].split()[1:4] == ["1", "0", "0"] and "molecule default converge" in rows["site.yml"], out
    assert rows["validate.yml"].split()[1] == "1" and "1 run(s) with connection local only" not in rows["validate.yml"], out
    assert rows["verify.yml"].split()[1:4] == ["1", "0", "1"], out
    assert "molecule default verify: molecule/default/tests/test_3_sharing.py::test_share" in rows["verify.yml"], out
    assert rows["teardown.yml"].split()[1] == "0", out
    lines = out.splitlines()
    assert lines[lines.index(rows["site.yml"]) + 1].split() == ["via", "molecule/default/converge.yml"], out
    assert "via verify.yml" in out, out
    assert pc.main([str(tmp_path / "absent")]) == 1
    assert "playbooks run against hosts in this CI run: 0/%d" % total in capsys.readouterr().out

    # --pending: the named playbooks may be missing (said so), every other one may not; naming one
    # that ran, or no shipped playbook, fails: the list only shrinks.
    missing = [name for name in pc.playbooks() if name not in ("site", "validate", "etcd", "verify", "prometheus_targets")]
    assert pc.main([str(rdir)] + ["--pending=%s=why not" % name for name in missing]) == 0
    out = capsys.readouterr().out
    assert "NOT RUN against hosts (pending: why not)" in out, out
    assert pc.main([str(rdir)] + ["--pending=%s=why not" % name for name in missing[1:]]) == 1
    capsys.readouterr()
    assert pc.main([str(rdir), "--pending=site=x"] + ["--pending=%s=why not" % name for name in missing]) == 1
    assert "--pending names playbooks that ran: site" in capsys.readouterr().out
    assert pc.main([str(rdir), "--pending=nosuch=x"] + ["--pending=%s=why not" % name for name in missing]) == 1
    assert "--pending names no shipped playbook: nosuch" in capsys.readouterr().out


def test_launcher_labels():
    def label(**kw):
        playbook = kw.pop("playbook", "molecule/default/converge.yml")
        record = {"playbook": playbook, "playbook_path": os.path.join(REPO, playbook), "check": kw.pop("check", False),
                  "skip_tags": kw.pop("skip_tags", []), "launcher": kw}
        return pc.launcher(record)
    assert label(MOLECULE_SCENARIO_NAME="default") == "molecule default converge"
    assert label(MOLECULE_SCENARIO_NAME="default", skip_tags=["molecule-notest", "molecule-idempotence-notest"]) \
        == "molecule default idempotence"
    assert label(MOLECULE_SCENARIO_NAME="default", check=True) == "molecule default check"
    assert label(PYTEST_CURRENT_TEST="tests/day2/test_1_observe.py::test_status (setup)") \
        == "tests/day2/test_1_observe.py::test_status (setup)"
    assert label(KVSHARE_RUN_SUITE="unit", PYTEST_CURRENT_TEST="tests/unit/test_a.py::test_b (call)") == "unit: tests/unit/test_a.py::test_b"
    assert label(playbook="site.yml") == "ansible-playbook site.yml (no test)"


def test_the_callback_is_inert_without_a_record_dir(monkeypatch):
    spec = importlib.util.spec_from_file_location("kvshare_run_record", os.path.join(CALLBACKS, "kvshare_run_record.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.CallbackModule.CALLBACK_NEEDS_ENABLED is False and module.CallbackModule.CALLBACK_TYPE == "aggregate"
    monkeypatch.delenv("KVSHARE_RUN_RECORD", raising=False)
    assert module.CallbackModule().disabled


def test_the_ssh_double_refuses_non_loopback_hosts():
    spec = importlib.util.spec_from_file_location("ssh_standin", SSH_DOUBLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.is_loopback("127.0.0.1") and module.is_loopback("root@127.0.10.2") and module.is_loopback("localhost")
    assert not module.is_loopback("192.0.2.1") and not module.is_loopback("gpu-node-1")
    assert module.main(["ssh", "-o", "X=y", "192.0.2.1", "true"]) == 255
