"""SPDY/3.1 framing of the kubelet endpoint, against bytes Kubernetes' own SPDY library writes.

The hex frames below were written by moby/spdystream v0.5.0's framer (the one the API server's
SPDY client uses) for two stream openings of a port-forward, then a data frame, a PING, a
RST_STREAM, a GOAWAY, a WINDOW_UPDATE and a SETTINGS frame, one connection's compression context
throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import zlib
from collections.abc import AsyncIterator

import pytest
from ray_operator.localray.kubelet.session import SpdySession
from ray_operator.localray.kubelet.spdy import (
    HEADER_DICTIONARY,
    MAX_HEADER_BLOCK_BYTES,
    DataFrame,
    Frame,
    FrameReader,
    FrameWriter,
    GoAway,
    HeadersFrame,
    OtherControlFrame,
    Ping,
    RstStream,
    SpdyProtocolError,
    SynReply,
    SynStream,
    encode_header_block,
)

SPDYSTREAM_FRAMES = [
    "800300010000003d0000000100000000000078f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45e0"
    "1c606164062a84388b20d198094ade8c0600000000ffff",
    "800300010000001800000003000000000000c2aa19540e2512d60b000000ffff",
    "000000030100000568656c6c6f",
    "800300060000000400000001",
    "80030003000000080000000300000005",
    "80030007000000080000000300000000",
    "80030009000000080000000100000400",
    "800300040000000c000000010000000700010000",
]


def test_the_header_dictionary_is_spdy3s_byte_for_byte() -> None:
    assert len(HEADER_DICTIONARY) == 1423
    digest = hashlib.sha256(HEADER_DICTIONARY).hexdigest()
    assert digest == "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"


def test_frames_spdystream_wrote_read_back_with_one_shared_header_context() -> None:
    reader = FrameReader()
    frames = []
    for frame_hex in SPDYSTREAM_FRAMES:
        reader.feed(bytes.fromhex(frame_hex))
        frames += list(reader.frames())
    port = {"port": "8265", "requestid": "0"}
    assert frames[:6] == [
        SynStream(1, {"streamtype": "error", **port}),
        # Compressed against the first block's context: it alone would not decompress.
        SynStream(3, {"streamtype": "data", **port}),
        DataFrame(3, b"hello", fin=True),
        Ping(1),
        RstStream(3, 5),
        GoAway(3, 0),
    ]
    assert [(f.type, f.payload) for f in frames[6:] if isinstance(f, OtherControlFrame)] == [
        (9, bytes.fromhex("0000000100000400")),
        (4, bytes.fromhex("000000010000000700010000")),
    ]


def test_a_frame_split_anywhere_is_read_once_it_is_complete() -> None:
    whole = bytes.fromhex("".join(SPDYSTREAM_FRAMES[:3]))
    reader = FrameReader()
    frames = []
    for index in range(len(whole)):
        reader.feed(whole[index : index + 1])
        frames += list(reader.frames())
    assert [type(frame) for frame in frames] == [SynStream, SynStream, DataFrame]


def test_written_frames_read_back_equal_with_the_header_context_carried_across() -> None:
    writer, reader = FrameWriter(), FrameReader()
    frames = [
        SynReply(1, {}),
        SynReply(3, {"x-stream-protocol-version": "v4.channel.k8s.io"}),
        HeadersFrame(3, {"x-stream-protocol-version": "v4.channel.k8s.io"}, fin=True),
        SynStream(5, {"streamtype": "stdout"}, priority=3),
        DataFrame(5, b"\x00" * 70000),
        DataFrame(5, b"", fin=True),
        Ping(7),
        RstStream(5, 5),
        GoAway(5, 0),
    ]
    wire = b"".join(writer.encode(frame) for frame in frames)
    reader.feed(wire)
    assert list(reader.frames()) == frames
    # The same headers again take fewer bytes: one context remembers the first block.
    shared, headers = FrameWriter(), {"a" * 40: "b" * 40}
    assert len(shared.encode(SynReply(3, headers))) < len(shared.encode(SynReply(1, headers))) or (
        len(shared.encode(SynReply(5, headers))) < len(FrameWriter().encode(SynReply(1, headers)))
    )


def test_a_frame_longer_than_the_bound_is_a_protocol_error_before_it_is_buffered() -> None:
    reader = FrameReader(max_frame_length=1024)
    reader.feed(bytes.fromhex("00000001") + (2048).to_bytes(4, "big"))
    with pytest.raises(SpdyProtocolError, match="2048 bytes"):
        list(reader.frames())


def test_a_header_block_inflating_past_its_bound_is_a_protocol_error() -> None:
    compressor = zlib.compressobj(zdict=HEADER_DICTIONARY)
    bomb = encode_header_block({"x": "y" * (MAX_HEADER_BLOCK_BYTES * 4)})
    block = compressor.compress(bomb) + compressor.flush(zlib.Z_SYNC_FLUSH)
    body = (1).to_bytes(4, "big") + block
    reader = FrameReader()
    reader.feed(bytes.fromhex("80030002") + len(body).to_bytes(4, "big") + body)
    with pytest.raises(SpdyProtocolError, match="over"):
        list(reader.frames())


def test_another_spdy_version_is_refused() -> None:
    reader = FrameReader()
    reader.feed(bytes.fromhex("800200060000000400000001"))
    with pytest.raises(SpdyProtocolError, match="version 2"):
        list(reader.frames())


class _Peer:
    """The client side of a SPDY connection to a `SpdySession` (as the API server would be)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._frames_out, self._frames_in = FrameWriter(), FrameReader()
        self._pending: list[Frame] = []

    def send(self, *frames: Frame) -> None:
        for frame in frames:
            self._writer.write(self._frames_out.encode(frame))

    async def receive(self, count: int) -> list[Frame]:
        while len(self._pending) < count:
            data = await asyncio.wait_for(self._reader.read(65536), 5)
            if not data:
                break
            self._frames_in.feed(data)
            self._pending += list(self._frames_in.frames())
        received, self._pending = self._pending[:count], self._pending[count:]
        return received

    async def closed(self) -> bool:
        return await asyncio.wait_for(self._reader.read(65536), 5) == b""


