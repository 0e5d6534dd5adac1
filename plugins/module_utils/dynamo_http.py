# -*- coding: utf-8 -*-
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Small stdlib-only HTTP helpers for talking to a running NVIDIA Dynamo 1.6.1 stack.

- request()/get_json()/post_json(): never raise on HTTP or connection errors; the
  answer (status, body, error) is returned so callers can report it verbatim.
  Proxies from the environment are ignored on purpose (the frontend and worker
  system ports are local service addresses; an http_proxy must not intercept them).
- stream_completion(): POST with "stream": true and read the SSE answer, measuring
  time to first token.
- parse_instances(): the frontend's /health?instances=true list, instance ids as
  Python ints (they exceed 2**53; never go through float).
- map_worker(): which instance id belongs to a worker, given its system URL
  (http://host:DYN_SYSTEM_PORT).

Instance-id mapping (verified against a real 1.6.1 stack, see docs/verify_internals.md):
  1. PRIMARY, metrics: every worker's DYN_SYSTEM_PORT /metrics carries the label
     worker_id="<hex>" == format(instance_id, "x") (the etcd lease id). It is there
     as soon as the system server answers, ~20 s BEFORE the worker registers its
     generate endpoint, and needs no traffic, so there is no race after registration.
  2. OPTIONAL cross-check, request-plane port: /health's transport.tcp is
     "<host>:<port>/<hex lease>/<ns>/<component>/<endpoint>". The port is random
     unless the worker pins it with DYN_TCP_RPC_PORT (honoured by 1.6.1); when the
     caller knows that port, it must match the same instance.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import socket
import time

try:  # py3
    import urllib.request as urllib_request
    import urllib.error as urllib_error
    from http.client import HTTPException
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - py2 is not supported by the collection
    urllib_request = None
    urllib_error = None
    HTTPException = Exception
    urlsplit = None

from ansible_collections.kvshare.dynamo.plugins.module_utils import prometheus_text

DEFAULT_TIMEOUT = 10.0
EXCERPT_CHARS = 300
GENERATE_ENDPOINT = "generate"
_HEX_RE = re.compile(r"^[0-9a-fA-F]{1,16}$")


# ---------------------------------------------------------------------------
# plain requests
# ---------------------------------------------------------------------------

class HttpResult:
    """Outcome of one HTTP exchange. status is None when no HTTP answer arrived."""

    def __init__(self, url, method, status=None, reason=None, headers=None, body=b"",
                 error=None, elapsed_s=0.0):
        self.url = url
        self.method = method
        self.status = status
        self.reason = reason
        self.headers = headers or {}
        self.body = body or b""
        self.error = error
        self.elapsed_s = elapsed_s

    @property
    def ok(self):
        return self.status is not None and 200 <= self.status < 300

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        """Decoded JSON body. Raises ValueError if the body is not JSON."""
        return json.loads(self.text)

    def json_or_none(self):
        try:
            return self.json()
        except ValueError:
            return None

    def excerpt(self, limit=EXCERPT_CHARS):
        if self.status is None:
            return self.error or ""
        text = self.text.strip()
        if len(text) > limit:
            text = text[:limit] + "..."
        return text

    def summary(self, limit=EXCERPT_CHARS):
        """Small dict for module results: status + body excerpt (or error)."""
        return {
            "status": self.status,
            "body": self.excerpt(limit),
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 4),
        }

    def describe(self, limit=120):
        if self.status is None:
            return "no answer (%s)" % (self.error,)
        return "HTTP %s %s" % (self.status, self.excerpt(limit))


def _opener():
    # ProxyHandler({}) disables env proxies (http_proxy etc.) for these calls.
    return urllib_request.build_opener(urllib_request.ProxyHandler({}))


def _describe_exc(exc, timeout):
    if isinstance(exc, socket.timeout) or "timed out" in str(exc):
        return "timeout after %ss" % (timeout,)
    if urllib_error is not None and isinstance(exc, urllib_error.URLError):
        return "connection error: %s" % (exc.reason,)
    return "%s: %s" % (type(exc).__name__, exc)


