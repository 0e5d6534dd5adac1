# TEST DOUBLE for a Dynamo 1.6.1 frontend (/v1/completions, /v1/chat/completions) and two vLLM workers' /metrics; verify.yml tests.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Three stdlib HTTP servers on 127.0.0.1 that answer what kvshare.dynamo.kv_share_check reads.

- The frontend: ``GET /health?instances=true`` lists both workers' ``generate`` instances (ids as
  JSON integers above 2**53, ``transport.tcp`` with each worker's pinned request-plane port and
  hex lease, as tests/fixtures/dynamo/frontend_health_instances.json); ``POST /v1/completions`` and
  ``/v1/chat/completions`` need ``nvext.backend_instance_id`` (direct routing) and answer from that
  worker, as JSON or, with ``stream``, as SSE chunks (one word each, ``finish_reason`` on the last,
  then a ``choices: []`` chunk with ``usage`` when ``stream_options.include_usage``, then
  ``[DONE]``), the format of tests/fixtures/dynamo/kv_vllm/sse_*.txt.
- Each worker: ``GET /metrics`` with the counters kv_share_check reads
  (plugins/module_utils/prometheus_text.py): ``vllm:external_prefix_cache_queries_total``,
  ``vllm:external_prefix_cache_hits_total``, ``vllm:prompt_tokens_by_source_total{source=...}``
  (external_kv_transfer, local_compute, local_cache_hit) and
  ``dynamo_component_requests_total{dynamo_endpoint="generate"}``, labelled ``worker_id="<hex id>"``
  and ``model_name``; ``GET /health`` answers ready.

A prompt is one token per whitespace-separated word. Prefix caching is off (no local cache hits).
The pool: with ``pool="shared"``, a prompt a worker computed is stored, and a later request with
the same prompt on any worker takes its whole blocks (``block`` tokens) from the pool (external
hits, external_kv_transfer tokens, cached_tokens in usage); with ``pool="broken"`` nothing is ever
stored, so B computes everything again. Answers are the same words for the same prompt (greedy).

Run alone (``python kv_share_stack.py [shared|broken]``) it prints its URLs as JSON and serves
until killed.
"""
import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
SOURCES = ("external_kv_transfer", "local_compute", "local_cache_hit")


class Worker:
    """One vLLM worker's identity and counters."""

    def __init__(self, name, instance_id, rpc_port):
        self.name = name
        self.instance_id = instance_id
        self.rpc_port = rpc_port
        self.queries = 0
        self.hits = 0
        self.by_source = dict((source, 0) for source in SOURCES)
        self.generate_requests = 0
        self.server = None

    @property
    def hex_id(self):
        return format(self.instance_id, "x")

    def metrics(self, model):
        labels = ('dynamo_component="backend",dynamo_endpoint="generate",dynamo_namespace="dynamo",engine="0",'
                  'model="%s",model_name="%s",worker_id="%s"' % (model, model, self.hex_id))
        lines = [
            "# HELP dynamo_component_requests_total Total number of requests processed by work handler",
            "# TYPE dynamo_component_requests_total counter",
            "dynamo_component_requests_total{%s} %d" % (labels.replace(',engine="0"', ""), self.generate_requests),
            "# TYPE vllm:external_prefix_cache_queries_total counter",
            "vllm:external_prefix_cache_queries_total{%s} %.1f" % (labels, self.queries),
            "# TYPE vllm:external_prefix_cache_hits_total counter",
            "vllm:external_prefix_cache_hits_total{%s} %.1f" % (labels, self.hits),
            "# TYPE vllm:prompt_tokens_by_source_total counter",
        ]
        lines += ['vllm:prompt_tokens_by_source_total{%s,source="%s"} %.1f' % (labels, source, value)
                  for source, value in sorted(self.by_source.items())]
        return "\n".join(lines) + "\n"


