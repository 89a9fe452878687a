"""SPDY/3.1 framing: the wire format `kubectl exec` and `kubectl port-forward` reach a kubelet
with (the API server turns kubectl's WebSockets into SPDY toward the kubelet, or relays kubectl's
own SPDY as it is).

Pure: bytes in, frames out (`FrameReader`), frames in, bytes out (`FrameWriter`); no I/O. Each
direction of a connection has one zlib context for its header blocks, primed with the SPDY/3
dictionary and flushed (never reset) after every block, so the reader and the writer each live
as long as the connection. Bounds: a frame's length and a header block's decompressed size and
entry count are capped; beyond them the peer gets a protocol error, not our memory.

Frames we only need to recognise (SETTINGS, WINDOW_UPDATE, NOOP, CREDENTIAL) are returned as
`OtherControlFrame`: Kubernetes' SPDY client (moby/spdystream) keeps no flow-control window.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum

SPDY_VERSION = 3
FLAG_FIN = 0x01
MAX_FRAME_LENGTH = 1 << 20
"""Largest frame we accept (SPDY allows 16 MiB; Kubernetes' client writes at most 32 KiB)."""
MAX_HEADER_BLOCK_BYTES = 16 << 10
MAX_HEADER_ENTRIES = 64


class ControlType(IntEnum):
    SYN_STREAM = 1
    SYN_REPLY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PING = 6
    GOAWAY = 7
    HEADERS = 8
    WINDOW_UPDATE = 9


class RstStatus(IntEnum):
    PROTOCOL_ERROR = 1
    INVALID_STREAM = 2
    REFUSED_STREAM = 3
    CANCEL = 5
    INTERNAL_ERROR = 6
    STREAM_IN_USE = 8
    STREAM_ALREADY_CLOSED = 9


class GoAwayStatus(IntEnum):
    OK = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2


class SpdyProtocolError(ValueError):
    """The peer sent bytes that are not SPDY/3.1 we accept."""


Headers = Mapping[str, str]
"""Header names lower-case; several values of one name joined by NUL, as on the wire."""


@dataclass(frozen=True, slots=True)
class DataFrame:
    stream_id: int
    data: bytes
    fin: bool = False


@dataclass(frozen=True, slots=True)
class SynStream:
    stream_id: int
    headers: Headers
    associated_stream_id: int = 0
    priority: int = 0
    fin: bool = False


@dataclass(frozen=True, slots=True)
class SynReply:
    stream_id: int
    headers: Headers
    fin: bool = False


@dataclass(frozen=True, slots=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    fin: bool = False


@dataclass(frozen=True, slots=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class Ping:
    ping_id: int


@dataclass(frozen=True, slots=True)
class GoAway:
    last_good_stream_id: int
    status: int = GoAwayStatus.OK


@dataclass(frozen=True, slots=True)
class OtherControlFrame:
    """A control frame we read past (SETTINGS, WINDOW_UPDATE, an unknown type)."""

    type: int
    flags: int
    payload: bytes


Frame = (
    DataFrame | SynStream | SynReply | HeadersFrame | RstStream | Ping | GoAway | OtherControlFrame
)


def _dictionary() -> bytes:
    """The zlib dictionary of SPDY/3 header blocks (draft-mbelshe-httpbis-spdy-00, 2.6.10.1):
    length-prefixed words, then a run of common values."""
    words = [
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
    ]
    words += ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive"]
    words += ["origin"]
    tail = (
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504"
        "505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
        "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
        "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, "
        "Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
        "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
        "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
    )
    return b"".join(struct.pack(">I", len(w)) + w.encode() for w in words) + tail.encode()


HEADER_DICTIONARY = _dictionary()


def encode_header_block(headers: Headers) -> bytes:
    """A header block before compression: count, then length-prefixed names and values."""
    parts = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        encoded_name, encoded_value = name.lower().encode(), value.encode()
        parts += [struct.pack(">I", len(encoded_name)), encoded_name]
        parts += [struct.pack(">I", len(encoded_value)), encoded_value]
    return b"".join(parts)


def decode_header_block(block: bytes) -> dict[str, str]:
    """The inverse of `encode_header_block`, bounded in entries."""
    view = _Cursor(block)
    count = view.uint32()
    if count > MAX_HEADER_ENTRIES:
        raise SpdyProtocolError(f"header block has {count} entries (at most {MAX_HEADER_ENTRIES})")
    headers: dict[str, str] = {}
    for _ in range(count):
        name = view.chunk(view.uint32()).decode("latin-1").lower()
        value = view.chunk(view.uint32()).decode("latin-1")
        if not name or name in headers:
            raise SpdyProtocolError(f"header name {name!r} empty or repeated")
        headers[name] = value
    if not view.at_end():
        raise SpdyProtocolError("trailing bytes after the header block")
    return headers


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def uint32(self) -> int:
        (value,) = struct.unpack(">I", self.chunk(4))
        return int(value)

    def chunk(self, size: int) -> bytes:
        if self._at + size > len(self._data):
            raise SpdyProtocolError("header block ends early")
        piece = self._data[self._at : self._at + size]
        self._at += size
        return piece

    def at_end(self) -> bool:
        return self._at == len(self._data)


class FrameWriter:
    """Frames to bytes for one direction of one connection (its header compression context)."""

    def __init__(self) -> None:
        self._compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zdict=HEADER_DICTIONARY)

    def _headers(self, headers: Headers) -> bytes:
        block = self._compressor.compress(encode_header_block(headers))
        return block + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def encode(self, frame: Frame) -> bytes:
        match frame:
            case DataFrame(stream_id, data, fin):
                flags = FLAG_FIN if fin else 0
                return struct.pack(">II", stream_id, flags << 24 | len(data)) + data
            case SynStream(stream_id, headers, associated, priority, fin):
                body = struct.pack(">IIBB", stream_id, associated, priority << 5, 0)
                return _control(ControlType.SYN_STREAM, fin, body + self._headers(headers))
            case SynReply(stream_id, headers, fin):
                body = struct.pack(">I", stream_id) + self._headers(headers)
                return _control(ControlType.SYN_REPLY, fin, body)
            case HeadersFrame(stream_id, headers, fin):
                body = struct.pack(">I", stream_id) + self._headers(headers)
                return _control(ControlType.HEADERS, fin, body)
            case RstStream(stream_id, status):
                return _control(
                    ControlType.RST_STREAM, False, struct.pack(">II", stream_id, status)
                )
            case Ping(ping_id):
                return _control(ControlType.PING, False, struct.pack(">I", ping_id))
            case GoAway(last_good, status):
                return _control(ControlType.GOAWAY, False, struct.pack(">II", last_good, status))
            case OtherControlFrame(type_, flags, payload):
                return _control(type_, flags, payload)
        raise TypeError(f"not a SPDY frame: {frame!r}")


def _control(type_: int, flags: int | bool, body: bytes) -> bytes:
    """A control frame: `flags` an int, or a bool saying FIN."""
    if isinstance(flags, bool):
        flags = FLAG_FIN if flags else 0
    return struct.pack(">HHI", 0x8000 | SPDY_VERSION, type_, flags << 24 | len(body)) + body


class FrameReader:
    """Bytes to frames for one direction of one connection: `feed` what arrived, then iterate
    `frames()` for every complete frame (a partial one waits for more bytes)."""

    def __init__(self, *, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        self._buffer = bytearray()
        self._max_frame_length = max_frame_length
        self._decompressor = zlib.decompressobj(zdict=HEADER_DICTIONARY)

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def frames(self) -> Iterator[Frame]:
        while len(self._buffer) >= 8:
            first, second = struct.unpack(">II", self._buffer[:8])
            length = second & 0xFFFFFF
            if length > self._max_frame_length:
                raise SpdyProtocolError(
                    f"frame of {length} bytes (at most {self._max_frame_length})"
                )
            if len(self._buffer) < 8 + length:
                return
            payload = bytes(self._buffer[8 : 8 + length])
            del self._buffer[: 8 + length]
            flags = second >> 24
            if first & 0x80000000:
                yield self._control(first, flags, payload)
            else:
                yield DataFrame(first & 0x7FFFFFFF, payload, fin=bool(flags & FLAG_FIN))

    def _control(self, first: int, flags: int, payload: bytes) -> Frame:
        version, type_ = (first >> 16) & 0x7FFF, first & 0xFFFF
        if version != SPDY_VERSION:
            raise SpdyProtocolError(f"SPDY version {version} (only {SPDY_VERSION} is spoken)")
        fin = bool(flags & FLAG_FIN)
        try:
            match type_:
                case ControlType.SYN_STREAM:
                    stream_id, associated, priority = struct.unpack(">IIB", payload[:9])
                    headers = self._headers(payload[10:])
                    return SynStream(
                        stream_id & 0x7FFFFFFF, headers, associated & 0x7FFFFFFF, priority >> 5, fin
                    )
                case ControlType.SYN_REPLY:
                    (stream_id,) = struct.unpack(">I", payload[:4])
                    return SynReply(stream_id & 0x7FFFFFFF, self._headers(payload[4:]), fin)
                case ControlType.HEADERS:
                    (stream_id,) = struct.unpack(">I", payload[:4])
                    return HeadersFrame(stream_id & 0x7FFFFFFF, self._headers(payload[4:]), fin)
                case ControlType.RST_STREAM:
                    stream_id, status = struct.unpack(">II", payload)
                    return RstStream(stream_id & 0x7FFFFFFF, status)
                case ControlType.PING:
                    (ping_id,) = struct.unpack(">I", payload)
                    return Ping(ping_id)
                case ControlType.GOAWAY:
                    last_good, status = struct.unpack(">II", payload[:8])
                    return GoAway(last_good & 0x7FFFFFFF, status)
        except struct.error as error:
            raise SpdyProtocolError(
                f"control frame {type_} of {len(payload)} bytes: {error}"
            ) from error
        return OtherControlFrame(type_, flags, payload)

    def _headers(self, compressed: bytes) -> dict[str, str]:
        try:
            block = self._decompressor.decompress(compressed, MAX_HEADER_BLOCK_BYTES)
        except zlib.error as error:
            raise SpdyProtocolError(f"header block does not decompress: {error}") from error
        if self._decompressor.unconsumed_tail:
            raise SpdyProtocolError(f"header block over {MAX_HEADER_BLOCK_BYTES} bytes")
        return decode_header_block(block)
