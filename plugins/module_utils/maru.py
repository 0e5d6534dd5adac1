# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Maru (XCENA CXL KV pool) helpers: sizes, chunk-size check, a worker's connector config.

Stdlib only. Sources (xcena-dev/maru @ 4fd29cefdb8498db0a0e9afc1d89eab76642c3d2):

* ``maru_vllm/connector.py``: ``_parse_size`` (K/M/G/T are powers of 1024, an optional
  trailing ``B``, floats allowed, ints passed through), the ``kv_connector_extra_config`` keys
  and defaults (``maru_server_url`` ``tcp://localhost:5555``, ``maru_pool_size`` ``1G``,
  ``maru_chunk_size`` ``4M``, ``maru_kv_chunk_tokens`` 256, ``maru_instance_id`` random,
  ``maru_eager_map`` true), ``maru_kv_chunk_tokens`` aligned *down* to the block size (or set
  to the block size when that gives 0).
* ``MaruWorkerConnector.save_kv_layer``: each stored page holds ONE layer of ONE chunk:
  ``_extract_kv_from_layer`` returns ``[2, tokens, kv_heads * head_dim]`` (FlashAttention
  layout; the Triton layout has the same element count) or ``[tokens, latent_dim]`` for MLA,
  and ``handler.alloc(nbytes)`` raises ``ValueError`` when ``nbytes > chunk_size``
  (``maru_handler/handler.py``). The scheduler side opens a handler with ``pool_size =
  chunk_size``, so ``maru_pool_size`` must be ``>= maru_chunk_size`` too.
* Each tensor-parallel rank stores its own shard: kv heads per rank = ceil(kv_heads / tp)
  (vLLM replicates kv heads when tp > kv_heads, so at least 1).