class KvShareStack:
    """The frontend and workers A and B; ``pool`` is "shared" or "broken"."""

    def __init__(self, pool="shared", model="tiny", block=128, rpc_ports=(29081, 29082)):
        assert pool in ("shared", "broken"), pool
        self.pool_works = pool == "shared"
        self.model = model
        self.block = block
        self.stored = set()
        self.lock = threading.Lock()
        self.requests = []  # (worker name, prompt tokens, external hits)
        self.workers = [Worker("a", 3496660461086300990, rpc_ports[0]), Worker("b", 3496660461086300987, rpc_ports[1])]
        self.frontend = self._serve(self._frontend)
        for worker in self.workers:
            worker.server = self._serve(self._worker_handler(worker))

    # -- servers ------------------------------------------------------------------------------
    @staticmethod
    def _serve(handle):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_GET(self):
                handle(self, "GET", b"")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                handle(self, "POST", self.rfile.read(length) if length else b"")

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return server

    @staticmethod
    def url_of(server):
        return "http://127.0.0.1:%d" % server.server_address[1]

    @property
    def frontend_port(self):
        return self.frontend.server_address[1]

    def system_port(self, index):
        return self.workers[index].server.server_address[1]

    def close(self):
        for server in [self.frontend] + [w.server for w in self.workers]:
            server.shutdown()
            server.server_close()

    # -- answers ------------------------------------------------------------------------------
    @staticmethod
    def _send(request, status, body, content_type="application/json"):
        data = body.encode("utf-8") if isinstance(body, str) else body
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def _worker_handler(self, worker):
        def handle(request, method, _body):
            path = urlsplit(request.path).path
            if method == "GET" and path == "/metrics":
                with self.lock:
                    text = worker.metrics(self.model)
                return self._send(request, 200, text, "text/plain; version=0.0.4; charset=utf-8")
            if method == "GET" and path in ("/health", "/live"):
                return self._send(request, 200, json.dumps({"status": "ready"}))
            return self._send(request, 404, json.dumps({"error": "not found"}))
        return handle

    def _instances(self):
        return {"status": "healthy", "endpoints": ["dyn://dynamo.backend.generate"], "instances": [
            {"component": "backend", "endpoint": "generate", "namespace": "dynamo", "instance_id": w.instance_id,
             "transport": {"tcp": "127.0.0.1:%d/%s/dynamo/backend/generate" % (w.rpc_port, w.hex_id)},
             "device_type": "cuda", "request_plane_codec": "msgpack"} for w in self.workers]}

    def _frontend(self, request, method, body):
        path = urlsplit(request.path).path
        if method == "GET" and path == "/health":
            # Python's json keeps the ids exact integers, as the frontend writes them.
            return self._send(request, 200, json.dumps(self._instances()))
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            return self._send(request, 404, json.dumps({"error": "not found"}))
        try:
            req = json.loads(body)
        except ValueError:
            return self._send(request, 400, json.dumps({"error": "body is not JSON"}))
        if req.get("model") != self.model:
            return self._send(request, 404, json.dumps({"error": "model %r not found" % req.get("model")}))
        target = (req.get("nvext") or {}).get("backend_instance_id")
        worker = next((w for w in self.workers if w.instance_id == target), None)
        if worker is None:
            return self._send(request, 400, json.dumps({"error": "direct routing: unknown backend_instance_id %r" % target}))
        chat = path.endswith("/chat/completions")
        prompt = (" ".join(str(m.get("content", "")) for m in req.get("messages") or []) if chat else str(req.get("prompt", "")))
        usage = self._compute(worker, prompt)
        words = self._answer(prompt, int(req.get("max_tokens") or 16))
        usage["completion_tokens"] = len(words)
        usage["total_tokens"] = usage["prompt_tokens"] + len(words)
        if not req.get("stream"):
            choice = ({"index": 0, "message": {"role": "assistant", "content": "".join(words)}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": "".join(words), "finish_reason": "length"})
            return self._send(request, 200, json.dumps({"id": "cmpl-standin", "object": "text_completion", "model": self.model,
                                                        "choices": [choice], "usage": usage}))
        chunks = []
        for pos, word in enumerate(words):
            choice = {"index": 0, "delta": {"content": word}} if chat else {"index": 0, "text": word}
            if pos == len(words) - 1:
                choice["finish_reason"] = "length"
            chunks.append({"id": "cmpl-standin", "choices": [choice], "model": self.model, "usage": None})
        if (req.get("stream_options") or {}).get("include_usage"):
            chunks.append({"id": "cmpl-standin", "choices": [], "model": self.model, "usage": usage})
        request.send_response(200)
        request.send_header("Content-Type", "text/event-stream")
        request.end_headers()
        for chunk in chunks:
            request.wfile.write(("data: %s\n\n" % json.dumps(chunk)).encode("utf-8"))
            request.wfile.flush()
        request.wfile.write(b"data: [DONE]\n\n")
        return None

    def _compute(self, worker, prompt):
        """The engine's prefill of `prompt` on `worker`: counters moved before the answer is sent."""
        tokens = len(prompt.split())
        with self.lock:
            hits = (tokens // self.block) * self.block if prompt in self.stored else 0
            worker.queries += tokens
            worker.hits += hits
            worker.by_source["external_kv_transfer"] += hits
            worker.by_source["local_compute"] += tokens - hits
            worker.generate_requests += 1
            if self.pool_works:
                self.stored.add(prompt)
            self.requests.append((worker.name, tokens, hits))
        return {"prompt_tokens": tokens, "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": hits}}

    @staticmethod
    def _answer(prompt, max_tokens):
        seed = hashlib.sha256(prompt.encode("utf-8")).digest()
        return [" " + WORDS[seed[pos % len(seed)] % len(WORDS)] for pos in range(max_tokens)]


def main(argv):
    stack = KvShareStack(argv[1] if len(argv) > 1 else "shared")
    print(json.dumps({"frontend": stack.url_of(stack.frontend),
                      "workers": dict((w.name, stack.url_of(w.server)) for w in stack.workers)}), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv)
