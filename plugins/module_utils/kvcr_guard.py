# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR (KV Cache Runner) variant: the Guard-recovery proof from the workers' metrics and logs.

Counter deltas of the KVCR and tiering metrics, which worker the first request seeded, whether the
recovery request was served by a remote delivery, the rc_mlx5 transport counts and the HCA byte
counters against the payload. Stdlib only: kvcr_guard_check runs it on managed hosts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kvshare.dynamo.plugins.module_utils import prometheus_text

KVCR_TIER = "1:kvcr"

TRANSFER_BLOCKS = "vllm:kvcr_transfer_blocks_total"
TIER_READ_BYTES = "vllm:kv_offload_tiering_read_bytes_total"
TIER_WRITE_BYTES = "vllm:kv_offload_tiering_write_bytes_total"
PROMPT_TOKENS = prometheus_text.VLLM_PROMPT_TOKENS_BY_SOURCE


def counters(exposition):
    """The KVCR counters of one worker's /metrics (summed over engines; None when absent)."""
    if isinstance(exposition, (str, bytes)):
        exposition = prometheus_text.parse(exposition)
    return {
        "local_fill": exposition.sum(TRANSFER_BLOCKS, {"operation": "local_fill"}),
        "remote_deliver": exposition.sum(TRANSFER_BLOCKS, {"operation": "remote_deliver"}),
        "tier_write_bytes": exposition.sum(TIER_WRITE_BYTES, {"tier": KVCR_TIER}),
        "tier_read_bytes": exposition.sum(TIER_READ_BYTES, {"tier": KVCR_TIER}),
        "external_tokens": exposition.sum(PROMPT_TOKENS, {"source": "external_kv_transfer"}),
    }


_DELTA_KEYS = (
    ("local_fill", TRANSFER_BLOCKS, {"operation": "local_fill"}),
    ("remote_deliver", TRANSFER_BLOCKS, {"operation": "remote_deliver"}),
    ("tier_write_bytes", TIER_WRITE_BYTES, {"tier": KVCR_TIER}),
    ("tier_read_bytes", TIER_READ_BYTES, {"tier": KVCR_TIER}),
    ("external_tokens", PROMPT_TOKENS, {"source": "external_kv_transfer"}),
)


def deltas(before, after):
    """Per-counter deltas between two /metrics snapshots of one worker.

    Returns {key: delta or None (metric absent after), ..., "reset": bool, "missing": [keys]}.
    A counter that went down (the worker restarted in between) is flagged as a reset.
    """
    if isinstance(before, (str, bytes)):
        before = prometheus_text.parse(before)
    if isinstance(after, (str, bytes)):
        after = prometheus_text.parse(after)
    out = {"reset": False, "missing": []}
    for key, name, flt in _DELTA_KEYS:
        delta = prometheus_text.counter_delta(before, after, name, flt)
        out[key] = delta.delta
        out["reset"] = out["reset"] or delta.reset
        if delta.missing:
            out["missing"].append(key)
    return out


def _positive(value):
    return value is not None and value > 0


def identify_source(seed_deltas):
    """Which worker the first request seeded: the only one with Δlocal_fill > 0 and Δtier write > 0.

    seed_deltas: {worker: deltas()}. Returns (source, target, errors); source/target are None when
    the picture is not exactly one seeded worker and one untouched worker.
    """
    seeded = sorted(w for w, d in seed_deltas.items()
                    if _positive(d.get("local_fill")) and _positive(d.get("tier_write_bytes")))
    errors = []
    if len(seed_deltas) != 2:
        errors.append("the Guard check needs exactly two KVCR workers (got %d)" % len(seed_deltas))
    if len(seeded) != 1:
        errors.append("expected exactly one worker with Δ%s{operation=\"local_fill\"} > 0 and "
                      "Δ%s{tier=\"%s\"} > 0 after the first request, found %d (%s)"
                      % (TRANSFER_BLOCKS, TIER_WRITE_BYTES, KVCR_TIER, len(seeded), ", ".join(seeded) or "none"))
    if errors:
        return None, None, errors
    source = seeded[0]
    others = [w for w in seed_deltas if w != source]
    target = others[0]
    touched = dict((k, seed_deltas[target].get(k)) for k in ("local_fill", "tier_write_bytes")
                   if _positive(seed_deltas[target].get(k)))
    if touched:
        return None, None, ["the target %s was seeded by the first request too (%s): nothing would tell a "
                            "remote delivery from a local hit" % (target, touched)]
    return source, target, []


def recovery_errors(baseline, recovered, target_deltas):
    """Why the recovery request does not prove the Guard served the prefix (empty list: it does)."""
    errors = []
    if recovered != baseline:
        errors.append("the answer after the engine kill differs from the baseline: %r != %r"
                      % (_excerpt(recovered), _excerpt(baseline)))
    if target_deltas.get("reset"):
        errors.append("the target's counters went down: it restarted during the check")
    for key, what in (("remote_deliver", "%s{operation=\"remote_deliver\"}" % TRANSFER_BLOCKS),
                      ("tier_read_bytes", "%s{tier=\"%s\"}" % (TIER_READ_BYTES, KVCR_TIER)),
                      ("external_tokens", "%s{source=\"external_kv_transfer\"}" % PROMPT_TOKENS)):
        value = target_deltas.get(key)
        if value is None:
            errors.append("Δ%s: metric absent on the target" % what)
        elif value <= 0:
            errors.append("Δ%s is %s on the target (must be > 0)" % (what, _num(value)))
    return errors


