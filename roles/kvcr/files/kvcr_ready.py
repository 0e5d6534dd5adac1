# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Readiness gate and health probe of the KVCR units (stdlib only; run by systemd).

  kvcr-ready unix /run/kvcr/memory.sock [--timeout 60] [--interval 0.5]
      ready when a UNIX stream connection to the socket is accepted.
  kvcr-ready http http://10.0.0.1:9091/live [--timeout 60] [--interval 0.5]
      ready when GET answers 200 (Dynamo's system /live is its /health: 200 only once every
      registered endpoint is ready).
  kvcr-ready env [--label WHAT] UCX_NET_DEVICES UCX_TLS=rc_x,cuda
      ExecStartPre of the RDMA-only units: every NAME set and non-empty, every NAME=VALUE equal
      (comma lists compared item by item) in this process's environment, i.e. the unit's.
  kvcr-ready watch --unit U --state-dir D [--failures 3] [--timeout 4] unix|http TARGET
      one health probe of an active unit (the seed's 5 s liveness probe, run by a timer): after
      --failures consecutive failed probes it restarts the unit. An inactive unit is not probed.
  kvcr-ready attach --unit dynamo-worker@W.service --state-dir D --metrics-url URL --namespace NS
                    [--failures 3] [--timeout 4]
      one re-attach probe of a KVCR engine (ETCD_ENDPOINTS and ETCD_AUTH_* from the environment,
      the Dynamo units' etcd client file). An engine registers its KV state-agent attachment intent
      once, at start, for the one state-agent host incarnation live then (Dynamo 1.6.1 never
      re-selects it); a restarted agent is a new incarnation and ignores that intent. When the
      worker's intent (its worker_id from URL) targets another incarnation than the one live host,
      for --failures probes in a row, the worker is restarted so that it attaches again. With
      KVCR_ATTACH_EXPECT_INTENT=1 in the environment (a dynamo.vllm KVCR engine), a worker that is
      registered in discovery without any intent is restarted too: dynamo.vllm serves on without
      KV routing when its attachment fails at start (no agent within 30 s, or two advertised).
      No live host or several, or (without that variable) no intent: nothing to do.

Exit 0 when ready, 1 when the deadline passes (the last reason is printed on stderr),
2 on bad usage. SIGTERM from systemd (TimeoutStartSec, stop) ends it at once. watch exits 0
unless it cannot keep its count or restart the unit.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

# urllib, ssl and the rest are imported by the probes that need them: the health unit starts this
# script up to three times a round on every KVCR host, and the socket watch needs none of them.


def unix_accepts(path, timeout=1.0):
    """(True, '') when a connection to the UNIX socket is accepted, else (False, reason)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as exc:
        return False, "connect %s: %s" % (path, exc.strerror or exc)
    finally:
        sock.close()
    return True, ""


def http_ok(url, timeout=1.0):
    """(True, '') when GET url answers 200, else (False, reason). Proxies are ignored."""
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            if resp.status == 200:
                return True, ""
            return False, "GET %s: HTTP %s" % (url, resp.status)
    except urllib.error.HTTPError as exc:
        return False, "GET %s: HTTP %s" % (url, exc.code)
    except (urllib.error.URLError, OSError) as exc:
        return False, "GET %s: %s" % (url, getattr(exc, "reason", exc))


def wait_ready(probe, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Call probe() until it returns (True, _) or timeout seconds pass. Returns (ok, reason, tries)."""
    deadline = clock() + timeout
    tries = 0
    while True:
        tries += 1
        ok, reason = probe()
        if ok:
            return True, "", tries
        if clock() >= deadline:
            return False, reason, tries
        sleep(max(0.0, min(interval, deadline - clock())))


def env_errors(specs, environ):
    """Messages for NAME (must be non-empty) and NAME=VALUE (must be equal) specs against environ."""
    errors = []
    for spec in specs:
        name, sep, want = spec.partition("=")
        have = environ.get(name, "")
        if not sep:
            if not have.strip():
                errors.append("%s is unset" % name)
        elif [t.strip() for t in have.split(",") if t.strip()] != [t.strip() for t in want.split(",") if t.strip()]:
            errors.append("%s=%s, must be %s" % (name, have or "(unset)", want))
    return errors


def _state_file(state_dir, unit, label=""):
    return os.path.join(state_dir, re.sub(r"[^A-Za-z0-9@._-]", "_", unit) + (("." + label) if label else "") + ".failures")


def watch(unit, state_dir, failures, probe, is_active, restart, label=""):
    """One supervision step. Returns (action, count): ok, inactive, failed (count so far) or restarted.
    label keeps the count of another probe of the same unit apart."""
    path = _state_file(state_dir, unit, label)
    if not is_active(unit):
        if os.path.exists(path):
            os.unlink(path)
        return "inactive", 0
    ok, reason = probe()
    if ok:
        if os.path.exists(path):
            os.unlink(path)
        return "ok", 0
    try:
        with open(path) as handle:
            count = int(handle.read().strip() or 0) + 1
    except (OSError, ValueError):
        count = 1
    if count < failures:
        os.makedirs(state_dir, exist_ok=True)
        with open(path, "w") as handle:
            handle.write("%d\n" % count)
        return "failed: " + reason, count
    if os.path.exists(path):
        os.unlink(path)
    restart(unit)
    return "restarted after %d failed probes, last: %s" % (count, reason), count


HOST_TOPIC = "kv-state-hosts-v2"
INTENT_TOPIC = "kv-state-attachment-intents-v2"
WORKER_ID_RE = re.compile(r'worker_id="([0-9a-fA-F]+)"')


def agent_prefix(namespace):
    """The etcd prefix of the state agent's discovery records (Dynamo 1.6.1 event sources)."""
    return "v1/event_sources/namespace/%s/component/kv_state_agent/topic/" % namespace


def worker_ids(metrics_text):
    """The instance ids a Dynamo worker's /metrics names (worker_id labels, hex) as ints."""
    return set(int(m, 16) for m in WORKER_ID_RE.findall(metrics_text or ""))


def split_records(values):
    """(hosts, intents) from the JSON values under agent_prefix(): the live V2 host advertisements'
    host instance ids and the attachment intents (metadata dicts)."""
    hosts, intents = [], []
    for value in values:
        try:
            record = json.loads(value)
        except ValueError:
            continue
        meta = record.get("metadata") or {}
        if record.get("topic") == HOST_TOPIC:
            host = meta.get("host_instance") or {}
            if meta.get("protocol_version") == "v2" and host == meta.get("control_target") and "instance_id" in host:
                hosts.append(int(host["instance_id"]))
        elif record.get("topic") == INTENT_TOPIC:
            intents.append(meta)
    return hosts, intents


def attach_verdict(ids, hosts, intents, registered=None):
    """(stale, reason) for the worker whose instance ids are ids.

    stale is True when exactly one state-agent host is live and the worker's intents all target
    another incarnation (an old intent of a killed process may linger until its lease expires: one
    that targets the live host is enough), or, with registered (the instance ids registered in
    discovery; given for engines that must attach), when the worker is registered without any
    intent (dynamo.vllm serves on without KV routing when its attachment failed)."""
    mine = [i for i in intents if int((i.get("worker") or {}).get("worker_id", -1)) in ids]
    names = ", ".join("%x" % i for i in sorted(ids))
    if not ids:
        return False, "no worker id in /metrics"
    if len(hosts) != 1 and (mine or registered is not None):
        return False, "%d live state-agent hosts" % len(hosts)
    if not mine:
        if registered is not None and set(ids) & set(registered):
            return True, "worker %s serves without a state-agent attachment (registered, no intent), the live host is %x" % (
                names, hosts[0])
        return False, "no attachment intent of worker %s" % names
    targets = sorted(set(int((i.get("target_host") or {}).get("instance_id", -1)) for i in mine))
    if hosts[0] in targets:
        return False, "attached to state-agent host %x" % hosts[0]
    return True, "worker %s attached to state-agent host %s, the live host is %x" % (
        names, ", ".join("%x" % t for t in targets), hosts[0])


def etcd_range(prefix, environ, timeout, keys_only=False):
    """The values (or keys) under prefix through etcd's v3 JSON gateway (the endpoints of
    ETCD_ENDPOINTS in turn; TLS with ETCD_AUTH_CA / ETCD_AUTH_CLIENT_CERT / ETCD_AUTH_CLIENT_KEY,
    which hold PEM text)."""
    import base64  # pylint: disable=import-outside-toplevel
    import shutil  # pylint: disable=import-outside-toplevel
    import ssl  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    key = prefix.encode()
    end = key[:-1] + bytes([key[-1] + 1])
    query = {"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()}
    if keys_only:
        query["keys_only"] = True
    body = json.dumps(query).encode()
    context = None
    tmp = None
    try:
        if environ.get("ETCD_AUTH_CA") or environ.get("ETCD_AUTH_CLIENT_CERT"):
            tmp = tempfile.mkdtemp(prefix="kvcr-ready-")
            paths = {}
            for name in ("ETCD_AUTH_CA", "ETCD_AUTH_CLIENT_CERT", "ETCD_AUTH_CLIENT_KEY"):
                if environ.get(name):
                    paths[name] = os.path.join(tmp, name)
                    with os.fdopen(os.open(paths[name], os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
                        handle.write(environ[name])
            context = ssl.create_default_context(cafile=paths.get("ETCD_AUTH_CA"))
            if "ETCD_AUTH_CLIENT_CERT" in paths:
                context.load_cert_chain(paths["ETCD_AUTH_CLIENT_CERT"], paths.get("ETCD_AUTH_CLIENT_KEY"))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
        errors = []
        for endpoint in [e.strip() for e in environ.get("ETCD_ENDPOINTS", "").split(",") if e.strip()]:
            request = urllib.request.Request(endpoint.rstrip("/") + "/v3/kv/range", data=body, method="POST")
            try:
                with opener.open(request, timeout=timeout) as resp:
                    kvs = json.loads(resp.read().decode("utf-8")).get("kvs") or []
                field = "key" if keys_only else "value"
                return [base64.b64decode(kv.get(field, "")).decode("utf-8", "replace") for kv in kvs]
            except (urllib.error.URLError, OSError, ValueError) as exc:
                errors.append("%s: %s" % (endpoint, getattr(exc, "reason", exc)))
        raise OSError("etcd range %s: %s" % (prefix, "; ".join(errors) or "ETCD_ENDPOINTS is unset"))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def registered_ids(keys):
    """Instance ids (ints) from discovery keys ``v1/instances/<ns>/<component>/<endpoint>/<hex id>``."""
    found = set()
    for key in keys:
        try:
            found.add(int(key.rstrip("/").rsplit("/", 1)[-1], 16))
        except ValueError:
            continue
    return found


def attach_probe(metrics_url, namespace, environ, timeout):
    """(ok, reason) of one re-attach probe: ok is False only for a stale or missing attachment. A
    worker or etcd that does not answer is not this probe's business (the worker's liveness,
    etcd's health). KVCR_ATTACH_EXPECT_INTENT=1: the worker is an engine that must attach."""
    try:
        ids = worker_ids(http_text(metrics_url, timeout))
    except OSError as exc:
        return True, "worker /metrics: %s" % exc
    try:
        hosts, intents = split_records(etcd_range(agent_prefix(namespace), environ, timeout))
        registered = None
        if environ.get("KVCR_ATTACH_EXPECT_INTENT", "").strip().lower() in ("1", "true", "yes"):
            registered = registered_ids(etcd_range("v1/instances/%s/" % namespace, environ, timeout, keys_only=True))
    except OSError as exc:
        return True, str(exc)
    stale, reason = attach_verdict(ids, hosts, intents, registered)
    return not stale, reason


def http_text(url, timeout):
    """The body of GET url (200 only), else OSError."""
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise OSError("GET %s: %s" % (url, getattr(exc, "reason", exc))) from exc


def _systemctl_is_active(unit):
    return subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False).returncode == 0


def _systemctl_restart(unit):
    subprocess.run(["systemctl", "restart", "--no-block", unit], check=True)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["env"]:
        parser = argparse.ArgumentParser(prog="kvcr-ready env")
        parser.add_argument("--label", default="this unit")
        parser.add_argument("specs", nargs="+")
        args = parser.parse_args(argv[1:])
        errors = env_errors(args.specs, os.environ)
        if errors:
            print("kvcr-ready: %s refuses to start without RDMA: %s (kvcr_allow_non_rdma_transport=true allows "
                  "another transport)" % (args.label, "; ".join(errors)), file=sys.stderr)
            return 1
        print("kvcr-ready: %s: %s" % (args.label, ", ".join(args.specs)))
        return 0
    if argv[:1] == ["watch"]:
        parser = argparse.ArgumentParser(prog="kvcr-ready watch")
        parser.add_argument("--unit", required=True)
        parser.add_argument("--state-dir", required=True)
        parser.add_argument("--failures", type=int, default=3)
        parser.add_argument("--timeout", type=float, default=4.0)
        parser.add_argument("kind", choices=["unix", "http"])
        parser.add_argument("target")
        args = parser.parse_args(argv[1:])
        if args.failures < 1 or args.timeout <= 0:
            parser.error("--failures must be >= 1 and --timeout > 0")
        check = unix_accepts if args.kind == "unix" else http_ok
        action, count = watch(args.unit, args.state_dir, args.failures, lambda: check(args.target, args.timeout),
                              _systemctl_is_active, _systemctl_restart)
        if action not in ("ok", "inactive"):
            print("kvcr-ready: %s %s %s: %s" % (args.unit, args.kind, args.target, action), file=sys.stderr)
        return 0
    if argv[:1] == ["attach"]:
        parser = argparse.ArgumentParser(prog="kvcr-ready attach")
        parser.add_argument("--unit", required=True)
        parser.add_argument("--state-dir", required=True)
        parser.add_argument("--metrics-url", required=True)
        parser.add_argument("--namespace", required=True)
        parser.add_argument("--failures", type=int, default=3)
        parser.add_argument("--timeout", type=float, default=4.0)
        args = parser.parse_args(argv[1:])
        if args.failures < 1 or args.timeout <= 0:
            parser.error("--failures must be >= 1 and --timeout > 0")
        action, count = watch(args.unit, args.state_dir, args.failures,
                              lambda: attach_probe(args.metrics_url, args.namespace, os.environ, args.timeout),
                              _systemctl_is_active, _systemctl_restart, label="attach")
        if action not in ("ok", "inactive"):
            print("kvcr-ready: %s re-attach: %s" % (args.unit, action), file=sys.stderr)
        return 0
    parser = argparse.ArgumentParser(prog="kvcr-ready", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("kind", choices=["unix", "http"])
    parser.add_argument("target", help="socket path (unix) or URL (http)")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.timeout < 0 or args.interval <= 0:
        parser.error("--timeout must be >= 0 and --interval > 0")
    if args.kind == "unix":
        def probe():
            return unix_accepts(args.target)
    else:
        def probe():
            return http_ok(args.target)
    ok, reason, tries = wait_ready(probe, args.timeout, args.interval)
    if ok:
        print("kvcr-ready: %s %s ready after %d probe(s)" % (args.kind, args.target, tries))
        return 0
    print("kvcr-ready: %s %s not ready after %.1f s: %s" % (args.kind, args.target, args.timeout, reason),
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
