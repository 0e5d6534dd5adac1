# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.etcd.leave_check and the etcd_leave_problem filter: may an etcd member leave
(playbooks/remove_host.yml, roles/etcd/tasks/leave_check.yml)? Fed what etcdctl prints."""
import json

import pytest

from ansible_collections.kvshare.dynamo.plugins.filter.internal import etcd as etcd_filters
from ansible_collections.kvshare.dynamo.plugins.module_utils import etcd


def member(index, started=True):
    """The member list entry of sb<index> (etcdctl member list -w json)."""
    entry = {"ID": 0x1000 + index, "name": "sb%d" % index if started else "",
             "peerURLs": ["https://127.0.0.%d:2380" % index]}
    if started:
        entry["clientURLs"] = ["https://127.0.0.%d:2379" % index]
    return entry


def health(count, down=()):
    """etcdctl endpoint health --cluster -w json for sb1..sb<count>, the `down` ones unhealthy."""
    return json.dumps([{"endpoint": "https://127.0.0.%d:2379" % i, "health": i not in down, "took": "1ms"}
                       | ({"error": "context deadline exceeded"} if i in down else {})
                       for i in range(1, count + 1)])


def check(count, leaving, down=(), **kw):
    members = kw.get("members") or [member(i) for i in range(1, count + 1)]
    return etcd.leave_check("sb%d" % leaving, members, "https://127.0.0.%d:2380" % leaving,
                            kw.get("health", health(count, down)))


@pytest.mark.parametrize("count,quorum", [(0, 1), (1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_quorum_is_a_majority(count, quorum):
    assert etcd.quorum(count) == quorum


def test_one_member_cannot_leave():
    got = check(1, 1)
    assert got["others"] == 0 and got["self_healthy"] is True
    assert got["problem"].startswith("remove_host: removing the etcd member sb1 would leave no member")
    assert "playbooks/teardown.yml -e teardown_etcd=true" in got["problem"]


@pytest.mark.parametrize("count,down,allowed", [
    (2, (), True),             # 1 left, 1 healthy, needs 1
    (2, (1,), False),          # 1 left, none healthy
    (3, (), True),
    (3, (2,), False),          # 2 left, 1 healthy, needs 2
    (5, (), True),
    (5, (2,), True),           # 4 left, 3 healthy, needs 3
    (5, (1, 2), False),        # 4 left, 2 healthy, needs 3
    (5, (1, 2, 3, 4), False),
], ids=["2", "2-other-down", "3", "3-one-down", "5", "5-one-down", "5-two-down", "5-all-others-down"])
def test_others_must_keep_quorum(count, down, allowed):
    leaving = count          # the last member leaves; `down` are among the others
    got = check(count, leaving, down)
    assert got["others"] == count - 1 and got["quorum"] == (count - 1) // 2 + 1
    assert got["unhealthy"] == ["sb%d" % i for i in down]
    assert got["healthy"] == ["sb%d" % i for i in range(1, count) if i not in down]
    assert (got["problem"] == "") is allowed, got["problem"]


def test_the_exact_message():
    """The text tests/day2/test_6_etcd_member_replace.py asserts on (sb3 leaves, sb2 is down)."""
    assert check(3, 3, down=(2,))["problem"] == (
        "remove_host: removing the etcd member sb3 would leave 2 member(s) of which 1 healthy; they need 2"
        " for quorum. Bring the unhealthy members back first (unhealthy: sb2).")
    assert check(5, 5, down=(1, 3))["problem"] == (
        "remove_host: removing the etcd member sb5 would leave 4 member(s) of which 2 healthy; they need 3"
        " for quorum. Bring the unhealthy members back first (unhealthy: sb1, sb3).")


@pytest.mark.parametrize("count,down", [(3, (3,)), (2, (2,)), (5, (5,))], ids=["3", "2", "5"])
def test_the_leaving_member_itself_unhealthy_is_refused(count, down):
    """Its health does not count for the others, but the removal goes through it, and with it down the
    cluster may lack quorum now even where the others would have it after (2 members: 1 of 2)."""
    got = check(count, count, down)
    assert got["healthy"] == ["sb%d" % i for i in range(1, count)] and got["self_healthy"] is False
    assert got["problem"].startswith("remove_host: the etcd member sb%d is unhealthy itself" % count), got["problem"]


def test_quorum_is_told_before_the_leaving_members_own_health():
    assert "they need 2 for quorum" in check(3, 3, down=(2, 3))["problem"]


def test_the_leaving_member_healthy_does_not_count_for_the_others():
    got = check(3, 1, down=(2, 3))
    assert got["self_healthy"] is True and got["healthy"] == [] and got["unhealthy"] == ["sb2", "sb3"]
    assert "would leave 2 member(s) of which 0 healthy; they need 2" in got["problem"]


def test_a_member_never_started_counts_as_unhealthy_and_is_named_by_its_peer_url():
    members = [member(1), member(2, started=False), member(3)]
    got = check(3, 3, members=members, health=health(3))
    assert got["unhealthy"] == ["https://127.0.0.2:2380"]
    assert got["problem"].endswith("(unhealthy: https://127.0.0.2:2380).")


@pytest.mark.parametrize("output", ["", "Error: context deadline exceeded", "{}", None, [{"endpoint": 1}]])
def test_a_health_output_that_is_no_list_reports_none_healthy(output):
    got = check(3, 3, health=output)
    assert got["healthy"] == [] and "of which 0 healthy" in got["problem"]


def test_health_parsed_or_text_is_the_same():
    assert check(5, 5, down=(1,), health=json.loads(health(5, down=(1,)))) == check(5, 5, down=(1,))


def test_a_host_not_in_the_list_has_no_own_health():
    got = etcd.leave_check("sb9", [member(1), member(2)], "https://127.0.0.9:2380", health(2))
    assert got["self_healthy"] is None and got["others"] == 2 and got["problem"] == ""


def test_the_filter_returns_the_problem():
    problem = etcd_filters.FilterModule().filters()["etcd_leave_problem"]
    members = [member(i) for i in range(1, 4)]
    assert problem(members, "sb3", "https://127.0.0.3:2380", health(3)) == ""
    assert problem(members, "sb3", "https://127.0.0.3:2380", health(3, down=(2,))) \
        == check(3, 3, down=(2,))["problem"]
