# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Prometheus text exposition (format 0.0.4) parsing, selection and counter deltas.

Stdlib only: this runs on managed hosts.

Shapes verified against a real NVIDIA Dynamo 1.6.1 + vLLM 0.31.0 (CPU) worker's
``DYN_SYSTEM_PORT`` ``/metrics`` (see tests/fixtures/dynamo/).

Key rules:
- A metric that is absent is reported as ``None``, never as ``0.0``.
- Selection sums every sample that matches a name and a label filter (several
  engines, several label sets).
- Counter deltas are computed per series (label set).  A series that went down, or a
  series that disappeared between the snapshots (e.g. the worker restarted and its
  ``worker_id`` label changed), marks the delta as a reset; a reset series contributes
  its ``after`` value (a counter restarts at 0).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
from collections import namedtuple

VLLM_EXT_QUERIES = "vllm:external_prefix_cache_queries_total"
VLLM_EXT_HITS = "vllm:external_prefix_cache_hits_total"
VLLM_PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
VLLM_PROMPT_SOURCES = ("external_kv_transfer", "local_compute", "local_cache_hit")

Sample = namedtuple("Sample", ["name", "labels", "value", "timestamp"])


class PrometheusParseError(ValueError):
    """A line of exposition text could not be parsed."""

    def __init__(self, lineno, line, reason):
        self.lineno = lineno
        self.line = line
        self.reason = reason
        super(PrometheusParseError, self).__init__(
            "line %d: %s: %r" % (lineno, reason, line[:200]))


class Exposition:
    """Parsed exposition text: samples plus HELP/TYPE metadata and parse errors."""

    def __init__(self, samples=None, types=None, helps=None, errors=None):
        self.samples = samples if samples is not None else []
        self.types = types if types is not None else {}
        self.helps = helps if helps is not None else {}
        self.errors = errors if errors is not None else []

    def names(self):
        return sorted(set(s.name for s in self.samples))

    def select(self, name, label_filter=None):
        return select(self.samples, name, label_filter)

    def has(self, name, label_filter=None):
        return bool(self.select(name, label_filter))

    def sum(self, name, label_filter=None):
        return sum_samples(self.samples, name, label_filter)

    def label_values(self, label, name=None):
        return label_values(self.samples, label, name)


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------

_NAME_START = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_NAME_CHARS = _NAME_START | set("0123456789")
_LABEL_START = _NAME_START - set(":")
_LABEL_CHARS = _LABEL_START | set("0123456789")
_WS = " \t"

_FLOAT_WORDS = {
    "nan": float("nan"),
    "+nan": float("nan"),
    "-nan": float("nan"),
    "inf": float("inf"),
    "+inf": float("inf"),
    "-inf": float("-inf"),
    "infinity": float("inf"),
    "+infinity": float("inf"),
    "-infinity": float("-inf"),
}


def parse_float(text):
    """Parse a Prometheus sample value (Go float syntax incl. NaN, +Inf, -Inf)."""
    word = text.strip()
    low = word.lower()
    if low in _FLOAT_WORDS:
        return _FLOAT_WORDS[low]
    # float() would also accept '1_000' and 'nan' spellings handled above; reject '_'.
    if "_" in word or not word:
        raise ValueError("invalid float %r" % text)
    return float(word)


def _unescape_help(text):
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n == "n":
                out.append("\n")
                i += 2
                continue
            if n == "\\":
                out.append("\\")
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _read_quoted(line, i):
    """Read a double-quoted string starting at line[i] == '"'. Return (value, next_i)."""
    if i >= len(line) or line[i] != '"':
        raise ValueError("expected '\"'")
    i += 1
    out = []
    while i < len(line):
        c = line[i]
        if c == "\\":
            if i + 1 >= len(line):
                raise ValueError("dangling backslash in label value")
            n = line[i + 1]
            if n == "n":
                out.append("\n")
            elif n == "\\":
                out.append("\\")
            elif n == '"':
                out.append('"')
            else:
                # The format only defines \\ \" \n; keep anything else verbatim.
                out.append("\\" + n)
            i += 2
            continue
        if c == '"':
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise ValueError("unterminated label value")


def _skip_ws(line, i):
    while i < len(line) and line[i] in _WS:
        i += 1
    return i


def _read_name(line, i, start_chars, chars):
    j = i
    if j >= len(line) or line[j] not in start_chars:
        raise ValueError("expected a name")
    j += 1
    while j < len(line) and line[j] in chars:
        j += 1
    return line[i:j], j


