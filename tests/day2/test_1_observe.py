# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""status.yml (table + JSON; a stopped worker fails it) and the Prometheus file_sd targets, scraped for real."""
import json
import os
import re
import ssl
import time
import urllib.request

import d2lib as D


def test_status_table_and_json(stack, record):
    report = os.path.join(D.DAY2_DIR, "status.json")
    res, took = D.playbook("playbooks/status.yml", "-e", "status_report=%s" % report)
    D.must(res, "status.yml")
    recap = re.findall(r"^(sb\d)\s+: ok=\d+\s+changed=(\d+)", res.stdout, re.M)
    assert len(recap) == 3 and all(n == "0" for dummy, n in recap), "status.yml changed a host: %s" % recap
    with open(report) as fh:
        doc = json.load(fh)
    ids = stack.instance_map()
    workers = {"%s/%s" % (h["host"], w["name"]): w for h in doc["hosts"] for w in h["workers"]}
    assert set(workers) == set(stack.worker_map())
    for key, worker in workers.items():
        assert worker["ready"], (key, worker)
        assert int(worker["instance_id"]) in ids[key], (key, worker["instance_id"], ids.get(key))
        assert worker["gpu"] == ",".join(stack.worker_map()[key][1]["gpus"])
        assert worker["hit_rate"] is None  # mockers export no external prefix-cache counters
    units = [(h["host"], u["unit"], u["state"]) for h in doc["hosts"] for u in h["units"]]
    assert all(state == "active" for dummy, dummy, state in units), units
    # The copy runs mockers only and has no KV pool (tests/lib/sandbox_copy.py empties maru_pool): no Maru unit.
    assert {("sb1", "dynamo-frontend.service"), ("sb3", "etcd.service")} <= set((h, u) for h, u, dummy in units)
    assert not [u for dummy, u, dummy in units if u.startswith("maru-")], units
    assert doc["summary"]["healthy"] and doc["summary"]["workers_ready"] == len(workers)
    # The table: one line per unit, every worker with its instance id.
    for key, worker in workers.items():
        assert worker["instance_id"] in res.stdout
    record.update({"units": len(units), "workers_ready": doc["summary"]["workers_ready"], "seconds": round(took, 1)})
    # JSON on stdout too.
    res, dummy = D.playbook("playbooks/status.yml", "-e", "status_format=json", log="status-json")
    D.must(res, "status.yml -e status_format=json")
    assert '"workers_ready": %d' % len(workers) in res.stdout
    assert os.stat(report).st_mode & 0o777 == 0o600


def test_status_fails_on_a_stopped_worker(stack, record):
    """One worker stopped: status.yml still prints the table and writes the report, then exits
    non-zero naming the worker; the worker is started again."""
    key = sorted(stack.worker_map())[0]
    host, worker = stack.worker_map()[key]
    unit = "dynamo-worker@%s.service" % worker["name"]
    report = os.path.join(D.DAY2_DIR, "status-stopped.json")
    D.sh(host, "systemctl stop %s" % unit)
    try:
        res, took = D.playbook("playbooks/status.yml", "-e", "status_report=%s" % report, log="status-worker-stopped")
    finally:
        D.sh(host, "systemctl start %s" % unit)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    failure = re.search(r"The stack is not healthy: (.*)", out)
    assert failure and "%s: %s is inactive" % (host, unit) in failure.group(1), out[-3000:]
    assert re.search(r"%s\s+%s\s+inactive" % (host, re.escape(unit)), out), out[-3000:]
    with open(report) as fh:
        doc = json.load(fh)
    assert not doc["summary"]["healthy"] and "%s: %s is inactive" % (host, unit) in doc["problems"], doc["problems"]
    t0 = time.monotonic()
    stack.wait_all_serving(only=[key])
    record.update({"status_seconds": round(took, 1), "serving_again_seconds": round(time.monotonic() - t0, 1)})


def _get(url, context=None):
    with urllib.request.urlopen(url, timeout=10, context=context) as resp:
        return resp.status, resp.read().decode()


