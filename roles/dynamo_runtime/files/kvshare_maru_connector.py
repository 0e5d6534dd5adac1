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
helpers; everything else (scheduler side, MaruHandler, resource manager, maru-server) is upstream.
The helpers index token slots, but they are only ever given whole blocks: Maru moves chunks of
``maru_kv_chunk_tokens``, which the connector rounds to a multiple of the block size. That matters on
CPU, where vLLM's kernels pack a block's keys internally (one token's key spreads over the block).
Drop it once the pinned Maru detects the layout itself (newer upstream has maru_vllm/kv_layout.py).

Command line (no vLLM import, so it is cheap enough for ExecStartPre)::

    python -m kvshare_maru_connector wait tcp://127.0.0.1:5555 [--timeout 120]
    python -m kvshare_maru_connector usage tcp://127.0.0.1:5555

``wait`` polls every second until maru-server answers a heartbeat and the resource manager it
names in its handshake accepts a TCP connection (exit 0), or gives up after the timeout (exit 1,
with what is down). ``usage`` prints the server's KV entries and per-instance bytes as JSON.
"""

import argparse
import json
import socket
import sys
import time

# MaruKVConnector comes from the module-level __getattr__ below (built on first use).
__all__ = ["MaruKVConnector", "extract_bhnc", "inject_bhnc", "wait", "usage"]  # pylint: disable=undefined-all-variable


def _is_mla(attn_metadata, layer_name):
    from vllm.model_executor.layers.attention.mla_attention import MLACommonMetadata

    meta = attn_metadata[layer_name] if isinstance(attn_metadata, dict) else attn_metadata
    return isinstance(meta, MLACommonMetadata)


def extract_bhnc(kv_layer, slot_mapping, block_size, mla=False):
    """Rows of ``kv_layer`` ([blocks, heads, block_size, C]; MLA: [pages, page_size, C]) for the slots."""
    if mla:
        return kv_layer.reshape(-1, kv_layer.shape[-1])[slot_mapping]
    if kv_layer.dim() != 4:
        raise ValueError("expected a [blocks, kv_heads, block_size, C] KV view, got shape %s" % (tuple(kv_layer.shape),))
    return kv_layer[slot_mapping // block_size, :, slot_mapping % block_size]


def inject_bhnc(dst_kv_cache, src_kv_data, slot_mapping, block_size, mla=False):
    """Write ``src_kv_data`` (one row per slot) into ``dst_kv_cache`` at the slots: inverse of extract."""
    n = slot_mapping.shape[0]
    if mla:
        dst_kv_cache.reshape(-1, dst_kv_cache.shape[-1])[slot_mapping] = src_kv_data.reshape(n, -1)
        return
    if dst_kv_cache.dim() != 4:
        raise ValueError("expected a [blocks, kv_heads, block_size, C] KV view, got shape %s"
                         % (tuple(dst_kv_cache.shape),))
    dst_kv_cache[slot_mapping // block_size, :, slot_mapping % block_size] = (
        src_kv_data.reshape(n, dst_kv_cache.shape[1], -1))


def _build_connector():
    from maru_vllm.connector import MaruKVConnector as UpstreamMaruKVConnector
    from maru_vllm.connector import MaruWorkerConnector

    class BHNCMaruWorkerConnector(MaruWorkerConnector):
        """Upstream worker side with vLLM 0.31's per-layer KV layout."""

        def _extract_kv_from_layer(self, kv_layer, slot_mapping, attn_metadata, layer_name=""):
            return extract_bhnc(kv_layer, slot_mapping, self._block_size, _is_mla(attn_metadata, layer_name))

        def _inject_kv_into_layer(self, dst_kv_cache, src_kv_data, slot_mapping, attn_metadata, layer_name):
            inject_bhnc(dst_kv_cache, src_kv_data, slot_mapping, self._block_size,
                        _is_mla(attn_metadata, layer_name))

    class MaruKVConnector(UpstreamMaruKVConnector):
        """Upstream MaruKVConnector whose worker side uses BHNCMaruWorkerConnector."""

        def __init__(self, vllm_config, role, kv_cache_config=None):
            super().__init__(vllm_config, role, kv_cache_config)
            if getattr(self, "_worker", None) is not None:
                self._worker.__class__ = BHNCMaruWorkerConnector

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


def usage(server_url, timeout_ms=2000):
    """KV entries and bytes held by maru-server, in total and per instance id."""
    client = _client(server_url, timeout_ms)
    try:
        stats = client.get_stats()
        use = client.get_usage()
    finally:
        client.close()
    return {
        "entries": stats.kv_manager.total_entries,
        "kv_bytes": stats.kv_manager.total_size,
        "instances": {i.instance_id: {"used": i.used, "allocated": i.allocated, "regions": i.regions}
                      for i in use.instances},
        "pool_total": use.pool_total,
        "pool_free": use.pool_free,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kvshare_maru_connector")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wait", help="wait until maru-server and its resource manager answer")
    w.add_argument("server_url")
    w.add_argument("--timeout", type=float, default=120.0)
    u = sub.add_parser("usage", help="print maru-server's KV entries and per-instance usage as JSON")
    u.add_argument("server_url")
    args = parser.parse_args(argv)
    if args.command == "wait":
        ok, detail = wait(args.server_url, args.timeout)
        print(("ready: " if ok else "not ready after %gs: " % args.timeout) + detail, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    print(json.dumps(usage(args.server_url), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