def _parse_labels(line, i, name):
    """Parse '{...}' starting at line[i] == '{'. Return (name, labels, next_i).

    Supports the quoted-name form ``{"metric.name", label="v"}`` as well.
    """
    labels = {}
    i += 1
    first = True
    while True:
        i = _skip_ws(line, i)
        if i >= len(line):
            raise ValueError("unterminated label set")
        if line[i] == "}":
            return name, labels, i + 1
        if line[i] == '"':
            # quoted metric name (UTF-8 names) or quoted label name
            text, j = _read_quoted(line, i)
            j = _skip_ws(line, j)
            if j < len(line) and line[j] == "=":
                key, i = text, j
            elif first and name is None:
                name = text
                i = j
                first = False
                if i < len(line) and line[i] == ",":
                    i += 1
                continue
            else:
                raise ValueError("unexpected quoted string in label set")
        else:
            key, i = _read_name(line, i, _LABEL_START, _LABEL_CHARS)
            i = _skip_ws(line, i)
        if i >= len(line) or line[i] != "=":
            raise ValueError("expected '=' after label name %r" % key)
        i = _skip_ws(line, i + 1)
        value, i = _read_quoted(line, i)
        if key in labels:
            raise ValueError("duplicate label %r" % key)
        labels[key] = value
        first = False
        i = _skip_ws(line, i)
        if i < len(line) and line[i] == ",":
            i += 1
            continue
        i = _skip_ws(line, i)
        if i < len(line) and line[i] == "}":
            return name, labels, i + 1
        raise ValueError("expected ',' or '}' in label set")


def parse_sample_line(line):
    """Parse one sample line. Return a Sample. Raise ValueError on bad syntax."""
    i = _skip_ws(line, 0)
    name = None
    if i < len(line) and line[i] != "{":
        name, i = _read_name(line, i, _NAME_START, _NAME_CHARS)
    labels = {}
    i = _skip_ws(line, i)
    if i < len(line) and line[i] == "{":
        name, labels, i = _parse_labels(line, i, name)
    if not name:
        raise ValueError("missing metric name")
    rest = line[i:].strip()
    # OpenMetrics exemplar: '<value> [<ts>] # {labels} value [ts]' -> drop it
    if " # " in rest:
        rest = rest.split(" # ", 1)[0].strip()
    parts = rest.split()
    if not parts:
        raise ValueError("missing value")
    if len(parts) > 2:
        raise ValueError("trailing garbage after value/timestamp")
    value = parse_float(parts[0])
    timestamp = None
    if len(parts) == 2:
        ts = parts[1]
        try:
            timestamp = int(ts)
        except ValueError:
            # OpenMetrics uses float seconds
            timestamp = float(parse_float(ts))
    return Sample(name, labels, value, timestamp)


