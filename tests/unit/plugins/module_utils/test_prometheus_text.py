# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Unit tests for plugins/module_utils/prometheus_text.py on real Dynamo/vLLM /metrics text."""
import math
import os

import pytest

from ansible_collections.kvshare.dynamo.plugins.module_utils import prometheus_text as pt

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "dynamo")


def fx(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        return fh.read()


VLLM_LABELS = {"dynamo_component", "dynamo_endpoint", "dynamo_namespace", "engine", "model",
               "model_name", "worker_id"}


# ---------------------------------------------------------------- real pages

def test_full_vllm_page_parses_without_errors():
    expo = pt.parse(fx("vllm_worker_metrics_full.txt"), strict=True)
    assert not expo.errors
    assert len(expo.samples) > 400
    assert expo.types[pt.VLLM_EXT_QUERIES] == "counter"
    assert expo.helps[pt.VLLM_EXT_HITS].startswith("External prefix cache hits from KV connector")


def test_real_vllm_label_sets():
    expo = pt.parse(fx("vllm_worker_metrics_full.txt"))
    (q,) = expo.select(pt.VLLM_EXT_QUERIES)
    assert set(q.labels) == VLLM_LABELS
    assert q.labels["worker_id"] == "3086a229cb33db3e"
    assert q.labels["dynamo_endpoint"] == "generate"
    assert q.labels["engine"] == "0"
    by_source = expo.select(pt.VLLM_PROMPT_TOKENS_BY_SOURCE)
    assert sorted(s.labels["source"] for s in by_source) == sorted(pt.VLLM_PROMPT_SOURCES)
    assert all(set(s.labels) == VLLM_LABELS | {"source"} for s in by_source)
    assert expo.label_values("worker_id") == ["3086a229cb33db3e"]


def test_vllm_counters_from_real_page():
    vals = pt.vllm_kv_counters(fx("vllm_worker_metrics_full.txt"), model_name="tiny")
    assert vals == {"queries": 446.0, "hits": 0.0, "external_kv_transfer": 0.0,
                    "local_compute": 446.0, "local_cache_hit": 0.0}


def test_mocker_page_has_no_vllm_kv_metrics_missing_not_zero():
    expo = pt.parse(fx("mocker_worker_metrics_full.txt"), strict=True)
    assert expo.has("vllm:num_requests_running")
    vals = pt.vllm_kv_counters(expo)
    assert vals == {"queries": None, "hits": None, "external_kv_transfer": None,
                    "local_compute": None, "local_cache_hit": None}
    d = pt.vllm_kv_deltas(expo, expo)
    assert d["queries"].delta is None and d["queries"].missing
    assert d["hit_rate"] is None
    assert set(d["missing"]) == {"queries", "hits"} | set(pt.VLLM_PROMPT_SOURCES)


def test_model_filter_excludes_other_models():
    assert pt.vllm_kv_counters(fx("vllm_worker_metrics_full.txt"),
                               model_name="other")["queries"] is None


def test_preregistration_page():
    expo = pt.parse(fx("vllm_worker_metrics_preregistration.txt"), strict=True)
    (s,) = expo.samples
    assert s.name == "dynamo_component_uptime_seconds"
    assert s.labels == {"worker_id": "3086a229cb33dd1a"}


def test_real_run_deltas_a_then_b():
    a0, a1 = fx("kv_vllm/metrics_a_0.txt"), fx("kv_vllm/metrics_a_1.txt")
    b1, b2 = fx("kv_vllm/metrics_b_1.txt"), fx("kv_vllm/metrics_b_2.txt")
    da = pt.vllm_kv_deltas(a0, a1, model_name="tiny")
    assert da["queries"].delta == 1515 and da["hits"].delta == 0
    assert da["local_compute"].delta == 1515
    db = pt.vllm_kv_deltas(b1, b2, model_name="tiny")
    assert db["hits"].delta == 1408 and db["external_kv_transfer"].delta == 1408
    assert db["local_compute"].delta == 107
    assert db["hit_rate"] == pytest.approx(1408 / 1515)
    assert not db["reset"] and db["missing"] == []
    flat = pt.deltas_as_dict(db)
    assert flat["hits"] == 1408 and flat["hit_rate"] == pytest.approx(0.9294, abs=1e-4)


def test_restart_between_snapshots_is_a_reset():
    # B before its restart (old worker_id) vs after (new worker_id): series vanished + new
    before, after = fx("kv_vllm/metrics_b_2.txt"), fx("vllm_worker_metrics_after_restart.txt")
    d = pt.counter_delta(before, after, pt.VLLM_EXT_QUERIES)
    after_val = pt.sum_samples(pt.parse(after), pt.VLLM_EXT_QUERIES)
    assert d.reset is True
    assert d.delta == after_val
    assert d.reset_series and d.reset_series[0]["worker_id"] == "3086a229cb33db3b"


# ---------------------------------------------------------------- syntax

def test_escaped_label_values_and_help():
    text = (
        '# HELP m_total A help with \\\\ backslash and \\n newline\n'
        '# TYPE m_total counter\n'
        'm_total{path="C:\\\\dir",q="say \\"hi\\"",nl="a\\nb",odd="x\\ty"} 3\n'
    )
    expo = pt.parse(text, strict=True)
    (s,) = expo.samples
    assert s.labels == {"path": "C:\\dir", "q": 'say "hi"', "nl": "a\nb", "odd": "x\\ty"}
    assert expo.helps["m_total"] == "A help with \\ backslash and \n newline"
    assert expo.types["m_total"] == "counter"


def test_special_values_timestamps_comments_whitespace():
    text = (
        "# just a comment\n\n"
        "a NaN\nb +Inf\nc -Inf 1700000000000\n"
        "d{x=\"1\",} 1.5e3 -12\n"
        "e\t{ y = \"2\" }\t7\n"
        "f 2 # {trace_id=\"abc\"} 1 1.0\n"
        "# EOF\n"
    )
    expo = pt.parse(text, strict=True)
    got = {s.name: s for s in expo.samples}
    assert math.isnan(got["a"].value)
    assert got["b"].value == float("inf")
    assert got["c"].value == float("-inf") and got["c"].timestamp == 1700000000000
    assert got["d"].labels == {"x": "1"} and got["d"].value == 1500.0
    assert got["d"].timestamp == -12
    assert got["e"].labels == {"y": "2"} and got["e"].value == 7
    assert got["f"].value == 2


def test_quoted_metric_name_form():
    expo = pt.parse('{"my.metric", le="1"} 4\n', strict=True)
    (s,) = expo.samples
    assert s.name == "my.metric" and s.labels == {"le": "1"} and s.value == 4


@pytest.mark.parametrize("line", [
    'x{a="1" 1', 'x{a=1} 1', 'x', 'x{a="1",a="2"} 1', 'x 1 2 3', 'x one', '9x 1',
    'x{a="unterminated} 1',
])
def test_bad_lines(line):
    expo = pt.parse("ok 1\n" + line + "\n")
    assert [s.name for s in expo.samples] == ["ok"]
    assert len(expo.errors) == 1 and "line 2" in expo.errors[0]
    with pytest.raises(pt.PrometheusParseError):
        pt.parse(line, strict=True)


def test_bytes_input():
    assert pt.parse(b"x 1\n").samples[0].value == 1.0


# ---------------------------------------------------------------- selection / sums

def _two_engines(q0, q1, h0, h1):
    line = fx("kv_vllm/metrics_b_2.txt").splitlines()
    tmpl_q = [x for x in line if x.startswith(pt.VLLM_EXT_QUERIES + "{")][0]
    tmpl_h = [x for x in line if x.startswith(pt.VLLM_EXT_HITS + "{")][0]
    out = []
    for eng, q, h in (("0", q0, h0), ("1", q1, h1)):
        out.append(tmpl_q.replace('engine="0"', 'engine="%s"' % eng).rsplit(" ", 1)[0]
                   + " %s" % q)
        out.append(tmpl_h.replace('engine="0"', 'engine="%s"' % eng).rsplit(" ", 1)[0]
                   + " %s" % h)
    return "\n".join(out) + "\n"


def test_sum_across_engines_and_filter():
    expo = pt.parse(_two_engines(100, 50, 64, 0))
    assert expo.sum(pt.VLLM_EXT_QUERIES) == 150
    assert expo.sum(pt.VLLM_EXT_QUERIES, {"engine": "1"}) == 50
    assert expo.sum(pt.VLLM_EXT_QUERIES, {"engine": ["0", "1"]}) == 150
    assert expo.sum(pt.VLLM_EXT_QUERIES, {"engine": lambda v: v != "0"}) == 50
    assert expo.sum(pt.VLLM_EXT_QUERIES, {"source": None}) == 150
    assert expo.sum(pt.VLLM_EXT_QUERIES, {"engine": "7"}) is None
    assert expo.sum("nope") is None


def test_delta_across_engines_with_one_engine_reset():
    before = _two_engines(100, 50, 64, 0)
    after = _two_engines(130, 10, 64, 0)  # engine 1 restarted
    d = pt.counter_delta(before, after, pt.VLLM_EXT_QUERIES)
    assert d.reset is True
    assert d.delta == 30 + 10
    assert d.reset_series[0]["engine"] == "1"


def test_counter_delta_simple_and_zero():
    a = "c_total 5\n"
    b = "c_total 9\n"
    d = pt.counter_delta(a, b, "c_total")
    assert (d.before, d.after, d.delta, d.reset, d.missing) == (5, 9, 4, False, False)
    assert pt.counter_delta(a, a, "c_total").delta == 0


def test_counter_reset_single_series():
    d = pt.counter_delta("c_total 50\n", "c_total 7\n", "c_total")
    assert d.reset is True and d.delta == 7
    assert d.as_dict()["reset"] is True


def test_missing_is_distinguishable_from_zero():
    d = pt.counter_delta("x 1\n", "x 1\n", "c_total")
    assert d.missing is True and d.delta is None
    d0 = pt.counter_delta("c_total 0\n", "c_total 0\n", "c_total")
    assert d0.missing is False and d0.delta == 0
    # appears only in 'after': counted from 0, not a reset
    d1 = pt.counter_delta("x 1\n", "c_total 3\n", "c_total")
    assert d1.missing_before and not d1.missing and d1.delta == 3 and not d1.reset


def test_hit_rate_none_without_queries():
    t = fx("kv_vllm/metrics_a_1.txt")
    d = pt.vllm_kv_deltas(t, t)
    assert d["queries"].delta == 0 and d["hit_rate"] is None
