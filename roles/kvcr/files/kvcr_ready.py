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

Exit 0 when ready, 1 when the deadline passes (the last reason is printed on stderr),
2 on bad usage. SIGTERM from systemd (TimeoutStartSec, stop) ends it at once. watch exits 0
unless it cannot keep its count or restart the unit.
"""

import argparse
import os
import re
import socket
import subprocess
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


def _state_file(state_dir, unit):
    return os.path.join(state_dir, re.sub(r"[^A-Za-z0-9@._-]", "_", unit) + ".failures")


def watch(unit, state_dir, failures, probe, is_active, restart):
    """One supervision step. Returns (action, count): ok, inactive, failed (count so far) or restarted."""
    path = _state_file(state_dir, unit)
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