def request(method, url, body=None, headers=None, timeout=DEFAULT_TIMEOUT):
    """One HTTP request. body: bytes, or any JSON-serialisable object (sent as JSON)."""
    hdrs = {"Accept": "application/json"}
    data = None
    if body is not None:
        if isinstance(body, bytes):
            data = body
        else:
            data = json.dumps(body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
    if headers:
        hdrs.update(headers)
    req = urllib_request.Request(url, data=data, headers=hdrs, method=method)
    start = time.monotonic()
    try:
        resp = _opener().open(req, timeout=timeout)
        try:
            payload = resp.read()
            return HttpResult(url, method, resp.status, resp.reason, dict(resp.headers.items()),
                              payload, None, time.monotonic() - start)
        finally:
            resp.close()
    except urllib_error.HTTPError as exc:
        try:
            payload = exc.read()
        except Exception:  # noqa: BLE001 - body of an error answer is best effort
            payload = b""
        return HttpResult(url, method, exc.code, exc.reason,
                          dict(exc.headers.items()) if exc.headers else {}, payload, None,
                          time.monotonic() - start)
    except (urllib_error.URLError, socket.timeout, socket.error, HTTPException,
            ValueError) as exc:
        return HttpResult(url, method, None, None, {}, b"", _describe_exc(exc, timeout),
                          time.monotonic() - start)


def get(url, timeout=DEFAULT_TIMEOUT, headers=None):
    return request("GET", url, None, headers, timeout)


def get_json(url, timeout=DEFAULT_TIMEOUT):
    """GET url. Return (HttpResult, decoded JSON or None)."""
    res = get(url, timeout)
    return res, (res.json_or_none() if res.ok else None)


def post_json(url, payload, timeout=DEFAULT_TIMEOUT, headers=None):
    return request("POST", url, payload, headers, timeout)


def join_url(base, path):
    return base.rstrip("/") + "/" + path.lstrip("/")


# ---------------------------------------------------------------------------
# SSE streaming completions
# ---------------------------------------------------------------------------

class StreamResult:
    """Outcome of a streaming completion.

    ttft_s: seconds from sending the request to the first SSE chunk that carries a
    choice with non-empty text; if no chunk ever had text (the mocker answers with
    empty text), the first chunk carrying any choice.  first_event_s: the first SSE
    data event of any kind.  total_s: until [DONE] / end of stream.
    """

    def __init__(self, url):
        self.url = url
        self.status = None
        self.error = None
        self.error_body = None
        self.events = []          # raw 'data:' payload strings (incl. '[DONE]')
        self.chunks = []          # decoded JSON chunks
        self.error_events = []    # 'event: error' payloads or chunks with an 'error' key
        self.text = ""
        self.usage = None
        self.finish_reason = None
        self.done = False
        self.first_event_s = None
        self.ttft_s = None
        self.total_s = None
        self._first_choice_s = None

    @property
    def ok(self):
        return (self.status is not None and 200 <= self.status < 300 and self.error is None
                and not self.error_events)

    @property
    def prompt_tokens(self):
        return (self.usage or {}).get("prompt_tokens")

    @property
    def completion_tokens(self):
        return (self.usage or {}).get("completion_tokens")

    @property
    def cached_tokens(self):
        """usage.prompt_tokens_details.cached_tokens, or None when not reported."""
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        return details.get("cached_tokens")

    def summary(self, limit=EXCERPT_CHARS):
        return {
            "status": self.status,
            "error": self.error,
            "error_body": (self.error_body or "")[:limit] or None,
            "error_events": self.error_events[:3],
            "ttft_s": self.ttft_s,
            "total_s": self.total_s,
            "text": self.text,
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "chunks": len(self.chunks),
            "done": self.done,
        }

    # -- internal -------------------------------------------------------------
    def _handle(self, event_type, data, now):
        self.events.append(data)
        if self.first_event_s is None:
            self.first_event_s = now
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            self.error_events.append({"event": event_type, "data": data[:EXCERPT_CHARS]})
            return
        if event_type == "error" or (isinstance(chunk, dict) and "error" in chunk
                                     and "choices" not in chunk):
            self.error_events.append(chunk)
            return
        if not isinstance(chunk, dict):
            return
        self.chunks.append(chunk)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            piece = choice.get("text")
            if piece is None:
                piece = (choice.get("delta") or {}).get("content")
            if self._first_choice_s is None:
                self._first_choice_s = now
            if piece:
                if self.ttft_s is None:
                    self.ttft_s = now
                self.text += piece
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


def iter_sse(lines):
    """Yield (event_type, data) from an iterable of SSE text lines (without EOL or with)."""
    event_type = None
    data = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if line == "":
            if data:
                yield event_type or "message", "\n".join(data)
            event_type, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, dummy, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event_type = value
    if data:
        yield event_type or "message", "\n".join(data)


def stream_completion(url, payload, timeout=DEFAULT_TIMEOUT, headers=None):
    """POST payload (stream forced on) to url and read the SSE answer.

    timeout applies to connecting and to each read (socket timeout), not the whole
    stream. Never raises for HTTP/transport errors; see StreamResult.
    """
    body = dict(payload)
    body["stream"] = True
    hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if headers:
        hdrs.update(headers)
    result = StreamResult(url)
    req = urllib_request.Request(url, data=json.dumps(body).encode("utf-8"), headers=hdrs,
                                 method="POST")
    start = time.monotonic()
    try:
        resp = _opener().open(req, timeout=timeout)
    except urllib_error.HTTPError as exc:
        result.status = exc.code
        try:
            result.error_body = exc.read().decode("utf-8", "replace")
        except Exception:  # noqa: BLE001
            result.error_body = ""
        result.error = "HTTP %s" % exc.code
        result.total_s = time.monotonic() - start
        return result
    except (urllib_error.URLError, socket.timeout, socket.error, HTTPException,
            ValueError) as exc:
        result.error = _describe_exc(exc, timeout)
        result.total_s = time.monotonic() - start
        return result
    result.status = resp.status
    ctype = resp.headers.get("Content-Type", "")

    def _lines():
        while True:
            raw = resp.readline()
            if not raw:
                return
            yield raw.decode("utf-8", "replace")

    try:
        if "text/event-stream" not in ctype:
            # Not a stream (e.g. the server ignored stream:true): keep the body.
            result.error_body = resp.read().decode("utf-8", "replace")
            result.error = "expected text/event-stream, got %r" % ctype
        else:
            for event_type, data in iter_sse(_lines()):
                result._handle(event_type, data, time.monotonic() - start)
                if result.done:
                    break
    except (socket.timeout, socket.error, HTTPException, ValueError) as exc:
        result.error = "stream interrupted: %s" % _describe_exc(exc, timeout)
    finally:
        resp.close()
    result.total_s = time.monotonic() - start
    if result.ttft_s is None:
        result.ttft_s = result._first_choice_s
    if result.error is None and not result.done and not result.error_events:
        result.error = "stream ended without [DONE]"
    return result


def completion_payload(model, prompt, max_tokens, instance_id=None, temperature=0,
                       stream=False, include_usage=False, extra=None):
    """Body for POST /v1/completions, direct-routed when instance_id is given."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": temperature}
    if stream:
        body["stream"] = True
        if include_usage:
            body["stream_options"] = {"include_usage": True}
    if instance_id is not None:
        body["nvext"] = {"backend_instance_id": as_instance_id(instance_id)}
    if extra:
        body.update(extra)
    return body


# ---------------------------------------------------------------------------
# instance ids
# ---------------------------------------------------------------------------

def as_instance_id(value):
    """Coerce an instance id to int without ever passing through float.

    Accepts int or a decimal string. Rejects bool, float (precision already lost above
    2**53) and anything else with ValueError.
    """
    if isinstance(value, bool):
        raise ValueError("instance id must be an integer, got bool")
    if isinstance(value, int):
        if value < 0 or value >= 2 ** 64:
            raise ValueError("instance id %d outside u64" % value)
        return value
    if isinstance(value, float):
        raise ValueError("instance id %r arrived as a float; precision above 2**53 is lost"
                         % (value,))
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return as_instance_id(int(text))
        raise ValueError("instance id %r is not a decimal integer" % (value,))
    raise ValueError("instance id %r has unsupported type %s" % (value, type(value).__name__))


def hex_to_instance_id(text):
    """Worker metrics label worker_id="<hex>" -> int instance id."""
    if not _HEX_RE.match(text or ""):
        raise ValueError("worker_id %r is not a hex u64" % (text,))
    return int(text, 16)


def parse_transport_tcp(addr):
    """'127.0.0.1:41263/6a6ca22990221562/dynamo/backend/generate' -> dict.

    Returns {'host', 'port' (int), 'lease_hex', 'path'}; fields that do not parse are None.
    """
    out = {"host": None, "port": None, "lease_hex": None, "path": None}
    if not addr or not isinstance(addr, str):
        return out
    hostport, dummy, path = addr.partition("/")
    out["path"] = path or None
    if hostport.startswith("["):
        host, dummy, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, dummy, port = hostport.rpartition(":")
    out["host"] = host or None
    out["port"] = int(port) if port.isdigit() else None
    first = path.split("/", 1)[0] if path else ""
    out["lease_hex"] = first if _HEX_RE.match(first) else None
    return out


def parse_instances(doc, endpoint=GENERATE_ENDPOINT, namespace=None, component=None):
    """Instances from a frontend /health document, filtered; ids as ints.

    Returns a list of dicts: instance_id (int), instance_id_str, namespace, component,
    endpoint, transport_tcp, tcp_host, tcp_port, lease_hex. Raises ValueError when the
    document does not have the expected shape or an id is not an exact integer.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("instances", []), list):
        raise ValueError("frontend /health answer has no 'instances' list")
    found = []
    for inst in doc.get("instances") or []:
        if not isinstance(inst, dict):
            continue
        if endpoint is not None and inst.get("endpoint") != endpoint:
            continue
        if namespace is not None and inst.get("namespace") != namespace:
            continue
        if component is not None and inst.get("component") != component:
            continue
        iid = as_instance_id(inst.get("instance_id"))
        tcp = (inst.get("transport") or {}).get("tcp")
        parsed = parse_transport_tcp(tcp)
        found.append({
            "instance_id": iid,
            "instance_id_str": str(iid),
            "namespace": inst.get("namespace"),
            "component": inst.get("component"),
            "endpoint": inst.get("endpoint"),
            "transport_tcp": tcp,
            "tcp_host": parsed["host"],
            "tcp_port": parsed["port"],
            "lease_hex": parsed["lease_hex"],
        })
    return found


