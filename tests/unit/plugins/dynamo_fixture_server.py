# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
# Test double: a stdlib http.server on 127.0.0.1 that stands in for a Dynamo 1.6.1 frontend and worker
# system servers, serving captured fixtures from tests/fixtures/dynamo/.
"""Local HTTP servers for the kvshare.dynamo module tests (no mocks of urllib).

Each FakeSite is a real ThreadingHTTPServer on 127.0.0.1:<free port>. A site answers with a
handler function handler(method, path, body_bytes) -> Reply. Replies may be SSE streams, sent
event by event with an optional delay so the client can measure time to first token.
"""
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "fixtures", "dynamo")


def fixture_bytes(name):
    with open(os.path.join(FIXTURES, name), "rb") as fh:
        return fh.read()


def fixture_text(name):
    return fixture_bytes(name).decode("utf-8")


class Reply:
    def __init__(self, status=200, body=b"", content_type="application/json", sse_events=None,
                 event_delay=0.0, close_early=False, delay=0.0):
        self.status = status
        self.body = body.encode("utf-8") if isinstance(body, str) else body
        self.content_type = content_type
        self.sse_events = sse_events
        self.event_delay = event_delay
        self.close_early = close_early
        self.delay = delay


def json_reply(obj_or_text, status=200):
    body = obj_or_text if isinstance(obj_or_text, (str, bytes)) else json.dumps(obj_or_text)
    return Reply(status, body)


def sse_reply(text, event_delay=0.0, drop_done=False):
    """Split captured SSE text into events (kept byte-exact) for streaming."""
    events = [e + "\n\n" for e in text.split("\n\n") if e.strip()]
    if drop_done:
        events = [e for e in events if "[DONE]" not in e]
    return Reply(200, b"", "text/event-stream", events, event_delay)


class FakeSite:
    def __init__(self, handler):
        self.handler = handler
        self.requests = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                site.requests.append((self.command, self.path, body))
                reply = site.handler(self.command, self.path, body)
                if reply.delay:
                    time.sleep(reply.delay)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                if reply.sse_events is None:
                    self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if reply.sse_events is None:
                    self.wfile.write(reply.body)
                    return
                for ev in reply.sse_events:
                    if reply.event_delay:
                        time.sleep(reply.event_delay)
                    self.wfile.write(ev.encode("utf-8"))
                    self.wfile.flush()

            do_GET = _serve
            do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def posts(self, path_prefix="/v1/completions"):
        return [json.loads(b) for m, p, b in self.requests if m == "POST"
                and p.startswith(path_prefix)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def free_port():
    """A port on 127.0.0.1 with nothing listening (for connection-refused cases)."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
