# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Whether an etcd member can leave its cluster (playbooks/remove_host.yml, roles/etcd/tasks/leave_check.yml),
from what etcdctl reports: ``member list -w json`` and ``endpoint health --cluster -w json``.

Pure logic, stdlib only: the role runs etcdctl, this decides, so it is unit-tested.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json


def quorum(count):
    """Members of a cluster of `count` that must be healthy for it to commit anything."""
    return count // 2 + 1


def healthy_endpoints(health):
    """The endpoints that `etcdctl endpoint health --cluster -w json` reports healthy. `health` is
    its output (text) or that output parsed; anything else (an error text) reports none healthy."""
    if isinstance(health, str):
        try:
            health = json.loads(health) if health.strip() else []
        except ValueError:
            health = []
    if not isinstance(health, list):
        return set()
    return set(str(entry.get("endpoint")) for entry in health
               if isinstance(entry, dict) and entry.get("health") is True)


def _label(member):
    """How the operator knows a member: its name; a member added but never started has none."""
    return member.get("name") or ", ".join(member.get("peerURLs") or []) or "%x" % int(member.get("ID") or 0)


def _healthy(member, endpoints):
    # a member added but never started lists no client URL: it counts as unhealthy
    urls = member.get("clientURLs") or []
    return bool(urls) and urls[0] in endpoints


def leave_check(host, members, peer_url, health):
    """Can the member of `host` (the one whose peerURLs hold `peer_url`) leave the cluster?

    `members`: the ``members`` of ``etcdctl member list -w json``; `health`: see healthy_endpoints.
    Returns {"others", "healthy", "unhealthy" (labels, member-list order), "quorum" (of the others),
    "self_healthy" (None: not a member), "problem" ("" when it can leave)}.

    Refused: the others would be fewer healthy than their quorum (etcd would refuse too, but only
    after the drain); the cluster lists no other member; or the member itself is unhealthy: the
    removal goes through it, and with it down the cluster before the removal may lack quorum even
    when the others after it would not (2 members: 1 of 1 left, but 1 of 2 now).
    """
    endpoints = healthy_endpoints(health)
    members = [m for m in members or [] if isinstance(m, dict)]
    own = [m for m in members if peer_url in (m.get("peerURLs") or [])]
    others = [m for m in members if peer_url not in (m.get("peerURLs") or [])]
    healthy = [_label(m) for m in others if _healthy(m, endpoints)]
    unhealthy = [_label(m) for m in others if not _healthy(m, endpoints)]
    need = quorum(len(others))
    self_healthy = all(_healthy(m, endpoints) for m in own) if own else None
    if not others:
        problem = ("remove_host: removing the etcd member %s would leave no member: its cluster lists no other"
                   " (etcdctl member list). Removing it ends the cluster: that is playbooks/teardown.yml"
                   " -e teardown_etcd=true." % host)
    elif len(healthy) < need:
        problem = ("remove_host: removing the etcd member %s would leave %d member(s) of which %d healthy; they"
                   " need %d for quorum. Bring the unhealthy members back first (unhealthy: %s)."
                   % (host, len(others), len(healthy), need, ", ".join(unhealthy)))
    elif self_healthy is False:
        problem = ("remove_host: the etcd member %s is unhealthy itself (etcdctl endpoint health --cluster): the"
                   " removal goes through it and would fail after the drain. Bring it back first (systemctl"
                   " restart etcd; journalctl -u etcd), or, for a member that is gone for good, remove it from a"
                   " running member: etcdctl member list; etcdctl member remove <ID>." % host)
    else:
        problem = ""
    return {"others": len(others), "healthy": healthy, "unhealthy": unhealthy, "quorum": need,
            "self_healthy": self_healthy, "problem": problem}