@contextlib.asynccontextmanager
async def _session(**bounds: float) -> AsyncIterator[tuple[SpdySession, _Peer]]:
    sessions: asyncio.Queue[SpdySession] = asyncio.Queue()
    runs: list[asyncio.Task[None]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = SpdySession(reader, writer, **bounds)  # type: ignore[arg-type]
        await sessions.put(session)
        runs.append(asyncio.ensure_future(session.run()))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield await sessions.get(), _Peer(reader, writer)
    finally:
        writer.close()
        server.close()
        await asyncio.gather(*runs)
        await server.wait_closed()


async def test_a_stream_the_peer_opens_is_replied_to_and_carries_data_both_ways() -> None:
    async with _session() as (session, peer):
        peer.send(SynStream(1, {"streamtype": "stdin"}), DataFrame(1, b"in", fin=True), Ping(1))
        assert await peer.receive(2) == [SynReply(1, {}), Ping(1)]
        stream = await session.accept()
        assert stream is not None
        assert stream.headers == {"streamtype": "stdin"}
        assert (await stream.read(), await stream.read()) == (b"in", b"")
        await stream.write(b"out")
        await stream.close()
        assert await peer.receive(2) == [DataFrame(1, b"out"), DataFrame(1, b"", fin=True)]


async def test_streams_beyond_the_bound_are_refused() -> None:
    async with _session(max_streams=2) as (_, peer):
        peer.send(*(SynStream(stream_id, {}) for stream_id in (1, 3, 5)))
        assert await peer.receive(3) == [SynReply(1, {}), SynReply(3, {}), RstStream(5, 3)]


async def test_a_connection_idle_past_its_timeout_is_closed() -> None:
    async with _session(idle_timeout=0.3) as (session, peer):
        assert await peer.closed()
        assert await session.accept() is None


async def test_a_reused_stream_id_ends_the_connection_with_a_protocol_error() -> None:
    async with _session() as (_, peer):
        peer.send(SynStream(3, {}), SynStream(1, {}))
        assert await peer.receive(2) == [SynReply(3, {}), GoAway(3, 1)]
