# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Maru's vLLM connector with the KV layout of vLLM >= 0.31, and pool probes for systemd and verify.

Installed by the dynamo_runtime role into the Dynamo venv (beside upstream Maru) on hosts whose
workers name it in ``kv_connector_module_path``. Select it with::

    {"kv_connector": "MaruKVConnector", "kv_connector_module_path": "kvshare_maru_connector", ...}

Why: upstream ``maru_vllm/connector.py`` (xcena-dev/maru @ 4fd29ce) picks the KV layout from the
attention-metadata class and falls back to the old FlashAttention layout ``[2, pages, page_size,
...]`` for anything that is not MLA or Triton. vLLM 0.31 hands every connector a standardized
per-layer view ``[blocks, kv_heads, block_size, C]`` (CPU: ``C = 2 * head_size``), so every store
fails with "index N is out of bounds" and nothing is shared. This is the class of bug the seed's
single-node example calls connector fix #72. The subclass below replaces only the two layout
helpers and checks the views when vLLM registers them (a view they cannot index stops the worker
there, instead of every store failing inside upstream's "Maru save error" handler); everything else
(scheduler side, MaruHandler, resource manager, maru-server) is upstream. The views, per backend,
are in docs/maru.md and tests/fixtures/vllm_kv_views/vllm031.json (C = 2 * head_size, key then
value; MLA: one head, C = the latent, and the layer itself computes on the squeeze [blocks, N, C]).
The helpers index token slots, but they are only ever given whole blocks: Maru moves chunks of
``maru_kv_chunk_tokens``, which the connector rounds to a multiple of the block size. That matters on
CPU, where vLLM's kernels pack a block's keys internally (one token's key spreads over the block).
Drop it once the pinned Maru detects the layout itself (newer upstream has maru_vllm/kv_layout.py).

Command line (no vLLM import, so it is cheap enough for ExecStartPre)::

    python -m kvshare_maru_connector wait tcp://127.0.0.1:5555 [--timeout 120]
    python -m kvshare_maru_connector usage tcp://127.0.0.1:5555 [--follow]

``wait`` polls every second until maru-server answers a heartbeat and the resource manager it
names in its handshake accepts a TCP connection (exit 0), or gives up after the timeout (exit 1,
with what is down). ``usage`` prints the server's KV entries and per-instance bytes as JSON; with ``--follow`` it keeps
one connection and prints one such line per line it reads on stdin, until stdin ends.
"""

import argparse
import json
import socket
import sys
import time

# MaruKVConnector comes from the module-level __getattr__ below (built on first use).
# pylint: disable=undefined-all-variable
__all__ = ["MaruKVConnector", "KVLayoutError", "check_kv_caches", "check_kv_view", "extract_bhnc",
           "inject_bhnc", "wait", "usage", "follow"]
# pylint: enable=undefined-all-variable


# What the connector can index (the views vLLM 0.31 hands to connectors: see check_kv_view).
SUPPORTED = ("a 4-D per-layer view [blocks, kv_heads, block_size, C] of any strides (vLLM 0.31's "
             "standardized view: FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, CPU_ATTN; MLA "
             "backends with kv_heads 1: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA), "
             "one token per block_size row, whose block_size divides the scheduler's block size, in "
             "the model's only KV cache group (full attention or MLA)")
# KV cache spec classes (vLLM 0.31, vllm/v1/kv_cache_interface.py) whose rows hold one token each
# for the whole prompt; anything else (Mamba state, sliding windows, compressed or hidden-state
# caches) is refused at registration.
SUPPORTED_SPECS = ("FullAttentionSpec", "MLAAttentionSpec")


class KVLayoutError(RuntimeError):
    """A KV cache view this connector cannot index: raised at registration, so the worker stops."""


def check_kv_view(layer_name, shape, stride, dtype, block_size, backend="unknown", spec=None,
                  group=0, groups=1, tokens_per_state=1):
    """Refuse (KVLayoutError) a per-layer KV view that extract_bhnc/inject_bhnc cannot index.

    Plain values only, so it runs without torch: ``shape``/``stride`` of the view vLLM registers,
    ``block_size`` the scheduler's, ``spec`` the layer's KV cache spec class name (None: not known),
    ``group`` its KV cache group of ``groups``, ``tokens_per_state`` from the spec."""
    shape, stride = tuple(int(d) for d in shape), tuple(int(d) for d in stride)
    problems = []
    if len(shape) != 4:
        problems.append("a %d-D view, not [blocks, kv_heads, block_size, C]" % len(shape))
    elif not shape[2] or block_size % shape[2]:
        problems.append("block_size dim %d does not divide the scheduler's block size %d"
                        % (shape[2], block_size))
    if spec is not None and spec not in SUPPORTED_SPECS:
        problems.append("KV cache spec %s (one token per row of the whole prompt is required)" % spec)
    if tokens_per_state != 1:
        problems.append("%s tokens per stored row (one is required)" % tokens_per_state)
    if groups != 1:
        problems.append("KV cache group %d of %d (upstream Maru addresses every layer with group 0's "
                        "block ids)" % (group, groups))
    if problems:
        raise KVLayoutError(
            "kvshare_maru_connector: layer %s (attention backend %s): KV view shape %s stride %s dtype %s "
            "is not supported: %s. Supported: %s. The worker stops here: upstream Maru would otherwise log "
            "'Maru save error' on every store and serve with no shared cache."
            % (layer_name, backend, shape, stride, dtype, "; ".join(problems), SUPPORTED))


def _tokens_per_block(kv, block_size, mla):
    """N of the view: its rows per block (a kernel block may be a fraction of the scheduler's)."""
    if mla and kv.ndim == 3:  # MLA layer's own view: [blocks, block_size, C] (squeeze of H=1)
        n = kv.shape[1]
    elif kv.ndim == 4:
        n = kv.shape[2]
    else:
        raise ValueError("expected a [blocks, kv_heads, block_size, C] KV view (MLA also "
                         "[blocks, block_size, C]), got shape %s" % (tuple(kv.shape),))
    if block_size % n:
        raise ValueError("KV view block_size %d does not divide the block size %d" % (n, block_size))
    return n


def extract_bhnc(kv_layer, slot_mapping, block_size, mla=False):
    """Rows of ``kv_layer`` for the slots: [slots, kv_heads, C] from a [blocks, kv_heads, N, C] view
    (any strides), [slots, C] from an MLA layer's [blocks, N, C].

    Slots count in tokens of the scheduler's ``block_size``; a view whose kernel blocks are smaller
    (N = block_size / r, blocks r times as many: vLLM's kernel block splitting) is indexed by N,
    which is the same position (slot // N = block * r + offset // N)."""
    n = _tokens_per_block(kv_layer, block_size, mla)
    if kv_layer.ndim == 3:
        return kv_layer[slot_mapping // n, slot_mapping % n]
    return kv_layer[slot_mapping // n, :, slot_mapping % n]


def inject_bhnc(dst_kv_cache, src_kv_data, slot_mapping, block_size, mla=False):
    """Write ``src_kv_data`` (one row per slot) into ``dst_kv_cache`` at the slots: inverse of extract."""
    count = slot_mapping.shape[0]
    n = _tokens_per_block(dst_kv_cache, block_size, mla)
    if dst_kv_cache.ndim == 3:
        dst_kv_cache[slot_mapping // n, slot_mapping % n] = src_kv_data.reshape(count, -1)
        return
    dst_kv_cache[slot_mapping // n, :, slot_mapping % n] = (
        src_kv_data.reshape(count, dst_kv_cache.shape[1], -1))


def _layer_specs(kv_cache_config):
    """{layer: (spec class name, group index, tokens_per_state)} and the group count (KVCacheConfig)."""
    specs, groups = {}, list(getattr(kv_cache_config, "kv_cache_groups", None) or [])
    for index, group in enumerate(groups):
        per_layer = getattr(group.kv_cache_spec, "kv_cache_specs", None) or {}  # UniformTypeKVCacheSpecs
        for name in group.layer_names:
            spec = per_layer.get(name, group.kv_cache_spec)
            specs[name] = (type(spec).__name__, index, getattr(spec, "tokens_per_state", 1))
    return specs, len(groups)


def _backend_name(vllm_config, layer_name):
    try:
        layer = vllm_config.compilation_config.static_forward_context[layer_name]
        return layer.get_attn_backend().get_name()
    except Exception:  # only for the message
        return "unknown"


def check_kv_caches(kv_caches, block_size, vllm_config=None, kv_cache_config=None):
    """check_kv_view for every layer vLLM registers; returns {layer: shape}."""
    specs, groups = _layer_specs(kv_cache_config) if kv_cache_config is not None else ({}, 1)
    shapes = {}
    for name, kv in kv_caches.items():
        spec, group, tokens_per_state = specs.get(name, (None, 0, 1))
        if not hasattr(kv, "shape") or not hasattr(kv, "stride"):
            raise KVLayoutError("kvshare_maru_connector: layer %s (attention backend %s): KV cache %s is "
                                "not a tensor. Supported: %s" % (name, _backend_name(vllm_config, name),
                                                                 type(kv).__name__, SUPPORTED))
        check_kv_view(name, kv.shape, kv.stride(), kv.dtype, block_size, _backend_name(vllm_config, name),
                      spec, group, max(groups, 1), tokens_per_state)
        shapes[name] = tuple(kv.shape)
    return shapes


def _build_connector():
    from maru_vllm.connector import MaruKVConnector as UpstreamMaruKVConnector
    from maru_vllm.connector import MaruWorkerConnector

    class BHNCMaruWorkerConnector(MaruWorkerConnector):
        """Upstream worker side with vLLM 0.31's per-layer KV layout, checked at registration."""

        _kvshare_vllm_config = None
        _kvshare_kv_cache_config = None
        _kvshare_shapes = {}

        def register_kv_caches(self, kv_caches):
            # vLLM calls this once the KV cache is allocated, before the worker serves: a view the
            # helpers cannot index stops the worker here, with what it is and what would do.
            self._kvshare_shapes = check_kv_caches(kv_caches, self._block_size, self._kvshare_vllm_config,
                                                   self._kvshare_kv_cache_config)
            super().register_kv_caches(kv_caches)

        def _latent(self, kv, layer_name):
            # An MLA layer registers [blocks, 1, N, C] and computes on its squeeze [blocks, N, C].
            return kv.dim() == 3 and self._kvshare_shapes.get(layer_name, (0, 0))[1:2] == (1,)

        def _extract_kv_from_layer(self, kv_layer, slot_mapping, attn_metadata, layer_name=""):
            return extract_bhnc(kv_layer, slot_mapping, self._block_size, self._latent(kv_layer, layer_name))

        def _inject_kv_into_layer(self, dst_kv_cache, src_kv_data, slot_mapping, attn_metadata, layer_name):
            inject_bhnc(dst_kv_cache, src_kv_data, slot_mapping, self._block_size,
                        self._latent(dst_kv_cache, layer_name))

    class MaruKVConnector(UpstreamMaruKVConnector):
        """Upstream MaruKVConnector whose worker side uses BHNCMaruWorkerConnector."""

        def __init__(self, vllm_config, role, kv_cache_config=None):
            super().__init__(vllm_config, role, kv_cache_config)
            if getattr(self, "_worker", None) is not None:
                self._worker.__class__ = BHNCMaruWorkerConnector
                self._worker._kvshare_vllm_config = vllm_config
                self._worker._kvshare_kv_cache_config = kv_cache_config

    return MaruKVConnector


def __getattr__(name):
    # vLLM imports this module by kv_connector_module_path, then reads the class by name; the
    # probes below must not pay for importing vLLM.
    if name == "MaruKVConnector":
        cls = _build_connector()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def _client(server_url, timeout_ms):
    from maru_handler.rpc_client import RpcClient

    client = RpcClient(server_url, timeout_ms=timeout_ms)
    client.connect()
    return client


def probe(server_url, timeout_ms=1000):
    """One round: (ok, detail). ok when maru-server answers and its resource manager accepts TCP."""
    try:
        client = _client(server_url, timeout_ms)
    except Exception as exc:  # the import or the socket: report it, the caller retries
        return False, "maru-server %s: %s" % (server_url, exc)
    try:
        if not client.heartbeat():
            return False, "maru-server %s: no heartbeat" % server_url
        rm = str(client.handshake().get("rm_address") or "")
    except Exception as exc:
        return False, "maru-server %s: %s" % (server_url, exc)
    finally:
        client.close()
    host, dummy, port = rm.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_ms / 1000.0).close()
    except (OSError, ValueError) as exc:
        return False, "resource manager %s (named by maru-server %s): %s" % (rm or "?", server_url, exc)
    return True, "maru-server %s and resource manager %s answer" % (server_url, rm)


def wait(server_url, timeout=120.0, interval=1.0):
    deadline = time.monotonic() + timeout
    while True:
        ok, detail = probe(server_url)
        if ok or time.monotonic() >= deadline:
            return ok, detail
        time.sleep(interval)


def _usage_of(client):
    stats = client.get_stats()
    use = client.get_usage()
    return {
        "entries": stats.kv_manager.total_entries,
        "kv_bytes": stats.kv_manager.total_size,
        "instances": {i.instance_id: {"used": i.used, "allocated": i.allocated, "regions": i.regions}
                      for i in use.instances},
        "pool_total": use.pool_total,
        "pool_free": use.pool_free,
    }


def usage(server_url, timeout_ms=2000):
    """KV entries and bytes held by maru-server, in total and per instance id."""
    client = _client(server_url, timeout_ms)
    try:
        return _usage_of(client)
    finally:
        client.close()


def follow(server_url, lines, out, timeout_ms=2000):
    """One usage reading per line read from ``lines``, written to ``out`` as one JSON line, over one
    connection kept between readings (verify.yml polls the pool every 0.1 s while worker A's KV
    lands; a process per reading costs 0.13 s). A failed reading writes ``{"error": ...}`` and
    connects again for the next one. Returns at the end of ``lines``."""
    client = None
    try:
        for dummy in iter(lines.readline, ""):
            try:
                if client is None:
                    client = _client(server_url, timeout_ms)
                reading = _usage_of(client)
            except Exception as exc:  # reported on its line; the caller decides
                if client is not None:
                    client.close()
                client = None
                reading = {"error": "maru-server %s: %s" % (server_url, exc)}
            out.write(json.dumps(reading, sort_keys=True) + "\n")
            out.flush()
    finally:
        if client is not None:
            client.close()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kvshare_maru_connector")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wait", help="wait until maru-server and its resource manager answer")
    w.add_argument("server_url")
    w.add_argument("--timeout", type=float, default=120.0)
    u = sub.add_parser("usage", help="print maru-server's KV entries and per-instance usage as JSON")
    u.add_argument("server_url")
    u.add_argument("--follow", action="store_true",
                   help="keep running: one reading (a JSON line) per line read on stdin, until its end")
    args = parser.parse_args(argv)
    if args.command == "wait":
        ok, detail = wait(args.server_url, args.timeout)
        print(("ready: " if ok else "not ready after %gs: " % args.timeout) + detail, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    if args.follow:
        follow(args.server_url, sys.stdin, sys.stdout)
        return 0
    print(json.dumps(usage(args.server_url), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
