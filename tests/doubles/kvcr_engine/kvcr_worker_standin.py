# TEST DOUBLE for dynamo.vllm with vLLM's KVCR tier (memory-service variant): vLLM offloading refuses the CPU; sandbox tests only.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""KVCR worker stand-in for tests/integration/kvcr (guard_recovery.yml end to end without CUDA).

vLLM's offloading connector refuses the CPU, so no real engine can claim a KVCR Guard in the
sandbox. This stand-in keeps every part it can real and imitates only the vLLM tier's counters:

real   - a Dynamo 1.6.1 worker (dynamo.common.backend LLMEngine + Worker): registered in etcd,
         reached through the real frontend and its KV router, its /health, /metrics and instance id;
       - an engine process titled ``VLLM::EngineCore`` in the worker unit's cgroup that claims the
         memory service's Guard through kvcr 0.1.1's own client half (``kvcr.guard_protocol.
         KVCRClient.claim``: pidfd handover, control endpoint, pool mapping) and holds the lease
         while it lives; the prompt's blocks are written into the Guard's mapped pool;
       - when that process is SIGKILLed, the real kvcr-service sees the pidfd close and promotes the
         Guard (``KVCR_EVENT guard_promoted``); this main process then exits like a worker whose
         engine died, so systemd's Restart= (or guard_recovery.yml's hold) decides what follows;
       - the answer is a deterministic function of the prompt tokens (same prompt, same answer);
       - its KV state-agent attachment: at start, as dynamo.vllm's ``start_attachment_owner`` does,
         a Dynamo 1.6.1 ``KvStateAttachmentOwner`` registers the attachment intent (this worker's
         id, the cache owner id and raw KV-event endpoint of its kv_transfer_config) for the one live
         state-agent host, waiting up to 30 s for one; when that fails (no host, or two) it logs
         dynamo.vllm's "KV state-agent attachment setup failed; KV routing remains disabled" and
         serves on without one, as dynamo.vllm does. The real kv_state_agent attaches a slot for
         each intent. It runs in a child process (``--attach``: the worker's own runtime is not
         reachable from an LLMEngine), lives exactly as long as this process, and never re-selects
         the host, as 1.6.1's owner does not;
imitated (no vLLM KVCR tier on CPU) - the counters ``vllm:kvcr_transfer_blocks_total{operation}``,
         ``vllm:kv_offload_tiering_{write,read}_bytes_total{tier="1:kvcr"}`` and
         ``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``: a prompt whose block
         prefix this worker computed counts as local_fill/write bytes; one that a peer stand-in
         announced (``kvcr_standin_prefix`` on its /metrics, read while the peer was alive) counts as
         remote_deliver/read bytes/external tokens. No byte crosses hosts: no RDMA, no NIXL transfer.

