"""Asking a local server whether it serves: one request line, the first line of its answer.

The local Ray agent's readiness checks (a raylet's health through its dashboard agent, a local
Redis' PING) are all this shape, as a kubelet's probes are; each waits a second at most.
"""

from __future__ import annotations

import asyncio
import contextlib

PROBE_TIMEOUT_SECONDS = 1.0


async def first_answer_line(host: str, port: int, request: bytes) -> bytes:
    """The first line `host:port` answers to `request`; b"" when it does not answer in time."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), timeout=PROBE_TIMEOUT_SECONDS
        )
    except (OSError, TimeoutError):
        return b""
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.readline(), timeout=PROBE_TIMEOUT_SECONDS)
    except (OSError, TimeoutError):
        return b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