def fetch_instances(frontend_url, timeout=DEFAULT_TIMEOUT, endpoint=GENERATE_ENDPOINT,
                    namespace=None, component=None):
    """GET <frontend>/health?instances=true. Return (HttpResult, list or None, error)."""
    res = get(join_url(frontend_url, "/health?instances=true"), timeout)
    if not res.ok:
        return res, None, "frontend /health: %s" % res.describe()
    try:
        return res, parse_instances(json.loads(res.text), endpoint, namespace, component), None
    except ValueError as exc:
        return res, None, "frontend /health: %s" % exc


def worker_ids_from_metrics(exposition):
    """Distinct instance ids (ints) named by worker_id="<hex>" labels in worker /metrics.

    Samples labelled dynamo_endpoint="generate" are preferred; if none carry the label,
    every sample's worker_id counts.
    """
    if isinstance(exposition, (str, bytes)):
        exposition = prometheus_text.parse(exposition)
    gen = set()
    anyid = set()
    for s in exposition.samples:
        wid = s.labels.get("worker_id")
        if not wid or not _HEX_RE.match(wid):
            continue
        anyid.add(int(wid, 16))
        if s.labels.get("dynamo_endpoint") == GENERATE_ENDPOINT:
            gen.add(int(wid, 16))
    return sorted(gen or anyid)


