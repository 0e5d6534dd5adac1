# TEST DOUBLE for XCENA Maru's maru_common wire protocol (upstream not reachable from CI, no CXL hardware).
# Copyright (c) 2026 kvshare.dynamo developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
# (Apache-2.0 is compatible with the GNU General Public License version 3 of ansible-core.)
"""Upstream's maru-server frame: 16-byte header ``!HBBBBBBII`` (magic 0xCF00, version 1, msg_type,
flags, 3 reserved, sequence, payload_length) followed by a MessagePack map. Responses carry
``msg_type | 0x80``. Uses ``msgpack`` when installed, else a minimal encoder for maps of
str/int/bool/None/float/list (enough for heartbeat, handshake and stats)."""
import struct

MAGIC = 0xCF00
VERSION = 1
HEADER = struct.Struct("!HBBBBBBII")
RESPONSE = 0x80
GET_STATS, HEARTBEAT, HANDSHAKE = 0xF0, 0xF1, 0xFE

try:  # pragma: no cover - depends on the environment
    import msgpack as _msgpack
except ImportError:  # pragma: no cover
    _msgpack = None


def _pack(obj):
    if obj is None:
        return b"\xc0"
    if obj is True:
        return b"\xc3"
    if obj is False:
        return b"\xc2"
    if isinstance(obj, int):
        if 0 <= obj < 128:
            return bytes([obj])
        return b"\xd3" + struct.pack("!q", obj)
    if isinstance(obj, float):
        return b"\xcb" + struct.pack("!d", obj)
    if isinstance(obj, str):
        raw = obj.encode()
        return (bytes([0xA0 | len(raw)]) if len(raw) < 32 else b"\xda" + struct.pack("!H", len(raw))) + raw
    if isinstance(obj, (list, tuple)):
        return b"\xdc" + struct.pack("!H", len(obj)) + b"".join(_pack(x) for x in obj)
    if isinstance(obj, dict):
        return b"\xde" + struct.pack("!H", len(obj)) + b"".join(_pack(k) + _pack(v) for k, v in obj.items())
    raise TypeError("cannot pack %r" % type(obj))


def _unpack(data, pos=0):
    tag = data[pos]
    if tag < 0x80:
        return tag, pos + 1
    if 0x80 <= tag <= 0x8F or tag == 0xDE:
        if tag == 0xDE:
            count, pos = struct.unpack_from("!H", data, pos + 1)[0], pos + 3
        else:
            count, pos = tag & 0x0F, pos + 1
        out = {}
        for dummy in range(count):
            key, pos = _unpack(data, pos)
            out[key], pos = _unpack(data, pos)
        return out, pos
    if 0x90 <= tag <= 0x9F or tag == 0xDC:
        if tag == 0xDC:
            count, pos = struct.unpack_from("!H", data, pos + 1)[0], pos + 3
        else:
            count, pos = tag & 0x0F, pos + 1
        items = []
        for dummy in range(count):
            item, pos = _unpack(data, pos)
            items.append(item)
        return items, pos
    if 0xA0 <= tag <= 0xBF:
        size = tag & 0x1F
        return data[pos + 1:pos + 1 + size].decode(), pos + 1 + size
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if tag in simple:
        return simple[tag], pos + 1
    fmt = {0xCC: "!B", 0xCD: "!H", 0xCE: "!I", 0xCF: "!Q", 0xD0: "!b", 0xD1: "!h", 0xD2: "!i", 0xD3: "!q",
           0xCB: "!d", 0xCA: "!f"}
    if tag in fmt:
        return struct.unpack_from(fmt[tag], data, pos + 1)[0], pos + 1 + struct.calcsize(fmt[tag])
    if tag in (0xD9, 0xDA):
        size_fmt = "!B" if tag == 0xD9 else "!H"
        size = struct.unpack_from(size_fmt, data, pos + 1)[0]
        start = pos + 1 + struct.calcsize(size_fmt)
        return data[start:start + size].decode(), start + size
    if tag >= 0xE0:
        return tag - 0x100, pos + 1
    raise ValueError("unsupported msgpack tag 0x%02X in the test double" % tag)


def packb(obj):
    return _msgpack.packb(obj, use_bin_type=True) if _msgpack else _pack(obj)


def unpackb(data):
    if not data:
        return {}
    return _msgpack.unpackb(data, raw=False) if _msgpack else _unpack(data)[0]


def encode(msg_type, payload, sequence=0, flags=0):
    body = packb(payload)
    return HEADER.pack(MAGIC, VERSION, msg_type, flags, 0, 0, 0, sequence, len(body)) + body


def decode(data):
    if len(data) < HEADER.size:
        raise ValueError("Message too short: %d bytes" % len(data))
    magic, version, msg_type, flags, _r1, _r2, _r3, sequence, length = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise ValueError("Invalid magic number: 0x%04X" % magic)
    return msg_type, flags, sequence, unpackb(data[HEADER.size:HEADER.size + length])
