# TEST DOUBLE for XCENA Maru's maru_test_client (C++ tool, xcena-dev/maru @ 4fd29ce): upstream is not reachable from CI and CI has no CXL hardware.
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Stand-in for ``maru_test_client [-H host] [-p port] <stats|alloc <size>>``, same wire protocol.

``stats`` prints ``Pools: N`` (and ``(no pools available)`` for 0) like upstream; per-pool rows
are not decoded by this double. ``alloc`` prints upstream's failure line. ``mmap`` is not offered.
"""
import socket
import struct
import sys

MAGIC, VERSION = 0x4D415255, 2
HDR = struct.Struct("<IHHI")


def usage(prog):
    sys.stderr.write("Usage: %s [-H host] [-p port] <command> [args...]\n\nCommands:\n"
                     "  stats                    Query pool statistics\n"
                     "  alloc  <size> [dax_path]  Allocate shared memory\n\n"
                     "Options:\n  -H <host>  Resource manager host (default: 127.0.0.1)\n"
                     "  -p <port>  Resource manager port (default: 9850)\n" % prog)


def recv_exact(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def request(host, port, msg_type, payload=b""):
    try:
        sock = socket.create_connection((host, port), timeout=5)
    except OSError as exc:
        sys.stderr.write("error: connect(%s:%d) failed: %s\n" % (host, port, exc.strerror or exc))
        return None, None
    with sock:
        sock.sendall(HDR.pack(MAGIC, VERSION, msg_type, len(payload)) + payload)
        magic, version, rtype, length = HDR.unpack(recv_exact(sock, HDR.size))
        if magic != MAGIC:
            sys.stderr.write("error: bad magic 0x%08X (expected 0x%08X)\n" % (magic, MAGIC))
            return None, None
        return rtype, recv_exact(sock, length) if length else b""


def main(argv):
    host, port, args = "127.0.0.1", 9850, []
    i = 1
    while i < len(argv):
        if argv[i] == "-H" and i + 1 < len(argv):
            host, i = argv[i + 1], i + 2
        elif argv[i] == "-p" and i + 1 < len(argv):
            port, i = int(argv[i + 1]), i + 2
        elif argv[i] in ("-h", "--help"):
            usage(argv[0])
            return 0
        else:
            args.append(argv[i])
            i += 1
    if not args:
        usage(argv[0])
        return 1
    if args[0] == "stats":
        rtype, payload = request(host, port, 5)
        if rtype != 6 or len(payload) < 4:
            sys.stderr.write("error: unexpected response type %s\n" % rtype)
            return 1
        pools = struct.unpack_from("<I", payload)[0]
        sys.stdout.write("Pools: %d\n\n" % pools)
        sys.stdout.write("(no pools available)\n" if pools == 0 else "(pool rows not decoded by the test double)\n")
        return 0
    if args[0] == "alloc" and len(args) >= 2:
        size = int(args[1], 0)
        path = (args[2] if len(args) > 2 else "").encode()
        sys.stdout.write("Allocating %d bytes (pool=%s) ...\n" % (size, path.decode() or "(any)"))
        rtype, payload = request(host, port, 1, struct.pack("<QII", size, len(path), 0) + path)
        if rtype == 2 and struct.unpack_from("<i", payload)[0] == 0:
            sys.stdout.write("\nAllocation successful\n")
            return 0
        status = struct.unpack_from("<i", payload)[0] if payload else -1
        sys.stderr.write("error: alloc failed with status %d (%s)\n" % (status, "No such device" if status == -19 else "error"))
        return 1
    usage(argv[0])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
