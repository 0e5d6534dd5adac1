# TEST DOUBLE for XCENA Maru's maru-resource-manager (C++, xcena-dev/maru @ 4fd29ce): upstream is not reachable from CI and CI has no CXL hardware.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Stand-in for ``maru-resource-manager``: same CLI, state files, log lines, TCP port and wire format.

What it mirrors (checked against the upstream build, see docs/maru.md):
* flags of ``src/server_config.cpp``: -H/--host -p/--port -d/--state-dir -l/--log-level
  -w/--num-workers -g/--grace-period -m/--max-clients -h/--help, same defaults and checks;
* creates the state dir, writes ``rm.conf`` (host=, port=, log_level=) and a 32-byte ``secret``
  (0600), keeps an existing secret;
* the startup log on stderr, ending in ``ready — listening on HOST:PORT``; the "port N is already
  in use" error with exit 1; SIGHUP rescan, SIGTERM/SIGINT "shutting down..." / "shutdown complete";
* the binary TCP protocol (12-byte little-endian header, magic 'MARU', version 2): STATS_REQ is
  answered with zero pools, ALLOC_REQ with status -19 (ENODEV), anything else with ERROR_RESP.
What it does NOT do: scan or claim DAX devices, write device headers, WAL/checkpoints, reaping.
"""
import argparse
import errno
import os
import signal
import socket
import struct
import sys
import threading

MAGIC = 0x4D415255
VERSION = 2
HDR = struct.Struct("<IHHI")
STATS_REQ, STATS_RESP, ALLOC_REQ, ALLOC_RESP, ERROR_RESP = 5, 6, 1, 2, 255
LEVELS = ("debug", "info", "warn", "error")


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def positive(name, minimum):
    def conv(text):
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            log("invalid %s: %s (must be >= %d)" % (name, text, minimum))
            sys.exit(1)
        return value
    return conv


def port_arg(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0 or value > 65535:
        log("invalid port: %s (must be 1-65535)" % text)
        sys.exit(1)
    return value


def level_arg(text):
    if text not in LEVELS:
        log("unknown log level: %s (using info)" % text)
        return "info"
    return text


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="maru-resource-manager",
        description="Maru Resource Manager — CXL/DAX shared memory pool server. (TEST DOUBLE)")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=port_arg, default=9850)
    parser.add_argument("-d", "--state-dir", default="/var/lib/maru-resourced")
    parser.add_argument("-l", "--log-level", type=level_arg, default="info")
    parser.add_argument("-w", "--num-workers", type=positive("num-workers", 1), default=32)
    parser.add_argument("-g", "--grace-period", type=positive("grace-period", 0), default=30)
    parser.add_argument("-m", "--max-clients", type=positive("max-clients", 1), default=256)
    return parser.parse_args(argv)


def write_state(cfg):
    os.makedirs(cfg.state_dir, exist_ok=True)
    conf = os.path.join(cfg.state_dir, "rm.conf")
    tmp = conf + ".tmp"
    with open(tmp, "w") as handle:
        handle.write("host=%s\nport=%d\nlog_level=%s\n" % (cfg.host, cfg.port, cfg.log_level))
    os.rename(tmp, conf)
    secret = os.path.join(cfg.state_dir, "secret")
    if not os.path.exists(secret):
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(32))


def recv_exact(conn, size):
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def reply(conn, msg_type, payload):
    conn.sendall(HDR.pack(MAGIC, VERSION, msg_type, len(payload)) + payload)


def serve_client(conn, cfg):
    with conn:
        while True:
            raw = recv_exact(conn, HDR.size)
            if raw is None:
                return
            magic, version, msg_type, length = HDR.unpack(raw)
            if magic != MAGIC or version != VERSION:
                return
            payload = recv_exact(conn, length) if length else b""
            if length and payload is None:
                return
            if msg_type == STATS_REQ:
                reply(conn, STATS_RESP, struct.pack("<I", 0))
            elif msg_type == ALLOC_REQ:
                size = struct.unpack_from("<Q", payload)[0] if len(payload) >= 8 else 0
                log("[ALLOC] client=?, size=%d, pool= -> FAILED (status=-19)" % size)
                # AllocResp: int32 status, uint32 accessType, Handle (32 bytes), uint64 requestedSize
                reply(conn, ALLOC_RESP, struct.pack("<iI32sQ", -errno.ENODEV, 0, b"\0" * 32, size))
            else:
                text = b"not implemented in the Maru test double"
                reply(conn, ERROR_RESP, struct.pack("<iI", -errno.EOPNOTSUPP, len(text)) + text)


def main(argv=None):
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    log("maru-resource-manager starting")
    log("  listen     : %s:%d" % (cfg.host, cfg.port))
    log("  state dir  : %s" % cfg.state_dir)
    log("  log level  : %s" % cfg.log_level)
    log("  workers    : %d" % cfg.num_workers)
    log("  grace period: %ds" % cfg.grace_period)
    log("  max clients : %d" % cfg.max_clients)
    write_state(cfg)
    log("no CXL/DAX devices found — starting with empty pool")
    log("  (test double: DAX devices are never scanned)")
    if cfg.host in ("0.0.0.0", "::"):
        log("Binding to all interfaces — traffic including auth tokens will be sent in PLAINTEXT.")
    elif cfg.host not in ("127.0.0.1", "localhost"):
        log("Binding to non-loopback address '%s' — traffic including auth tokens will be sent in PLAINTEXT. "
            "Use an encrypted tunnel for production multi-node deployments." % cfg.host)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((cfg.host, cfg.port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            log("port %d is already in use — another maru-resource-manager may be running. "
                "Use --port to specify a different port." % cfg.port)
        else:
            log("failed to start server on %s:%d: %s" % (cfg.host, cfg.port, exc.strerror))
        return 1
    sock.listen(cfg.max_clients)
    stop = threading.Event()

    def on_term(signum, frame):
        stop.set()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, lambda s, f: log("SIGHUP received — rescanning devices (test double: none)"))
    log("ready — listening on %s:%d" % (cfg.host, cfg.port))
    while not stop.is_set():
        try:
            conn, dummy = sock.accept()
        except OSError:
            if stop.is_set():
                break
            continue
        threading.Thread(target=serve_client, args=(conn, cfg), daemon=True).start()
    log("shutting down...")
    sock.close()
    log("shutdown complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