class WorkerMapping:
    """Result of map_worker()."""

    def __init__(self, instance_id=None, method=None, metrics_ids=None, error=None,
                 metrics_status=None, registered=False, instance=None):
        self.instance_id = instance_id
        self.method = method
        self.metrics_ids = metrics_ids or []
        self.error = error
        self.metrics_status = metrics_status
        self.registered = registered
        self.instance = instance

    def as_dict(self):
        return {
            "instance_id": self.instance_id,
            "instance_id_str": None if self.instance_id is None else str(self.instance_id),
            "method": self.method,
            "metrics_ids": [str(i) for i in self.metrics_ids],
            "registered": self.registered,
            "error": self.error,
        }


def map_worker(system_url, instances=None, timeout=DEFAULT_TIMEOUT, rpc_port=None,
               metrics_text=None):
    """Find the instance id of the worker whose system server is system_url.

    instances: parse_instances() output (generate endpoints) or None (not checked).
    rpc_port: the worker's pinned request-plane port (DYN_TCP_RPC_PORT), optional;
    used as a cross-check, or alone when /metrics gives no id.
    metrics_text: use this /metrics text instead of fetching it.

    The id is returned even when the worker has not registered yet
    (registered=False) so callers can wait for it.
    """
    status = None
    metrics_err = None
    if metrics_text is None:
        res = get(join_url(system_url, "/metrics"), timeout)
        status = res.status
        if res.ok:
            metrics_text = res.text
        else:
            metrics_err = "worker /metrics at %s: %s" % (system_url, res.describe())
    ids = []
    if metrics_text is not None:
        ids = worker_ids_from_metrics(metrics_text)
        if not ids:
            metrics_err = "worker /metrics at %s has no worker_id label" % system_url
    by_id = dict((i["instance_id"], i) for i in (instances or []))
    by_port = {}
    if rpc_port is not None:
        # The port on this worker's host: another host's worker may use the same rpc_port (a
        # stopped worker would otherwise be "found" as that one). An instance that names no host
        # still counts.
        host = urlsplit(str(system_url or "")).hostname
        for inst in instances or []:
            if inst.get("tcp_port") == int(rpc_port) and (not host or not inst.get("tcp_host")
                                                          or str(inst["tcp_host"]) == host):
                by_port[inst["instance_id"]] = inst

    chosen = None
    method = None
    if len(ids) == 1:
        chosen, method = ids[0], "metrics_worker_id"
    elif len(ids) > 1:
        registered = [i for i in ids if i in by_id]
        if len(registered) == 1:
            chosen, method = registered[0], "metrics_worker_id"
        elif by_port and len(set(by_port) & set(ids)) == 1:
            chosen, method = list(set(by_port) & set(ids))[0], "metrics_worker_id+rpc_port"
        else:
            return WorkerMapping(None, None, ids, "worker /metrics at %s names %d instance ids "
                                 "(%s); cannot tell which is this worker's generate endpoint"
                                 % (system_url, len(ids), ", ".join(str(i) for i in ids)),
                                 status)
    elif by_port:
        if len(by_port) == 1:
            chosen, method = list(by_port)[0], "rpc_port"
        else:
            return WorkerMapping(None, None, ids, "rpc_port %s matches %d instances"
                                 % (rpc_port, len(by_port)), status)
    else:
        return WorkerMapping(None, None, ids, metrics_err, status)

    if rpc_port is not None and instances is not None and chosen in by_id:
        if by_id[chosen].get("tcp_port") != int(rpc_port):
            return WorkerMapping(None, None, ids,
                                 "mapping conflict: /metrics says instance %d but it listens "
                                 "on request-plane port %s, not the configured rpc_port %s"
                                 % (chosen, by_id[chosen].get("tcp_port"), rpc_port), status)
        method = "metrics_worker_id+rpc_port" if method == "metrics_worker_id" else method
    return WorkerMapping(chosen, method, ids, None, status, chosen in by_id, by_id.get(chosen))


def fetch_metrics(system_url, timeout=DEFAULT_TIMEOUT):
    """GET <system_url>/metrics. Return (HttpResult, Exposition or None)."""
    res = get(join_url(system_url, "/metrics"), timeout)
    if not res.ok:
        return res, None
    return res, prometheus_text.parse(res.body)
