# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Scale-out: a worker and a host added to the inventory; site.yml starts only the new ones."""
import d2lib as D
from lib.sandbox_copy import mocker


def _untouched(before_units, before_ids, inv):
    after_units, after_ids = D.worker_units(inv), inv.wait_all_serving()
    for key, b in before_units.items():
        a = after_units[key]
        assert (a["enter"], a["pid"]) == (b["enter"], b["pid"]), "%s was restarted: %s -> %s" % (key, b, a)
        assert after_ids[key] == before_ids[key], "%s changed instance id" % key
    return after_ids


def test_scale_out_worker_and_host(stack, record):
    """One site.yml run after two inventory changes an operator makes together: a worker added on an
    existing host (sb3, a third GPU) and a new host (sb4) with one worker. The run starts exactly
    the two new workers; every running worker keeps its unit (PID, start time) and instance id.
    (Once, not one run per change: each run is a whole site.yml on every host, as the inventory
    changed, and CI's time is the budget.)"""
    inv = D.Inv()
    before_units, before_ids = D.worker_units(inv), inv.wait_all_serving()
    try:
        D.make_copy(extra_workers={"sb3": [mocker("mock-e", "2", 3)]}, extra_hosts=1)
        inv = D.Inv()
        res, dummy = D.playbook("sandbox/create.yml", "--limit", "sb4", log="scale-out-create-sb4")
        D.must(res, "sandbox/create.yml --limit sb4")
        res, took = D.playbook("site.yml", log="scale-out")
        D.must(res, "site.yml (a worker on sb3 and the host sb4 added)")
        after = _untouched(before_units, before_ids, inv)
        assert {"sb3/mock-e", "sb4/mock-e"} <= set(after), sorted(after)
        assert set(after) == set(before_ids) | {"sb3/mock-e", "sb4/mock-e"}, sorted(after)
        record.update({"kept": {k: str(v) for k, v in before_ids.items()},
                       "new": {k: str(after[k]) for k in ("sb3/mock-e", "sb4/mock-e")},
                       "site_s": round(took, 1)})
    finally:
        # Back to three hosts: sb4 removed (its worker stopped first), mock-e pruned by site.yml.
        D.playbook("playbooks/teardown.yml", "--limit", "sb4", "-e", "teardown_skip_confirmation=true",
                   log="scale-out-teardown-sb4")
        D.playbook("sandbox/destroy.yml", "--limit", "sb4", log="scale-out-destroy-sb4")
        D.make_copy()
        res, dummy = D.playbook("site.yml", log="scale-out-back")
        D.must(res, "site.yml (back to the base inventory)")
    inv = D.Inv()
    assert set(inv.wait_all_serving()) == set(inv.worker_map())
    assert "mock-e" not in D.sh("sb3", "ls /etc/dynamo/workers")
