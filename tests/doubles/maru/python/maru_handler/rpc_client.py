# TEST DOUBLE for XCENA Maru's maru_handler.rpc_client (upstream not reachable from CI, no CXL hardware).
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""RpcClient with upstream's constructor and the connect/close/heartbeat/handshake/get_stats calls."""
import itertools

import zmq

from maru_common import GET_STATS, HANDSHAKE, HEARTBEAT, decode, encode


class RpcClient:
    def __init__(self, server_url="tcp://localhost:5555", timeout_ms=5000):
        self._server_url = server_url
        self._timeout_ms = timeout_ms
        self._context = None
        self._socket = None
        self._seq = itertools.count(1)

    def connect(self):
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.REQ)
        self._socket.setsockopt(zmq.RCVTIMEO, self._timeout_ms)
        self._socket.setsockopt(zmq.SNDTIMEO, self._timeout_ms)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(self._server_url)

    def close(self):
        if self._socket:
            self._socket.close()
        if self._context:
            self._context.term()
        self._socket = self._context = None

    def _send_request(self, msg_type, payload):
        self._socket.send(encode(msg_type, payload, sequence=next(self._seq)))
        return decode(self._socket.recv())[3]

    def heartbeat(self):
        return "error" not in self._send_request(HEARTBEAT, {})

    def handshake(self):
        return self._send_request(HANDSHAKE, {})

    def get_stats(self):
        return self._send_request(GET_STATS, {})

    def __enter__(self):
        self.connect()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()