"""

from __future__ import annotations

import collections
import json
import queue
import re
import subprocess
import threading

__all__ = [
    "DTYPE_BYTES",
    "UsageFollower",
    "MaruConfigError",
    "parse_size",
    "format_size",
    "effective_kv_chunk_tokens",
    "per_layer_chunk_bytes",
    "check_chunk_size",
    "worker_extra_config",
    "kv_transfer_config",
    "lmcache_config",
]

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)B?$")
_MULT = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}

# Bytes per element of the KV cache dtype (vLLM names; "auto" means the model dtype).
DTYPE_BYTES = {
    "float32": 4, "fp32": 4,
    "float16": 2, "fp16": 2, "half": 2,
    "bfloat16": 2, "bf16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

DEFAULT_POOL_SIZE = "1G"
DEFAULT_CHUNK_SIZE = "4M"
DEFAULT_KV_CHUNK_TOKENS = 256
DEFAULT_BLOCK_SIZE = 16


class MaruConfigError(ValueError):
    """A Maru setting is invalid; the message names the variable."""


def parse_size(value, name="size"):
    """Parse an int or a string like '4G', '500M', '1.5G', '4GB' to bytes (upstream rules)."""
    if isinstance(value, bool):
        raise MaruConfigError("%s: expected a size, got a boolean" % name)
    if isinstance(value, int):
        if value < 0:
            raise MaruConfigError("%s: size must not be negative (%d)" % (name, value))
        return value
    if isinstance(value, float):
        return int(value)
    text = str(value).strip().upper()
    match = _SIZE_RE.match(text)
    if not match:
        try:
            number = int(text)
        except ValueError:
            number = -1
        if number < 0:
            raise MaruConfigError(
                "%s: invalid size %r; expected a non-negative integer (bytes) or e.g. '4G', '500M'" % (name, value)
            )
        return number
    number, unit = float(match.group(1)), match.group(2)
    return int(number * _MULT[unit])


def format_size(num_bytes):
    """Render bytes with the largest exact binary unit, the way parse_size reads it back."""
    num_bytes = int(num_bytes)
    for unit in ("T", "G", "M", "K"):
        mult = _MULT[unit]
        if num_bytes >= mult and num_bytes % mult == 0:
            return "%d%s" % (num_bytes // mult, unit)
    return str(num_bytes)


def pool_space_problem(server_url, usage, need_bytes, who):
    """A line when maru-server's pool cannot hold one more allocation of ``need_bytes``, else None.

    ``usage`` is what ``python -m kvshare_maru_connector usage`` prints (pool_total, pool_free in
    bytes); ``who`` names the worker that allocates ``need_bytes`` (its maru_pool_size).
    """
    total, free = usage.get("pool_total"), usage.get("pool_free")
    if not isinstance(total, int) or not isinstance(free, int) or total <= 0 or free >= need_bytes:
        return None
    mib = 1024 * 1024
    return ("maru-server %s: its pool is full: %d MiB free of %d MiB (%.1f %% used), less than the %d MiB "
            "that %s allocates (maru_pool_size). The usual cause: regions of stopped workers that another "
            "worker still maps stay allocated; in a quiet window restart maru-server, then every worker "
            "of the pool on the other hosts (docs/maru.md)"
            % (server_url, free // mib, total // mib, 100.0 * (total - free) / total, need_bytes // mib, who))


def effective_kv_chunk_tokens(kv_chunk_tokens, block_size=DEFAULT_BLOCK_SIZE):
    """Tokens per chunk after the connector aligns them down to the vLLM block size."""
    tokens = int(kv_chunk_tokens)
    block = int(block_size)
    if tokens <= 0 or block <= 0:
        raise MaruConfigError("maru_kv_chunk_tokens and block_size must be positive")
    aligned = (tokens // block) * block
    return aligned if aligned > 0 else block


def _dtype_bytes(dtype):
    if isinstance(dtype, int):
        return dtype
    key = str(dtype).lower().replace("torch.", "")
    if key not in DTYPE_BYTES:
        raise MaruConfigError(
            "model dtype %r unknown; use one of %s or give dtype_bytes" % (dtype, ", ".join(sorted(DTYPE_BYTES)))
        )
    return DTYPE_BYTES[key]


def per_layer_chunk_bytes(model, kv_chunk_tokens=DEFAULT_KV_CHUNK_TOKENS):
    """Bytes of one stored page: one layer of one chunk on one tensor-parallel rank.

    ``model`` keys: ``num_kv_heads``, ``head_dim``, ``dtype`` (or ``dtype_bytes``),
    optional ``block_size`` (16), ``tensor_parallel_size`` (1), ``mla_latent_dim`` (MLA models:
    kv_lora_rank + qk_rope_head_dim, one latent vector per token instead of K and V).
    """
    dtype_bytes = int(model["dtype_bytes"]) if "dtype_bytes" in model else _dtype_bytes(model.get("dtype", "bfloat16"))
    tokens = effective_kv_chunk_tokens(kv_chunk_tokens, model.get("block_size", DEFAULT_BLOCK_SIZE))
    if model.get("mla_latent_dim"):
        return tokens * int(model["mla_latent_dim"]) * dtype_bytes
    tp = max(1, int(model.get("tensor_parallel_size", 1)))
    kv_heads = int(model["num_kv_heads"])
    heads_per_rank = max(1, -(-kv_heads // tp))
    return 2 * tokens * heads_per_rank * int(model["head_dim"]) * dtype_bytes


def check_chunk_size(chunk_size, pool_size, model=None, kv_chunk_tokens=DEFAULT_KV_CHUNK_TOKENS,
                     chunk_var="maru_pool_chunk_size", pool_var="maru_pool_pool_size"):
    """Return a list of error strings (empty when fine). ``model`` None/{} skips the model check."""
    errors = []
    chunk = parse_size(chunk_size, chunk_var)
    pool = parse_size(pool_size, pool_var)
    if chunk <= 0:
        errors.append("%s must be > 0" % chunk_var)
    if pool < chunk:
        errors.append(
            "%s (%s) is smaller than %s (%s): the scheduler-side handler asks for a pool of one chunk"
            % (pool_var, format_size(pool), chunk_var, format_size(chunk))
        )
    if model:
        need = per_layer_chunk_bytes(model, kv_chunk_tokens)
        if need > chunk:
            errors.append(
                "%s (%s = %d bytes) is too small for one per-layer KV chunk of this model: "
                "%d bytes (2 x kv_heads/tp x head_dim x dtype_bytes x kv_chunk_tokens); set %s >= %s"
                % (chunk_var, format_size(chunk), chunk, need, chunk_var, format_size(_round_up_mib(need)))
            )
    return errors


def _round_up_mib(num_bytes):
    mib = _MULT["M"]
    return -(-num_bytes // mib) * mib


def worker_extra_config(server_url, instance_id, pool_size=DEFAULT_POOL_SIZE, chunk_size=DEFAULT_CHUNK_SIZE,
                        kv_chunk_tokens=DEFAULT_KV_CHUNK_TOKENS, eager_map=None):
    """kv_connector_extra_config for one MaruKVConnector worker (sizes normalised to strings)."""
    if not instance_id:
        raise MaruConfigError("maru_instance_id must be a non-empty string")
    extra = {
        "maru_server_url": server_url,
        "maru_pool_size": format_size(parse_size(pool_size, "maru_pool_size")),
        "maru_chunk_size": format_size(parse_size(chunk_size, "maru_chunk_size")),
        "maru_kv_chunk_tokens": int(kv_chunk_tokens),
        "maru_instance_id": str(instance_id),
    }
    if eager_map is not None:
        extra["maru_eager_map"] = bool(eager_map)
    return extra


def kv_transfer_config(extra_config, kv_role="kv_both", module_path="maru_vllm"):
    """The full vLLM ``--kv-transfer-config`` dict for MaruKVConnector (``module_path``: upstream's
    ``maru_vllm`` or the collection's ``kvshare_maru_connector``)."""
    return {
        "kv_connector": "MaruKVConnector",
        "kv_connector_module_path": module_path,
        "kv_role": kv_role,
        "kv_connector_extra_config": dict(extra_config),
    }


def lmcache_config(server_host, server_port, pool_size_gb, chunk_size=DEFAULT_KV_CHUNK_TOKENS, instance_id=None,
                   extra=None):
    """LMCache (>= 0.4.3) MaruBackend config file content (a dict to dump as YAML).

    ``maru_pool_size`` is in GB (float) here, unlike MaruKVConnector's byte sizes.
    """
    try:
        gb = float(pool_size_gb)
    except (TypeError, ValueError):
        raise MaruConfigError("maru_pool_lmcache_pool_size_gb must be a number of GB, got %r" % (pool_size_gb,))
    if gb <= 0:
        raise MaruConfigError("maru_pool_lmcache_pool_size_gb must be > 0")
    extra_config = {"lookup_backoff_time": 0.001}
    if instance_id:
        extra_config["maru_instance_id"] = str(instance_id)
    extra_config.update(extra or {})
    return {
        "chunk_size": int(chunk_size),
        "local_cpu": False,
        "max_local_cpu_size": 0,
        "save_unfull_chunk": True,
        "maru_path": "maru://%s:%s" % (server_host, int(server_port)),
        "maru_pool_size": gb,
        "extra_config": extra_config,
    }


class UsageFollower:
    """``python -m kvshare_maru_connector usage --follow <URL>`` kept running (kv_share_check's
    store probe): each line written to its stdin asks for one reading, which it answers with one
    JSON line. Shared by threads, one reading at a time."""

    def __init__(self, argv, timeout):
        self.argv = list(argv)
        self.timeout = timeout
        self.lock = threading.Lock()
        self.lines = queue.Queue()
        self.stderr = collections.deque(maxlen=20)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, universal_newlines=True, bufsize=1)
        self.pumps = []
        for stream, sink in ((self.proc.stdout, self.lines.put), (self.proc.stderr, self.stderr.append)):
            thread = threading.Thread(target=self._pump, args=(stream, sink))
            thread.daemon = True
            thread.start()
            self.pumps.append(thread)

    @staticmethod
    def _pump(stream, sink):
        for line in iter(stream.readline, ""):
            sink(line)
        sink(None)

    def _gone(self):
        # Its output ended: the exit status and the last of stderr follow within moments.
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        self.pumps[1].join(2)
        return RuntimeError("%s exited (rc=%s): %s" % (" ".join(self.argv[-3:]), self.proc.returncode,
                                                       "".join(x for x in self.stderr if x).strip()[-300:]))

    def read(self):
        """One reading: the parsed JSON line."""
        with self.lock:
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                raise self._gone()
            try:
                line = self.lines.get(timeout=self.timeout)
            except queue.Empty:
                raise RuntimeError("no reading from %s within %.0f s" % (" ".join(self.argv[-3:]), self.timeout))
            if line is None:
                raise self._gone()
            return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