def parse(text, strict=False):
    """Parse exposition text (str or bytes). Return an Exposition.

    With strict=False (the default) a bad line is recorded in ``errors`` and skipped;
    with strict=True the first bad line raises PrometheusParseError.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    result = Exposition()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line[1:].strip()
            if body.startswith("HELP ") or body.startswith("HELP\t"):
                parts = body[5:].strip().split(None, 1)
                if parts:
                    result.helps[parts[0]] = _unescape_help(parts[1]) if len(parts) > 1 else ""
            elif body.startswith("TYPE ") or body.startswith("TYPE\t"):
                parts = body[5:].split()
                if len(parts) >= 2:
                    result.types[parts[0]] = parts[1]
            # other comments (incl. '# EOF') are ignored
            continue
        try:
            result.samples.append(parse_sample_line(line))
        except ValueError as exc:
            err = PrometheusParseError(lineno, raw, str(exc))
            if strict:
                raise err
            result.errors.append(str(err))
    return result


# ---------------------------------------------------------------------------
# selection
# ---------------------------------------------------------------------------

def _label_matches(labels, label_filter):
    if not label_filter:
        return True
    for key, want in label_filter.items():
        have = labels.get(key)
        if want is None:
            if have is not None:
                return False
        elif isinstance(want, (list, tuple, set, frozenset)):
            if have not in want:
                return False
        elif callable(want):
            if have is None or not want(have):
                return False
        elif have != want:
            return False
    return True


def select(samples, name, label_filter=None):
    """Samples named ``name`` whose labels match ``label_filter``.

    label_filter maps a label name to: a string (exact match), a list/tuple/set (any of),
    None (label must be absent), or a callable(value) -> bool.
    """
    if isinstance(samples, Exposition):
        samples = samples.samples
    return [s for s in samples if s.name == name and _label_matches(s.labels, label_filter)]


def sum_samples(samples, name, label_filter=None):
    """Sum of matching sample values, or None when no sample matches (missing != 0)."""
    found = select(samples, name, label_filter)
    if not found:
        return None
    return float(sum(s.value for s in found))


def label_values(samples, label, name=None):
    """Sorted distinct values of ``label`` (optionally only on metric ``name``)."""
    if isinstance(samples, Exposition):
        samples = samples.samples
    vals = set()
    for s in samples:
        if name is not None and s.name != name:
            continue
        if label in s.labels:
            vals.add(s.labels[label])
    return sorted(vals)


def _series_key(labels):
    return tuple(sorted(labels.items()))


class CounterDelta:
    """Delta of a counter between two snapshots (summed over matching series)."""

    def __init__(self, name, label_filter, before, after, delta, reset, missing_before,
                 missing_after, reset_series=None):
        self.name = name
        self.label_filter = dict(label_filter or {})
        self.before = before
        self.after = after
        self.delta = delta
        self.reset = reset
        self.missing_before = missing_before
        self.missing_after = missing_after
        self.reset_series = reset_series or []

    @property
    def missing(self):
        """True when the metric is absent from the 'after' snapshot (no delta possible)."""
        return self.missing_after

    def as_dict(self):
        return {
            "name": self.name,
            "label_filter": self.label_filter,
            "before": self.before,
            "after": self.after,
            "delta": self.delta,
            "reset": self.reset,
            "missing": self.missing,
            "missing_before": self.missing_before,
            "missing_after": self.missing_after,
            "reset_series": self.reset_series,
        }

    def __repr__(self):
        return "CounterDelta(%r)" % (self.as_dict(),)


def counter_delta(before, after, name, label_filter=None):
    """Delta of counter ``name`` (matching ``label_filter``) from ``before`` to ``after``.

    ``before``/``after`` are Expositions, sample lists or exposition text.
    Per series: after >= before -> after - before; after < before -> reset, contributes
    ``after``; a series new in ``after`` contributes its full value (it started at 0);
    a series that vanished marks a reset and contributes nothing.
    If the metric is missing from ``after`` the delta is None.
    """
    if isinstance(before, (str, bytes)):
        before = parse(before)
    if isinstance(after, (str, bytes)):
        after = parse(after)
    b = dict((_series_key(s.labels), s.value) for s in select(before, name, label_filter))
    a = dict((_series_key(s.labels), s.value) for s in select(after, name, label_filter))
    missing_before = not b
    missing_after = not a
    before_sum = float(sum(b.values())) if b else None
    after_sum = float(sum(a.values())) if a else None
    if missing_after:
        return CounterDelta(name, label_filter, before_sum, None, None, False,
                            missing_before, True)
    total = 0.0
    reset = False
    reset_series = []
    for key, aval in a.items():
        bval = b.get(key)
        if bval is None or (isinstance(bval, float) and math.isnan(bval)):
            total += aval
        elif aval < bval:
            reset = True
            reset_series.append(dict(key))
            total += aval
        else:
            total += aval - bval
    for key in b:
        if key not in a:
            reset = True
            reset_series.append(dict(key))
    return CounterDelta(name, label_filter, before_sum, after_sum, total, reset,
                        missing_before, False, reset_series)


# ---------------------------------------------------------------------------
# vLLM helpers
# ---------------------------------------------------------------------------

def _vllm_filter(model_name=None, extra=None):
    flt = {}
    if model_name is not None:
        flt["model_name"] = model_name
    if extra:
        flt.update(extra)
    return flt


def vllm_kv_counters(exposition, model_name=None, label_filter=None):
    """Current values of the vLLM external-KV counters, summed over engines.

    Returns a dict with keys queries, hits, external_kv_transfer, local_compute,
    local_cache_hit; each is a float or None when the metric (or that source) is absent.
    """
    if isinstance(exposition, (str, bytes)):
        exposition = parse(exposition)
    flt = _vllm_filter(model_name, label_filter)
    out = {
        "queries": sum_samples(exposition, VLLM_EXT_QUERIES, flt),
        "hits": sum_samples(exposition, VLLM_EXT_HITS, flt),
    }
    for src in VLLM_PROMPT_SOURCES:
        f = dict(flt)
        f["source"] = src
        out[src] = sum_samples(exposition, VLLM_PROMPT_TOKENS_BY_SOURCE, f)
    return out


def vllm_kv_deltas(before, after, model_name=None, label_filter=None):
    """Deltas of the vLLM external-KV counters between two snapshots.

    Returns a dict: queries, hits, external_kv_transfer, local_compute, local_cache_hit
    (each a CounterDelta), plus 'hit_rate' (Δhits/Δqueries, None when Δqueries is 0 or
    either metric is missing) and 'missing' (names of metrics absent after).
    """
    if isinstance(before, (str, bytes)):
        before = parse(before)
    if isinstance(after, (str, bytes)):
        after = parse(after)
    flt = _vllm_filter(model_name, label_filter)
    out = {
        "queries": counter_delta(before, after, VLLM_EXT_QUERIES, flt),
        "hits": counter_delta(before, after, VLLM_EXT_HITS, flt),
    }
    for src in VLLM_PROMPT_SOURCES:
        f = dict(flt)
        f["source"] = src
        out[src] = counter_delta(before, after, VLLM_PROMPT_TOKENS_BY_SOURCE, f)
    q = out["queries"].delta
    h = out["hits"].delta
    out["hit_rate"] = (h / q) if (q and h is not None) else None
    out["missing"] = sorted(k for k in ("queries", "hits") + VLLM_PROMPT_SOURCES
                            if out[k].missing)
    out["reset"] = any(out[k].reset for k in ("queries", "hits") + VLLM_PROMPT_SOURCES)
    return out


def deltas_as_dict(deltas):
    """Flatten a vllm_kv_deltas() result into plain data (delta values only + flags)."""
    out = {}
    for key, val in deltas.items():
        if isinstance(val, CounterDelta):
            out[key] = val.delta
        else:
            out[key] = val
    return out
