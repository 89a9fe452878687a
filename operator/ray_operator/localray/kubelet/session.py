"""One SPDY/3.1 connection, server side, over asyncio streams: the peer opens streams, we read
and write them.

As Kubernetes' kubelet does (apimachinery's SPDY connection), every stream the peer opens is
answered at once with an empty SYN_REPLY (the client waits for that reply before it writes), then
handed to whoever awaits `accept()`. PINGs are echoed; SETTINGS and WINDOW_UPDATE are read past
(the peer keeps no flow-control window either). Backpressure is TCP's: the read loop waits while
a stream's inbox is full, so a stream nobody reads must be `discard`ed.

Bounds: `max_streams` open at once (more are refused with RST_STREAM), `idle_timeout` seconds
with no frame either way ends the connection, and a protocol error ends it with GOAWAY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ray_operator.localray.kubelet.spdy import (
    DataFrame,
    Frame,
    FrameReader,
    FrameWriter,
    GoAway,
    GoAwayStatus,
    Headers,
    Ping,
    RstStatus,
    RstStream,
    SpdyProtocolError,
    SynReply,
    SynStream,
)

logger = logging.getLogger(__name__)

WRITE_CHUNK_BYTES = 32 << 10
INBOX_FRAMES = 8
READ_BYTES = 64 << 10


class SpdyStream:
    """One stream the peer opened: its headers, its incoming bytes, our half to write."""

    def __init__(self, session: SpdySession, stream_id: int, headers: Headers) -> None:
        self.stream_id = stream_id
        self.headers = headers
        self._session = session
        # Unbounded as a queue, bounded by `deliver` waiting for room: the end-of-input mark
        # (b"") must always fit, even from the synchronous end of the connection.
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._room = asyncio.Event()
        self._room.set()
        self._input_ended = False
        self._end_read = False
        self._discarding = False
        self.local_closed = False
        self.was_reset = False

    async def read(self) -> bytes:
        """The next bytes the peer sent; b"" once it finished, reset, or the connection ended."""
        if self._end_read:
            return b""
        data = await self._inbox.get()
        if self._inbox.qsize() < INBOX_FRAMES:
            self._room.set()
        if not data:
            self._end_read = True
        return data

    def discard(self) -> None:
        """Drop whatever the peer sends on this stream from now on (a stream we never read)."""
        self._discarding = True
        self._room.set()

    async def write(self, data: bytes) -> None:
        """Send `data` (nothing once we closed or it was reset)."""
        for start in range(0, len(data), WRITE_CHUNK_BYTES):
            if self.local_closed or self.was_reset:
                return
            chunk = data[start : start + WRITE_CHUNK_BYTES]
            await self._session.send(DataFrame(self.stream_id, chunk))

    async def close(self) -> None:
        """Finish our half (FIN); the peer may still write."""
        if self.local_closed or self.was_reset:
            return
        self.local_closed = True
        await self._session.send(DataFrame(self.stream_id, b"", fin=True))
        self._session.forget_if_done(self)

    async def reset(self, status: RstStatus = RstStatus.CANCEL) -> None:
        """End both halves at once (RST_STREAM)."""
        if self.was_reset:
            return
        self.end_input(reset=True)
        self._session.forget_if_done(self)
        await self._session.send(RstStream(self.stream_id, status))

    @property
    def done(self) -> bool:
        return self.was_reset or (self.local_closed and self._input_ended)

    async def deliver(self, data: bytes, *, fin: bool) -> None:
        """From the read loop: bytes the peer sent (waits while the inbox is full)."""
        if self._input_ended:
            return
        if data and not self._discarding:
            await self._room.wait()
            self._inbox.put_nowait(data)
            if self._inbox.qsize() >= INBOX_FRAMES:
                self._room.clear()
        if fin:
            self.end_input(reset=False)

    def end_input(self, *, reset: bool) -> None:
        """No more bytes come from the peer (FIN, RST_STREAM or the connection's end)."""
        self.was_reset = self.was_reset or reset
        if not self._input_ended:
            self._input_ended = True
            self._inbox.put_nowait(b"")
            self._room.set()


class SpdySession:
    """The server side of one SPDY connection; `run()` reads until the connection ends."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_streams: int = 64,
        idle_timeout: float = 1800.0,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._frames_in = FrameReader()
        self._frames_out = FrameWriter()
        self._streams: dict[int, SpdyStream] = {}
        self._new_streams: asyncio.Queue[SpdyStream | None] = asyncio.Queue()
        self._last_stream_id = 0
        self._max_streams = max_streams
        self._idle_timeout = idle_timeout
        self._last_activity = time.monotonic()
        self.closed = asyncio.Event()

    async def run(self) -> None:
        """Read frames until EOF, GOAWAY, a protocol error or `idle_timeout`; then every stream
        reads EOF, `accept()` returns None and the connection is closed."""
        try:
            await self._read_loop()
        except SpdyProtocolError as error:
            logger.info("kubelet endpoint: SPDY protocol error from the API server: %s", error)
            with contextlib.suppress(OSError):
                await self.send(GoAway(self._last_stream_id, GoAwayStatus.PROTOCOL_ERROR))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._end()
            # Whoever works on the streams sees them end; the connection goes now.
            self._writer.close()

    async def _read_loop(self) -> None:
        while True:
            timeout = self._last_activity + self._idle_timeout - time.monotonic()
            try:
                data = await asyncio.wait_for(self._reader.read(READ_BYTES), max(timeout, 0.1))
            except TimeoutError:
                if time.monotonic() - self._last_activity >= self._idle_timeout:
                    logger.info(
                        "kubelet endpoint: closing a connection idle for %.0fs", self._idle_timeout
                    )
                    return
                continue
            if not data:
                return
            self._last_activity = time.monotonic()
            self._frames_in.feed(data)
            for frame in self._frames_in.frames():
                if not await self._handle(frame):
                    return

    async def _handle(self, frame: Frame) -> bool:
        """Act on one frame; False: the peer is going away."""
        match frame:
            case SynStream():
                await self._open(frame)
            case DataFrame(stream_id, data, fin):
                stream = self._streams.get(stream_id)
                if stream is not None:
                    await stream.deliver(data, fin=fin)
                    self.forget_if_done(stream)
            case RstStream(stream_id):
                stream = self._streams.pop(stream_id, None)
                if stream is not None:
                    stream.end_input(reset=True)
            case Ping():
                await self.send(frame)
            case GoAway():
                return False
        return True

    async def _open(self, frame: SynStream) -> None:
        stream_id = frame.stream_id
        if stream_id % 2 == 0 or stream_id <= self._last_stream_id:
            raise SpdyProtocolError(f"stream id {stream_id} after {self._last_stream_id}")
        self._last_stream_id = stream_id
        if len(self._streams) >= self._max_streams:
            await self.send(RstStream(stream_id, RstStatus.REFUSED_STREAM))
            return
        stream = SpdyStream(self, stream_id, frame.headers)
        self._streams[stream_id] = stream
        await self.send(SynReply(stream_id, {}))
        if frame.fin:
            stream.end_input(reset=False)
        self._new_streams.put_nowait(stream)

    async def accept(self) -> SpdyStream | None:
        """The next stream the peer opened; None once the connection ended."""
        if self.closed.is_set() and self._new_streams.empty():
            return None
        return await self._new_streams.get()

    async def send(self, frame: Frame) -> None:
        """Write one frame (each frame in one write, so concurrent senders never interleave)."""
        if self._writer.is_closing():
            return
        self._writer.write(self._frames_out.encode(frame))
        self._last_activity = time.monotonic()
        await self._writer.drain()

    def forget_if_done(self, stream: SpdyStream) -> None:
        if stream.done:
            self._streams.pop(stream.stream_id, None)

    async def close(self) -> None:
        """Say GOAWAY and close the connection."""
        with contextlib.suppress(OSError, ConnectionError):
            await self.send(GoAway(self._last_stream_id))
        self._writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()

    def _end(self) -> None:
        for stream in self._streams.values():
            stream.end_input(reset=False)
        self._streams.clear()
        self.closed.set()
        self._new_streams.put_nowait(None)
