# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""The fast re-run on the converged sandbox (kvshare.dynamo.converged, docs/performance.md).

The whole bodies' idempotence is proven here with kvshare_fast_rerun=false (0 changed, every body
run). Then drift (a file the rdma_ucx role writes, removed by hand, and two units stopped by hand)
must make that role, and only that role, run whole and repair it while the stopped units are only
started, and the run after that must skip every body and change nothing: the fast path's
idempotence. (CI leaves out molecule's own
idempotence step, a fast re-run right after converge: these runs prove more on the same hosts.)
"""
from conftest import FRONTEND, group, SB

# The roles with a body, which the shared fast re-run step (roles/kvshare/tasks/fast_rerun.yml)
# compares, runs or skips.
BODIES = ("rdma_ucx", "maru_pool", "etcd", "dynamo_runtime", "etcd_client", "dynamo_frontend", "dynamo_worker")


def step_results(doc, name):
    """[{host: result}] of each run of a task of the shared step, by its name (role prefix or none)."""
    found = []
    for play in doc["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].split(" : ")[-1] == name:
                found.append(task["hosts"])
    return found


def body_runs(doc):
    """{role: hosts whose body ran} from a json callback document."""
    ran = {}
    for role in BODIES:
        for hosts in step_results(doc, "Run the body of %s" % role):
            ran.setdefault(role, [])
            ran[role] += sorted(h for h, res in hosts.items() if not res.get("skipped"))
    return ran


def comparisons(doc, role):
    """{host: the step's comparison result} for one role."""
    found = {}
    for hosts in step_results(doc, "Compare the host with the last whole run of %s" % role):
        found.update(hosts)
    return found


def drift_lines(doc, role):
    return dict((host, res.get("drift")) for host, res in comparisons(doc, role).items())


def changed(doc):
    return {host: stats["changed"] for host, stats in doc["stats"].items() if stats.get("changed")}


def test_whole_bodies_change_nothing_on_a_converged_stack():
    res, doc = SB.playbook_json("site.yml", "-e", "kvshare_fast_rerun=false", log="site-whole")
    assert res.returncode == 0 and doc is not None, res.stdout[-3000:] + res.stderr[-2000:]
    assert changed(doc) == {}
    assert set(body_runs(doc)) == set(BODIES) and all(body_runs(doc).values())


def task_results(doc, role, name):
    """{host: result} of one task of a role, by its name, from a json callback document."""
    found = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == "kvshare.dynamo.%s : %s" % (role, name):
                found.update(task["hosts"])
    return found


def test_drift_runs_only_what_drifted_then_nothing():
    """Two kinds of drift an operator meets, repaired by one ordinary site.yml run:
    - a file the rdma_ucx role writes, removed by hand on its host (it restarts nothing): that
      role, and only that role, runs whole there and puts the file back;
    - the frontend and one mocker stopped by hand: their roles see only stopped units (start_only),
      skip their configuration and start them.
    The run after that skips every body and changes nothing: the fast path's idempotence. (One
    repair run for both, not one each: each run is a site.yml on every host, on CI's budget.)"""
    host = group("rdma_ucx")[0]
    env_dir = SB.hostvars[host].get("rdma_ucx_env_dir", "/etc/kvshare/ucx")
    before = SB.podman_exec(host, "cat %s/gpu0.env" % env_dir)
    worker_host = next(h for h in group("dynamo_workers")
                       if any(w.get("engine") == "mocker" for w in SB.hostvars[h]["dynamo_workers"]))
    mocker = next(w["name"] for w in SB.hostvars[worker_host]["dynamo_workers"] if w.get("engine") == "mocker")
    assert len({host, FRONTEND, worker_host}) == 3, (host, FRONTEND, worker_host)
    SB.podman_exec(host, "rm %s/gpu0.env" % env_dir)
    SB.podman_exec(FRONTEND, "systemctl stop dynamo-frontend")
    SB.podman_exec(worker_host, "systemctl stop dynamo-worker@%s" % mocker)
    res, doc = SB.playbook_json("site.yml", log="site-drift")
    assert res.returncode == 0 and doc is not None, res.stdout[-3000:] + res.stderr[-2000:]
    # The removed file: its role whole on its host only, the file back.
    assert SB.podman_exec(host, "cat %s/gpu0.env" % env_dir) == before
    assert drift_lines(doc, "rdma_ucx")[host] == ["%s/gpu0.env: missing" % env_dir]
    assert changed(doc).get(host) == 1, changed(doc)
    assert set(changed(doc)) <= {host, FRONTEND, worker_host}, changed(doc)
    ran = {role: hosts for role, hosts in body_runs(doc).items() if hosts}
    assert ran.pop("rdma_ucx", None) == [host], body_runs(doc)
    # The stopped units: started again, configuration skipped.
    frontend = comparisons(doc, "dynamo_frontend")[FRONTEND]
    assert frontend["start_only"] is True, frontend["drift"]
    assert task_results(doc, "dynamo_frontend", "Configure the frontend service")[FRONTEND].get("skipped")
    worker = comparisons(doc, "dynamo_worker")[worker_host]
    assert worker["start_only"] is True and len(worker["drift"]) == 1, worker["drift"]
    assert worker["drift"][0].startswith("unit dynamo-worker@%s.service: it is now " % mocker), worker["drift"]
    assert task_results(doc, "dynamo_worker", "Configure the worker units")[worker_host].get("skipped")
    watch = task_results(doc, "dynamo_worker", "Start and watch on their host (unit state, own /health) the workers, wave after wave")
    assert watch[worker_host]["started_units"] == [mocker] and mocker in watch[worker_host]["ready"], watch[worker_host]
    for target, unit in ((FRONTEND, "dynamo-frontend"), (worker_host, "dynamo-worker@%s" % mocker)):
        assert SB.podman_exec(target, "systemctl is-active %s" % unit).strip() == "active"
    # No other role's body ran anywhere (a start-only role may enter its body to start units only).
    assert {role: hosts for role, hosts in ran.items() if role not in ("dynamo_frontend", "dynamo_worker")} == {}, ran
    assert set(ran.get("dynamo_frontend", [])) <= {FRONTEND} and set(ran.get("dynamo_worker", [])) <= {worker_host}, ran

    res, doc = SB.playbook_json("site.yml", log="site-fast")
    assert res.returncode == 0 and doc is not None, res.stdout[-3000:] + res.stderr[-2000:]
    assert changed(doc) == {}
    assert {role: hosts for role, hosts in body_runs(doc).items() if hosts} == {}