UCX_TRANSPORT_RE = re.compile(r"\brc_mlx5\b")
# UCX_PROTO_INFO=y prints one table per protocol selection: a heading row naming the context, the
# scope (inter-node, intra-node) and the endpoint configuration, then one row per message-size range
# whose last column names the transport/device (``| 0..8K | short | rc_mlx5/mlx5_0:1 |``).
UCX_TABLE_HEAD_RE = re.compile(r"\|\s*(ucp_context_\d+)\s+(inter-node|intra-node|[\w-]+)\s+cfg#(\d+)\s*\|")
UCX_TABLE_ROW_RE = re.compile(r"\|[^|]*\|[^|]*\|\s*([A-Za-z][\w]*)/[^|]*\|\s*$")
RC_TRANSPORT = "rc_mlx5"
FALLBACK_TRANSPORTS = ("tcp",)


def transport_count(log_text, pattern=UCX_TRANSPORT_RE):
    """How often UCX names the rc_mlx5 transport in a journal excerpt (UCX_PROTO_INFO=y lines)."""
    return len(pattern.findall(log_text or ""))


def selection_tables(log_text):
    """UCX_PROTO_INFO=y selection tables in journal order: [{"scope", "cfg", "transports"}]."""
    tables = []
    for line in (log_text or "").splitlines():
        head = UCX_TABLE_HEAD_RE.search(line)
        if head:
            tables.append({"scope": head.group(2), "cfg": int(head.group(3)), "transports": []})
            continue
        row = UCX_TABLE_ROW_RE.search(line)
        if row and tables:
            tables[-1]["transports"].append(row.group(1))
    return tables


def transport_proof_errors(sides):
    """The RDMA transport proof of a resend, on each side, from one process's own journal.

    sides: {label: (before, after)}, the journal of the side's current process invocation (the
    source's memory service, the target's worker) read just before and just after the resend.

    UCX prints a selection table once per (worker, endpoint configuration, remote key configuration,
    operation) in a process's lifetime: when the selection is first made (ucp_proto_select_elem_init,
    on a cache miss), never again for the same key. So:
    - tables printed by the resend (inter-node): at least one rc_mlx5 row and no fallback transport
      (tcp) row; an rc_mlx5 selection seen only before the resend proves nothing then (the seed's
      rule: a resend over TCP prints a new table);
    - no table printed by the resend: the resend reused a selection this process made earlier, so
      this process's inter-node tables must name rc_mlx5 and no fallback transport at all (a
      repeat recovery between the same processes prints nothing new).
    """
    errors = []
    for side, pair in sorted(sides.items()):
        before, after = (tuple(pair) + (None, None))[:2]
        if before is None or after is None:
            errors.append("%s: UCX log unreadable" % side)
            continue
        earlier = [t for t in selection_tables(before) if t["scope"] == "inter-node"]
        now = [t for t in selection_tables(after) if t["scope"] == "inter-node"]
        new = now[len(earlier):]
        checked = new if new else earlier
        used = [tr for t in checked for tr in t["transports"]]
        fallback = sorted(set(tr for tr in used if tr in FALLBACK_TRANSPORTS))
        if not checked:
            errors.append("%s: UCX printed no inter-node protocol selection in this process "
                          "(UCX_PROTO_INFO=y must be set)" % side)
        elif fallback:
            errors.append("%s: UCX selected %s for %s inter-node configuration%s (cfg#%s): not RDMA"
                          % (side, ", ".join(fallback), "the resend's" if new else "this process's",
                             "s" if len(checked) > 1 else "", ", ".join(str(t["cfg"]) for t in checked)))
        elif RC_TRANSPORT not in used:
            errors.append("%s: no %s in %s inter-node selection (%s)"
                          % (side, RC_TRANSPORT, "the resend's" if new else "this process's",
                             ", ".join(sorted(set(used))) or "no transport rows"))
    return errors


def rdma_errors(xmit_bytes, rcv_bytes, payload_bytes):
    """Whether the HCA counters cover the KVCR payload (source transmit, target receive)."""
    errors = []
    if payload_bytes is None or payload_bytes <= 0:
        return ["no KVCR payload to compare the RDMA counters with (Δtier read bytes is %s)" % _num(payload_bytes)]
    if xmit_bytes is None:
        errors.append("source HCA transmit counter unreadable")
    elif xmit_bytes < payload_bytes:
        errors.append("source HCA transmit bytes %d do not cover the KVCR payload %d" % (xmit_bytes, payload_bytes))
    if rcv_bytes is None:
        errors.append("target HCA receive counter unreadable")
    elif rcv_bytes < payload_bytes:
        errors.append("target HCA receive bytes %d do not cover the KVCR payload %d" % (rcv_bytes, payload_bytes))
    return errors


def _num(value):
    if value is None:
        return "n/a"
    return "%d" % value if float(value).is_integer() else "%s" % value


def _excerpt(text, limit=120):
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + "..."