def test_prometheus_file_sd_targets_scrape(stack, record):
    sd_dir = os.path.join(D.DAY2_DIR, "prometheus")
    res, dummy = D.playbook("playbooks/prometheus_targets.yml", "-e", "prometheus_sd_dir=%s" % sd_dir)
    D.must(res, "prometheus_targets.yml")
    jobs = {}
    for name in ("dynamo-frontend", "dynamo-worker", "etcd", "maru"):
        with open(os.path.join(sd_dir, name + ".json")) as fh:
            jobs[name] = json.load(fh)
    assert len(jobs["dynamo-frontend"]) == 1 and len(jobs["etcd"]) == 3 and jobs["maru"] == []
    assert len(jobs["dynamo-worker"]) == len(stack.worker_map())
    for group in [g for groups in jobs.values() for g in groups]:
        assert {"host", "worker", "gpu", "pool", "cluster"} <= set(group["labels"])
    workers = {(g["labels"]["host"], g["labels"]["worker"]): g for g in jobs["dynamo-worker"]}
    assert workers[("sb2", "mock-c")]["labels"]["gpu"] == "0"
    scraped = 0
    status, text = _get("http://%s/metrics" % jobs["dynamo-frontend"][0]["targets"][0])
    assert status == 200 and "dynamo_frontend_" in text
    scraped += 1
    for group in jobs["dynamo-worker"]:
        status, text = _get("http://%s/metrics" % group["targets"][0])
        assert status == 200 and "dynamo_component_" in text, group
        scraped += 1
    # etcd: /metrics on the client port needs TLS and a client certificate of the etcd CA.
    pki = os.path.join(D.DAY2_DIR, "pki", "kvshare")
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))
    ctx.load_cert_chain(os.path.join(pki, "client-sb1.pem"), os.path.join(pki, "client-sb1-key.pem"))
    for group in jobs["etcd"]:
        status, text = _get("https://%s/metrics" % group["targets"][0], ctx)
        assert status == 200 and "etcd_server_has_leader 1" in text, group
        scraped += 1
    record.update({"targets_scraped": scraped})


WATCH_PLAY = """\
- name: The unit watch in the background, waited for by its action plugin
  hosts: {host}
  become: true
  gather_facts: false
  tasks:
    - name: Sample a running worker's unit for {observe} s, a progress line every second
      kvshare.dynamo.dynamo_worker_unit_watch:
        units: [{{name: {name}, unit: "{unit}", health_url: "{health}"}}]
        observe: {observe}
        fail_on_crash: false
        progress_s: 1
      async: {limit}
      poll: 0
      register: watch
      ignore_errors: true

    - name: Keep the result on the controller
      ansible.builtin.copy:
        content: "{{{{ watch | to_nice_json }}}}"
        dest: "{result}"
        mode: "0600"
      delegate_to: localhost
      become: false
"""


def _watch_play(stack, path, host, worker, observe, limit):
    with open(path, "w") as fh:
        fh.write(WATCH_PLAY.format(host=host, name=worker["name"], unit="dynamo-worker@%s.service" % worker["name"],
                                   health="http://%s:%s/health" % (stack.address(host), worker["system_port"]),
                                   observe=observe, limit=limit, result=path + ".json"))
    res, dummy = D.playbook(path, log="unit-watch-%s" % os.path.basename(path).split(".")[0])
    D.must(res, "the unit watch play")
    with open(path + ".json") as fh:
        return res.stdout, json.load(fh)


def test_unit_watch_waits_for_its_background_job(stack, record):
    """dynamo_worker_unit_watch with async and poll 0 (as roles/dynamo_worker/tasks/wave.yml runs it):
    the action plugin prints a WATCH line with the unit's state while the job runs, hands back the
    module's own result when it ends, and leaves no job file; a job past its async limit fails
    with the wrapper's verdict instead of hanging."""
    key = sorted(stack.worker_map())[0]
    host, worker = stack.worker_map()[key]
    unit = "dynamo-worker@%s.service" % worker["name"]
    jobs_before = D.sh(host, "ls /root/.ansible_async 2>/dev/null | sort", check=False).split()
    out, result = _watch_play(stack, os.path.join(D.DAY2_DIR, "watch-ok.yml"), host, worker, 3, 60)
    lines = re.findall(r"^WATCH %s: (\d+) s of at most 60 s; (.*)$" % host, out, re.M)
    assert len(lines) >= 2, "no progress lines while the watch ran:\n%s" % out[-3000:]
    assert all(states == "%s active" % unit for dummy, states in lines), lines
    assert [int(s) for s, dummy in lines] == sorted(int(s) for s, dummy in lines)
    assert not result.get("failed"), result
    assert [u["name"] for u in result["units"]] == [worker["name"]], result
    assert result["units"][0]["active_state"] == "active", result
    assert result["elapsed_s"] >= 3 and "ansible_job_id" not in result, result
    leftover = set(D.sh(host, "ls /root/.ansible_async 2>/dev/null | sort", check=False).split()) - set(jobs_before)
    assert not leftover, "job files left behind: %s" % sorted(leftover)
    # Past its async limit, async_wrapper kills the job and says so; the plugin passes that on.
    out, result = _watch_play(stack, os.path.join(D.DAY2_DIR, "watch-late.yml"), host, worker, 30, 2)
    assert result.get("failed") and "imeout" in result.get("msg", ""), result
    record.update({"progress_lines": len(lines), "late_msg": result.get("msg")})
