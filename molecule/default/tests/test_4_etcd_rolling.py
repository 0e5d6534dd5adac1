# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""etcd configuration changes roll the members one at a time, each after a snapshot.

The faults (a killed worker, a restarted frontend, an etcd member down, the whole cluster
restarted, ...) are the fault suite's (tests/faults), run on these same hosts by
`./dev.sh faults-here` after this scenario's disruptive checks (this one among them)."""
import pytest

from conftest import ansible_playbook, group

ETCDCTL = "set -a; . /etc/etcd/etcdctl.env; set +a; etcdctl "


@pytest.mark.disruptive
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
