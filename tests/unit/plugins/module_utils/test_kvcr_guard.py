# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""module_utils.kvcr_guard: Guard-recovery metrics, the rc_mlx5 counts across the resend, the HCA byte verdict."""
import os

from ansible_collections.kvshare.dynamo.plugins.module_utils import kvcr_guard

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "kvcr")


def fixture(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


# ---------------------------------------------------------------- Guard-recovery metrics

def test_counters_on_fixture_and_absent():
    c = kvcr_guard.counters(fixture("metrics_a_1.txt"))
    assert c["local_fill"] == 100.0 and c["tier_write_bytes"] == 183500800.0 and c["remote_deliver"] == 0.0
    plain = kvcr_guard.counters(fixture("metrics_plain.txt"))
    assert plain["local_fill"] is None and plain["tier_read_bytes"] is None
    assert plain["external_tokens"] is not None


def seed_deltas():
    return {"gpu-a": kvcr_guard.deltas(fixture("metrics_a_0.txt"), fixture("metrics_a_1.txt")),
            "gpu-b": kvcr_guard.deltas(fixture("metrics_b_0.txt"), fixture("metrics_b_1.txt"))}


def test_identify_source_and_target():
    source, target, errors = kvcr_guard.identify_source(seed_deltas())
    assert (source, target, errors) == ("gpu-a", "gpu-b", [])


def test_identify_source_refuses_ambiguous_pictures():
    d = seed_deltas()
    none = {"gpu-a": d["gpu-b"], "gpu-b": d["gpu-b"]}
    assert "found 0 (none)" in kvcr_guard.identify_source(none)[2][0]
    both = {"gpu-a": d["gpu-a"], "gpu-b": d["gpu-a"]}
    assert "found 2" in kvcr_guard.identify_source(both)[2][0]
    seeded_target = {"gpu-a": d["gpu-a"], "gpu-b": dict(d["gpu-b"], local_fill=3.0)}
    assert "seeded by the first request too" in kvcr_guard.identify_source(seeded_target)[2][0]
    plain = {"gpu-a": kvcr_guard.deltas(fixture("metrics_plain.txt"), fixture("metrics_plain.txt")), "gpu-b": d["gpu-b"]}
    assert plain["gpu-a"]["missing"] == ["local_fill", "remote_deliver", "tier_write_bytes", "tier_read_bytes"]
    assert kvcr_guard.identify_source(plain)[0] is None


def test_recovery_verdict():
    target = kvcr_guard.deltas(fixture("metrics_b_1.txt"), fixture("metrics_b_2.txt"))
    assert target["remote_deliver"] == 100.0 and target["tier_read_bytes"] == 183500800.0
    assert target["external_tokens"] == 6400.0 and not target["reset"]
    assert kvcr_guard.recovery_errors("Yes.", "Yes.", target) == []
    errs = kvcr_guard.recovery_errors("Yes.", "No.", dict(target, remote_deliver=0.0, tier_read_bytes=None))
    assert len(errs) == 3 and "differs" in errs[0] and "is 0 on the target" in errs[1] and "absent" in errs[2]
    # a restarted target (counters went down) is not a recovery
    reset = kvcr_guard.deltas(fixture("metrics_b_2.txt"), fixture("metrics_b_0.txt"))
    assert reset["reset"] and any("restarted" in e for e in kvcr_guard.recovery_errors("a", "a", reset))


def test_rdma_errors():
    assert kvcr_guard.rdma_errors(200000000, 190000000, 183500800) == []
    errs = kvcr_guard.rdma_errors(1000, None, 183500800)
    assert "transmit bytes 1000 do not cover" in errs[0] and "unreadable" in errs[1]
    assert "no KVCR payload" in kvcr_guard.rdma_errors(1, 1, 0)[0]


# ---------------------------------------------------------------- rc_mlx5: UCX's per-process selection tables

def test_selection_tables_parse_scope_cfg_and_transport():
    tables = kvcr_guard.selection_tables(fixture("ucx_target_after_tcp.txt"))
    assert [(t["scope"], t["cfg"], t["transports"]) for t in tables] == [
        ("inter-node", 1, ["rc_mlx5", "rc_mlx5"]), ("inter-node", 3, ["tcp"])]
    assert kvcr_guard.selection_tables("KVCR service ready\n| 0..8K | short | rc_mlx5/mlx5_0:1 |\n") == []


def test_rc_mlx5_printed_by_the_resend_on_both_sides():
    sides = {"source gpu-a kvcr-service.service": (fixture("ucx_source_before.txt"), fixture("ucx_source_after.txt")),
             "target gpu-b dynamo-worker@kvcr.service": (fixture("ucx_target_before.txt"), fixture("ucx_target_after.txt"))}
    assert kvcr_guard.transport_count(fixture("ucx_source_after.txt")) == 4
    assert kvcr_guard.transport_proof_errors(sides) == []


def test_rc_mlx5_seen_only_before_a_tcp_resend_is_no_proof():
    # the old greps passed on this: rc_mlx5 is in the journal, but the resend's new table names tcp
    errors = kvcr_guard.transport_proof_errors({
        "target gpu-b": (fixture("ucx_target_before.txt"), fixture("ucx_target_after_tcp.txt")),
        "source gpu-a": (fixture("ucx_source_before.txt"), fixture("ucx_source_after.txt"))})
    assert errors == ["target gpu-b: UCX selected tcp for the resend's inter-node configuration (cfg#3): not RDMA"]


def test_a_repeat_recovery_between_the_same_processes_prints_nothing_new():
    # UCX prints a selection once per endpoint configuration per process (ucp_proto_select_elem_init
    # on a cache miss): a second recovery served by the same memory service and worker processes adds
    # no table. Their earlier selections (rc_mlx5 only) stand for it.
    first = fixture("ucx_target_after.txt")
    source = fixture("ucx_source_after.txt")
    assert kvcr_guard.transport_proof_errors({"target": (first, first), "source": (source, source)}) == []
    # ... unless that process ever chose tcp for an inter-node configuration: then nothing shows
    # which one the resend reused
    tcp = fixture("ucx_target_after_tcp.txt")
    assert kvcr_guard.transport_proof_errors({"target": (tcp, tcp)}) == [
        "target: UCX selected tcp for this process's inter-node configurations (cfg#1, 3): not RDMA"]


def test_no_selection_table_or_no_log():
    assert kvcr_guard.transport_proof_errors({"s": ("KVCR service ready\n", "KVCR service ready\n")}) == [
        "s: UCX printed no inter-node protocol selection in this process (UCX_PROTO_INFO=y must be set)"]
    assert kvcr_guard.transport_proof_errors({"s": (None, "x")}) == ["s: UCX log unreadable"]
    other = ("| ucp_context_0 inter-node cfg#1 | remote memory read |\n"
             "|  0..inf | zero-copy | rc_verbs/mlx5_0:1 |\n")
    assert kvcr_guard.transport_proof_errors({"s": ("", other)}) == [
        "s: no rc_mlx5 in the resend's inter-node selection (rc_verbs)"]


def test_transport_count_is_word_bounded():
    assert kvcr_guard.transport_count("rc_mlx5/mlx5_0:1 rc_mlx5x xrc_mlx5 rc_mlx5") == 2
