# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""etcd_backup.yml and etcd_restore.yml: keys written, backed up, the cluster wiped (a fresh empty
cluster), the snapshot restored, keys back, every Dynamo worker serving again."""
import glob
import os
import time

import d2lib as D

KEYS = dict(("kvshare/day2/backup/key-%02d" % i, "value-%02d-%d" % (i, int(time.time()))) for i in range(10))


def _get_all(host):
    out = D.etcdctl(host, "get --prefix kvshare/day2/backup/ -w simple")
    lines = out.strip().splitlines()
    return dict(zip(lines[0::2], lines[1::2]))


def test_backup_wipe_restore(stack, record):
    inv = D.Inv()
    members = inv.group("etcd")
    before = inv.wait_all_serving()
    for key, value in KEYS.items():
        D.etcdctl(members[0], "put %s %s" % (key, value))
    backup_dir = os.path.join(D.DAY2_DIR, "backups")
    res, took_backup = D.playbook("playbooks/etcd_backup.yml", "-e", "etcd_backup_dir=%s" % backup_dir)
    D.must(res, "etcd_backup.yml")
    snapshots = sorted(glob.glob(os.path.join(backup_dir, "etcd-kvshare-*.db")), key=os.path.getmtime)
    assert snapshots, "no snapshot fetched to %s" % backup_dir
    snapshot = snapshots[-1]
    assert os.path.getsize(snapshot) > 0

    # Wipe: every member's data dir removed, a fresh empty cluster bootstrapped.
    res, dummy = D.playbook("playbooks/etcd.yml", "-e", "etcd_wipe_data=true", log="etcd-wipe")
    D.must(res, "etcd.yml -e etcd_wipe_data=true")
    for member in members:
        assert _get_all(member) == {}, "keys survived the wipe on %s" % member

    t0 = time.monotonic()
    res, took_restore = D.playbook("playbooks/etcd_restore.yml", "-e", "etcd_restore_snapshot=%s" % snapshot)
    D.must(res, "etcd_restore.yml")
    for member in members:
        assert _get_all(member) == KEYS, "keys not restored on %s" % member
    health = D.etcdctl(members[0], "endpoint health --cluster 2>&1")
    assert health.count("is healthy") == len(members), health
    after = inv.wait_all_serving(timeout=180)
    serving_s = time.monotonic() - t0
    assert set(after) == set(inv.worker_map())
    record.update({"keys_restored": len(KEYS), "snapshot_bytes": os.path.getsize(snapshot),
                   "backup_s": round(took_backup, 1), "restore_s": round(took_restore, 1),
                   "all_serving_after_restore_s": round(serving_s, 1),
                   "instance_ids_kept": sum(1 for k in after if after[k] == before.get(k))})