Usage (the worker unit's ExecStart): <venv python> kvcr_worker_standin.py --config <json>
The engine process: <venv python> kvcr_worker_standin.py --engine-core VLLM::EngineCore --config <json>
The attachment process: <venv python> kvcr_worker_standin.py --attach <worker id> --config <json>
"""

import argparse
import ctypes
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

LOG = logging.getLogger("kvcr-standin")
BLOCK_BYTES = 64 * 1024
ENGINE_TITLE = "VLLM::EngineCore"
PREFIX_RE = re.compile(r'^kvcr_standin_prefix\{key="([0-9a-f]+)"\} 1', re.M)


def load_config(path):
    with open(path) as handle:
        cfg = json.load(handle)
    tier = cfg["kv_transfer_config"]["kv_connector_extra_config"]["secondary_tiers"][0]
    cfg["tier"] = tier
    return cfg


# ---------------------------------------------------------------- engine process (holds the Guard)

def engine_core(cfg):
    """Claim the Guard through kvcr's client half; fill blocks on request; release on EOF."""
    from kvcr.guard_protocol import KVCRClient

    tier = cfg["tier"]
    # guard_index = dp_local_rank (vLLM's tier); one pool, one control port per local DP rank.
    hold = KVCRClient(tier["kvcr_service_socket_path"]).claim(
        0, [("", BLOCK_BYTES)], tier["compatibility_digest"], (tier["control_host"], int(tier["control_ports"][0])))
    _name, address, size = hold.local_dram.pools[0]
    blocks = size // BLOCK_BYTES
    print("claimed pool_bytes=%d blocks=%d" % (size, blocks), flush=True)
    cursor = 0
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "fill":
            count, value = int(parts[1]), int(parts[2]) & 0xFF
            for dummy in range(count):
                ctypes.memset(address + (cursor % blocks) * BLOCK_BYTES, value, BLOCK_BYTES)
                cursor += 1
            print("filled %d %d" % (count, count * BLOCK_BYTES), flush=True)
    hold.release()
    return 0


# ---------------------------------------------------------------- attachment process (the intent)

def attach(cfg, worker_id):
    """Register this worker's KV state-agent attachment intent (Dynamo's own owner) and hold it until
    stdin closes (the worker stops) or the process is killed with the worker."""
    import uvloop
    from dynamo.llm import KvStateAttachmentOwner
    from dynamo.runtime import dynamo_worker

    extra = cfg["kv_transfer_config"]["kv_connector_extra_config"]
    agent = extra["dynamo_state_agent"]
    owner_id = agent["cache_owner_ids"]["0"]
    namespace = os.environ.get("DYN_NAMESPACE", "dynamo")
    descriptors = [{
        "cache_owner_id": owner_id, "global_dp_rank": 0, "kv_state_endpoint": "%s/backend/generate" % namespace,
        "indexer_domain_id": owner_id.split("/", 1)[0], "kv_block_size": int(cfg.get("block_tokens", 16)),
        "raw_zmq_endpoint": "tcp://%s:%d" % (agent["raw_advertise_host"], int(cfg["kv_events_port"])), "raw_topic": "",
        "image_token_id": None, "video_token_id": None, "router_hint_source": None}]

    @dynamo_worker()
    async def run(runtime):
        owner = KvStateAttachmentOwner(runtime.endpoint("%s.kvcr_standin.attach" % namespace), worker_id, descriptors)
        await owner.start()
        print("attached worker %x" % worker_id, flush=True)
        import asyncio
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await owner.close()

    uvloop.run(run())
    return 0


# ---------------------------------------------------------------- worker process

class KvcrStandinState:
    """The imitated KVCR counters and the prefixes this worker and its peers hold."""

    def __init__(self, block_tokens):
        self.block_tokens = block_tokens
        self.lock = threading.Lock()
        self.counters = {"local_fill": 0, "remote_deliver": 0, "write_bytes": 0, "read_bytes": 0, "external_tokens": 0}
        self.local = set()
        self.peer = set()

    def prefix(self, token_ids):
        blocks = len(token_ids) // self.block_tokens
        if blocks == 0:
            return None, 0
        raw = ",".join(str(t) for t in token_ids[:blocks * self.block_tokens]).encode()
        return hashlib.sha1(raw).hexdigest()[:16], blocks

    def exposition(self, labels):
        c = self.counters
        lines = [
            "# HELP vllm:kvcr_transfer_blocks_total KVCR blocks moved (stand-in: imitated).",
            "# TYPE vllm:kvcr_transfer_blocks_total counter",
            'vllm:kvcr_transfer_blocks_total{%s,operation="local_fill"} %d' % (labels, c["local_fill"]),
            'vllm:kvcr_transfer_blocks_total{%s,operation="remote_deliver"} %d' % (labels, c["remote_deliver"]),
            "# TYPE vllm:kv_offload_tiering_write_bytes_total counter",
            'vllm:kv_offload_tiering_write_bytes_total{%s,tier="1:kvcr"} %d' % (labels, c["write_bytes"]),
            "# TYPE vllm:kv_offload_tiering_read_bytes_total counter",
            'vllm:kv_offload_tiering_read_bytes_total{%s,tier="1:kvcr"} %d' % (labels, c["read_bytes"]),
            "# TYPE vllm:prompt_tokens_by_source_total counter",
            'vllm:prompt_tokens_by_source_total{%s,source="external_kv_transfer"} %d' % (labels, c["external_tokens"]),
            "# TYPE kvcr_standin_prefix gauge",
        ]
        lines += ['kvcr_standin_prefix{key="%s"} 1' % key for key in sorted(self.local)]
        return "\n".join(lines) + "\n"


def _make_engine_class():
    from dynamo.common.backend.engine import EngineConfig, LLMEngine, LlmRegistration
    from dynamo.common.backend.worker import WorkerConfig

    class KvcrStandinEngine(LLMEngine):
        def __init__(self, cfg, config_path):
            self.cfg = cfg
            self.config_path = config_path
            self.state = KvcrStandinState(int(cfg.get("block_tokens", 16)))
            self.engine = None
            self.engine_lock = threading.Lock()
            self.stopping = False

        @classmethod
        async def from_args(cls, argv=None):
            parser = argparse.ArgumentParser()
            parser.add_argument("--config", required=True)
            args = parser.parse_args(argv)
            cfg = load_config(args.config)
            engine = cls(cfg, args.config)
            worker_config = WorkerConfig(
                namespace=os.environ.get("DYN_NAMESPACE", "dynamo"), component="backend", endpoint="generate",
                model_name=cfg["model_path"], served_model_name=cfg["served_model_name"],
                discovery_backend=os.environ.get("DYN_DISCOVERY_BACKEND", "etcd"), request_plane="tcp",
                enable_kv_routing=False)
            return engine, worker_config

        async def start(self, worker_id):
            self._start_engine()
            self._attach(worker_id)
            threading.Thread(target=self._watch_engine, daemon=True).start()
            threading.Thread(target=self._learn_peers, daemon=True).start()
            return EngineConfig(
                model=self.cfg["model_path"], served_model_name=self.cfg["served_model_name"],
                llm=LlmRegistration(context_length=int(self.cfg.get("context_length", 131072)),
                                    kv_cache_block_size=self.state.block_tokens, total_kv_blocks=4096,
                                    max_num_seqs=8, max_num_batched_tokens=131072))

        def _start_engine(self):
            argv = [sys.executable, os.path.abspath(__file__), "--engine-core", ENGINE_TITLE, "--config", self.config_path]
            self.engine = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            line = self.engine.stdout.readline().strip()
            if not line.startswith("claimed "):
                raise RuntimeError("EngineCore did not claim the KVCR Guard (%r, rc %s)" % (line, self.engine.poll()))
            LOG.info("EngineCore pid %d holds KVCR Guard 0: %s", self.engine.pid, line)

        def _attach(self, worker_id):
            # The worker's request-plane and system ports are its own: the child takes ephemeral ones.
            env = dict((k, v) for k, v in os.environ.items() if k not in ("DYN_SYSTEM_PORT", "DYN_TCP_RPC_PORT"))
            argv = [sys.executable, os.path.abspath(__file__), "--attach", str(int(worker_id)), "--config", self.config_path]
            self.attachment = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                               env=env, preexec_fn=_die_with_parent)
            line = self.attachment.stdout.readline().strip()
            if not line.startswith("attached "):
                # dynamo.vllm (worker_factory): the worker serves on, without KV routing.
                LOG.error("KV state-agent attachment setup failed; KV routing remains disabled (%r, rc %s)",
                          line, self.attachment.wait())
                self.attachment = None
                return
            LOG.info("KV state-agent attachment pid %d: %s", self.attachment.pid, line)
            threading.Thread(target=self._watch_attachment, daemon=True).start()

        def _watch_attachment(self):
            rc = self.attachment.wait()
            if self.stopping:
                return
            # In dynamo.vllm the owner lives in the worker process: without it the worker is gone too.
            LOG.error("KV state-agent attachment pid %d ended (rc %s): the worker exits", self.attachment.pid, rc)
            logging.shutdown()
            os._exit(1)

        def _watch_engine(self):
            rc = self.engine.wait()
            if self.stopping:
                return
            # dynamo.vllm cannot serve without its engine: exit, and let systemd's Restart= decide.
            LOG.error("EngineCore pid %d died (rc %s): the worker exits", self.engine.pid, rc)
            logging.shutdown()
            os._exit(1)

        def _learn_peers(self):
            while not self.stopping:
                for url in self.cfg.get("peers", []):
                    try:
                        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=2) as resp:
                            found = PREFIX_RE.findall(resp.read().decode("utf-8", "replace"))
                    except OSError:
                        continue
                    with self.state.lock:
                        self.state.peer.update(found)
                time.sleep(1)

        def _fill(self, blocks, key):
            with self.engine_lock:
                self.engine.stdin.write("fill %d %d\n" % (blocks, int(key[:2], 16)))
                self.engine.stdin.flush()
                reply = self.engine.stdout.readline().split()
            return int(reply[2]) if len(reply) == 3 and reply[0] == "filled" else 0

        async def generate(self, request, context):
            token_ids = list(request.get("token_ids") or [])
            max_new = int((request.get("stop_conditions") or {}).get("max_tokens") or 16)
            key, blocks = self.state.prefix(token_ids)
            if key is not None:
                with self.state.lock:
                    where = "local" if key in self.state.local else ("peer" if key in self.state.peer else "new")
                if where == "new":
                    written = self._fill(blocks, key)
                    with self.state.lock:
                        self.state.counters["local_fill"] += blocks
                        self.state.counters["write_bytes"] += written
                        self.state.local.add(key)
                elif where == "peer":
                    with self.state.lock:
                        self.state.counters["remote_deliver"] += blocks
                        self.state.counters["read_bytes"] += blocks * BLOCK_BYTES
                        self.state.counters["external_tokens"] += blocks * self.state.block_tokens
                LOG.info("request: %d prompt tokens, %d blocks, prefix %s (%s)", len(token_ids), blocks, key, where)
            n = max(1, len(token_ids))
            out = [token_ids[(i * 7) % n] if token_ids else 1 for i in range(max_new)]
            yield {"token_ids": out, "index": 0, "finish_reason": "length",
                   "completion_usage": {"prompt_tokens": len(token_ids), "completion_tokens": max_new,
                                        "total_tokens": len(token_ids) + max_new}}

        async def register_prometheus(self, metrics):
            labels = 'engine="0",model_name="%s"' % self.cfg["served_model_name"]
            metrics.register_prometheus_expfmt_callback(lambda: self.state.exposition(labels))

        async def cleanup(self):
            self.stopping = True
            attachment = getattr(self, "attachment", None)
            if attachment is not None and attachment.poll() is None:
                attachment.stdin.close()
                try:
                    attachment.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    attachment.kill()
            if self.engine is not None and self.engine.poll() is None:
                self.engine.stdin.close()
                try:
                    self.engine.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.engine.kill()

    return KvcrStandinEngine


def _die_with_parent():
    # PR_SET_PDEATHSIG: the attachment (and its intent's lease) ends with the worker process.
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if argv[:1] == ["--attach"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--attach", type=int)
        parser.add_argument("--config", required=True)
        args = parser.parse_args(argv)
        return attach(load_config(args.config), args.attach)
    if argv[:1] == ["--engine-core"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--engine-core")
        parser.add_argument("--config", required=True)
        args = parser.parse_args(argv)
        return engine_core(load_config(args.config))
    from dynamo.common.backend.run import run
    run(_make_engine_class(), argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
