"""Recovery: a killed worker comes back under a new id, a restarted frontend rediscovers every
worker, and a stopped etcd member rejoins as `existing` without losing keys."""
import time

from conftest import (FRONTEND, address, ansible_playbook, completion, generate_instances, group,
                      instance_of, wait_for, workers)

ETCDCTL = "set -a; . /etc/etcd/etcdctl.env; set +a; etcdctl "
ETCDCTL_AT = "set -a; . /etc/etcd/etcdctl.env; set +a; ETCDCTL_ENDPOINTS=https://%s:2379 etcdctl "


def test_killed_worker_is_restarted_and_registers_with_a_new_id(hosts):
    host, worker = next((h, w) for h, w in workers() if w["engine"] == "vllm")
    h = hosts[host]
    unit = "dynamo-worker@%s" % worker["name"]
    (old_id,) = instance_of(host, worker)
    old_pid = int(h.check_output("systemctl show -p MainPID --value %s" % unit))
    h.check_output("kill -9 %d" % old_pid)
    started = time.monotonic()

    def serving_under_new_id():
        for iid in instance_of(host, worker):
            if iid != old_id and completion(worker, iid)[0] == 200:
                return iid
        return None

    new_id = wait_for(serving_under_new_id, timeout=240, what="%s to serve under a new id" % worker["name"])
    assert new_id != old_id
    assert int(h.check_output("systemctl show -p MainPID --value %s" % unit)) != old_pid
    assert int(h.check_output("systemctl show -p NRestarts --value %s" % unit)) >= 1
    print("worker %s back after %.1f s" % (worker["name"], time.monotonic() - started))


def test_restarted_frontend_rediscovers_every_worker(hosts):
    hosts[FRONTEND].check_output("systemctl restart dynamo-frontend")
    expected = len(list(workers()))

    def all_serving():
        try:
            found = 0
            for host, worker in workers():
                ids = instance_of(host, worker)
                if ids and completion(worker, ids[-1])[0] == 200:
                    found += 1
            return found == expected
        except (OSError, AssertionError):
            return False

    wait_for(all_serving, timeout=120, what="every worker to answer through the restarted frontend")
    assert len({iid for iid, _, _ in generate_instances()}) >= expected


def test_stopped_etcd_member_keeps_cluster_serving_and_rejoins_as_existing(hosts):
    first, last = group("etcd")[0], group("etcd")[-1]
    ids_before = hosts[first].check_output(ETCDCTL + "member list -w simple | cut -d, -f1 | sort")
    hosts[first].check_output(ETCDCTL_AT % address(first) + "put kvshare/test/before-stop yes")
    hosts[last].check_output("systemctl stop etcd")
    try:
        hosts[first].check_output(ETCDCTL_AT % address(first) + "put kvshare/test/while-down yes")
        assert hosts[first].check_output(
            ETCDCTL_AT % address(first) + "get --print-value-only kvshare/test/before-stop") == "yes"
    finally:
        res = ansible_playbook("playbooks/etcd.yml")
    assert res.returncode == 0, res.stdout[-3000:]
    assert hosts[last].service("etcd").is_running
    # Same members (no re-bootstrap), and the new keys reached the returning member.
    assert hosts[first].check_output(ETCDCTL + "member list -w simple | cut -d, -f1 | sort") == ids_before
    got = hosts[last].check_output(
        ETCDCTL_AT % address(last) + "get --print-value-only kvshare/test/while-down")
    assert got == "yes"
    # It restarted from its own WAL rather than bootstrapping a new member.
    journal = hosts[last].check_output(
        "journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value etcd)")
    assert '"restarting local member"' in journal and '"starting local member"' not in journal, journal[-2000:]


def test_config_change_restarts_members_one_at_a_time_after_a_snapshot(hosts):
    members = group("etcd")

    def started(member):
        return int(hosts[member].check_output("systemctl show -p ActiveEnterTimestampMonotonic --value etcd"))

    def snapshots(member):
        return set(hosts[member].check_output("ls /var/backups/etcd 2>/dev/null || true").split())

    before = {m: (started(m), snapshots(m)) for m in members}
    try:
        res = ansible_playbook("playbooks/etcd.yml", "-e", "etcd_heartbeat_interval_ms=150")
        assert res.returncode == 0, res.stdout[-3000:]
        after = {m: started(m) for m in members}
        for m in members:
            assert after[m] > before[m][0], "%s was not restarted" % m
            assert snapshots(m) - before[m][1], "%s was restarted without a snapshot first" % m
            assert "ETCD_HEARTBEAT_INTERVAL=150" in hosts[m].file("/etc/etcd/etcd.env").content_string
        # One at a time: each restart begins only after the previous member is healthy again.
        order = sorted(members, key=lambda m: after[m])
        gaps = [(after[b] - after[a]) / 1e6 for a, b in zip(order, order[1:])]
        assert all(g > 0.3 for g in gaps), gaps
        out = hosts[members[0]].check_output(ETCDCTL + "endpoint health --cluster 2>&1")
        assert out.count("is healthy") == len(members), out
    finally:
        res = ansible_playbook("playbooks/etcd.yml")
        assert res.returncode == 0, res.stdout[-3000:]
