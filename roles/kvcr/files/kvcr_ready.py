#!/usr/bin/python3
# Copyright: contributors to kvshare.dynamo
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness gate for the KVCR units (stdlib only; run by systemd as ExecStartPre/ExecStartPost).

  kvcr-ready unix /run/kvcr/memory.sock [--timeout 60] [--interval 0.5]
      ready when a UNIX stream connection to the socket is accepted.
  kvcr-ready http http://10.0.0.1:9091/live [--timeout 60] [--interval 0.5]
      ready when GET answers 200 (Dynamo's system /live is its /health: 200 only once every
      registered endpoint is ready).

Exit 0 when ready, 1 when the deadline passes (the last reason is printed on stderr),
2 on bad usage. SIGTERM from systemd (TimeoutStartSec, stop) ends it at once.
"""

import argparse
import socket
import sys
import time
import urllib.error
import urllib.request


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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kvcr-ready", description=__doc__.split("\n\n")[0])
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
