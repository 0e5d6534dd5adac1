# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""A lost etcd member replaced: its data dir is gone (a new disk), etcd.yml must remove the stale
registration, add the member again and start it as "existing" against the running cluster. A role
that bootstrapped it as "new" would start a second one-member cluster (another cluster ID) and
this test fails on the member list, the cluster ID or the keys."""
import json
import re
import time

import d2lib as D

KEY = "kvshare/day2/member-replace"


def _members(host):
    """{name: member id} as the cluster lists them from `host`."""
    data = json.loads(D.etcdctl(host, "member list -w json"))
    return dict((m.get("name", ""), m["ID"]) for m in data["members"])


def _own(host, args):
    """etcdctl against `host`'s own member only (etcdctl refuses --endpoints beside ETCDCTL_ENDPOINTS)."""
    return D.sh(host, "set -a; . /etc/etcd/etcdctl.env; set +a; ETCDCTL_ENDPOINTS=https://%s:2379 etcdctl %s"
                % (D.SB.address(host), args))


def _cluster_id(host):
    """The cluster ID `host`'s own member reports."""
    return json.loads(_own(host, "endpoint status -w json"))[0]["Status"]["header"]["cluster_id"]


def test_lost_member_rejoins_as_existing(stack, record):
    inv = D.Inv()
    members = inv.group("etcd")
    lost, other = members[-1], members[0]
    before = _members(other)
    assert len(before) == len(members), before
    cluster_id = _cluster_id(other)
    D.etcdctl(other, "put %s before" % KEY)
    data_dir = re.search(r"^ETCD_DATA_DIR=(\S+)$", D.sh(lost, "cat /etc/etcd/etcd.env"), re.M).group(1)

    # The member's disk is replaced: etcd stopped, its data dir gone, its registration still listed.
    D.sh(lost, "systemctl stop etcd && rm -rf %s" % data_dir)
    D.etcdctl(other, "put %s while-lost" % KEY)
    res, took = D.playbook("playbooks/etcd.yml", log="etcd-member-replace")
    D.must(res, "etcd.yml after a member lost its data")

    after = _members(other)
    assert set(after) == set(before), (before, after)
    lost_name = [n for n in before if before[n] not in after.values()]
    assert len(lost_name) == 1, "exactly the lost member re-registered under a new id: %s -> %s" % (before, after)
    assert D.sh(lost, "cat /etc/etcd/bootstrap.env").count("ETCD_INITIAL_CLUSTER_STATE=existing") == 1
    # One cluster: the replaced member reports the cluster's ID and holds its keys, old and new.
    assert _cluster_id(lost) == cluster_id
    got = _own(lost, "get --print-value-only %s" % KEY).strip()
    assert got == "while-lost", got
    health = D.etcdctl(other, "endpoint health --cluster 2>&1")
    assert health.count("is healthy") == len(members), health
    assert set(inv.wait_all_serving(timeout=180)) == set(inv.worker_map())
    record.update({"replaced": lost_name[0], "etcd_yml_s": round(took, 1)})


def test_removal_that_would_lose_quorum_is_refused(stack, record):
    """playbooks/remove_host.yml refuses, before the host changes, to take a member out of a
    three-member cluster whose other two are one healthy, one down: the two left would have no
    quorum. The host keeps its workers (same PID, start time) and its member; etcd's own refusal
    would come later, after the drain."""
    inv = D.Inv()
    members = inv.group("etcd")
    target, down, other = members[-1], members[1], members[0]
    before = D.worker_units(inv)
    D.sh(down, "systemctl stop etcd")
    try:
        res, took = D.playbook("playbooks/remove_host.yml", "-e", "remove_host=%s" % target,
                               "-e", "remove_host_skip_confirmation=true", log="remove-host-quorum")
    finally:
        D.sh(down, "systemctl start etcd")
    out = " ".join(res.stdout.split())
    assert res.returncode != 0, res.stdout[-3000:]
    assert ("remove_host: removing the etcd member %s would leave 2 member(s) of which 1 healthy; they need 2 for quorum"
            % target) in out, res.stdout[-3000:]
    assert "(unhealthy: %s)" % down in out, res.stdout[-3000:]
    assert D.worker_units(inv) == before
    assert sorted(_members(other)) == sorted(members)
    assert D.sh(target, "systemctl is-active etcd").strip() == "active"
    deadline = time.monotonic() + 60
    while True:  # the stopped member back, healthy (polled: etcd answers within seconds)
        health = D.sh(other, "set -a; . /etc/etcd/etcdctl.env; set +a; etcdctl endpoint health --cluster 2>&1", check=False)
        if health.count("is healthy") == len(members) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert health.count("is healthy") == len(members), health
    record.update({"refused_s": round(took, 1)})
