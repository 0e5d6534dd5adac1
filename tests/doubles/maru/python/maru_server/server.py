# TEST DOUBLE for XCENA Maru's maru-server (maru_server/server.py @ 4fd29ce): upstream is not reachable from CI and CI has no CXL hardware.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""maru-server stand-in: same flags, ZeroMQ REP socket on tcp://HOST:PORT and upstream's frame.

Answers HEARTBEAT ({}), HANDSHAKE ({"success": true, "rm_address": ...}) and GET_STATS (empty
counters); every other request gets {"error": "not implemented in the Maru test double"}.
It keeps no KV metadata and never contacts the resource manager.
Without pyzmq it says so and exits 1 (there is no heartbeat to answer then).
"""
import argparse
import logging
import signal
import sys

from maru_common import GET_STATS, HANDSHAKE, HEARTBEAT, RESPONSE, decode, encode

logger = logging.getLogger("maru_server.server")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="MaruServer - Central metadata server for Maru shared memory KV cache (TEST DOUBLE)")
    parser.add_argument("--host", type=str, default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5555)
    parser.add_argument("--log-level", type=str, default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--rm-address", type=str, default="127.0.0.1:9850")
    parser.add_argument("--dax-path", action="append", default=None, dest="dax_paths")
    return parser.parse_args(argv)


def handle(msg_type, rm_address):
    if msg_type == HEARTBEAT:
        return {}
    if msg_type == HANDSHAKE:
        return {"success": True, "rm_address": rm_address}
    if msg_type == GET_STATS:
        return {"kv_manager": {"total_entries": 0, "total_size": 0},
                "allocation_manager": {"num_allocations": 0, "total_allocated": 0, "active_clients": 0},
                "stats_manager": {}}
    return {"error": "not implemented in the Maru test double"}


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import zmq
    except ImportError:
        logger.error("pyzmq is not installed: this Maru test double cannot serve ZeroMQ, so there is no heartbeat")
        sys.exit(1)
    logger.info("MaruServer initialized (rm_address=%s, dax_paths=%s) [TEST DOUBLE]", args.rm_address, args.dax_paths)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REP)
    sock.setsockopt(zmq.RCVTIMEO, 100)
    sock.setsockopt(zmq.LINGER, 0)
    address = "tcp://%s:%d" % (args.host, args.port)
    sock.bind(address)
    running = [True]

    def stop(signum, frame):
        running[0] = False

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    logger.info("Starting MaruServer on %s:%d", args.host, args.port)
    logger.info("RPC Server started on %s", address)
    while running[0]:
        try:
            raw = sock.recv()
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EAGAIN:
                continue
            raise
        try:
            msg_type, flags, seq, _payload = decode(raw)
            response = handle(msg_type, args.rm_address)
        except Exception as exc:  # answer REQ sockets even on garbage, like upstream
            logger.error("Error handling message: %s", exc)
            msg_type, flags, seq, response = 0, 0, 0, {"error": "internal server error"}
        sock.send(encode(msg_type | RESPONSE, response, sequence=seq, flags=flags))
    sock.close()
    ctx.term()
    logger.info("MaruServer closed")


if __name__ == "__main__":
    main()
