"""`/portForward/{namespace}/{pod}`: Kubernetes' port-forward protocol (`portforward.k8s.io`)
over SPDY, as `kubectl port-forward` reaches a kubelet.

For every local connection the client opens two streams carrying the same `requestid` and
`port` headers: `streamtype: error` and `streamtype: data`. Once both are open we connect to
where that Pod port listens on this machine (`LocalPods.pod_port`) and copy bytes both ways;
the client's end of input half-closes our connection, the target's end finishes the data
stream. A port the Pod does not serve, or a target that refuses, is told on the error stream
(kubectl prints it) and both streams end. A pair not complete within the stream-creation
timeout is reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from ray_operator.localray.kubelet.session import SpdySession, SpdyStream
from ray_operator.localray.views import LocalPods

logger = logging.getLogger(__name__)

PROTOCOLS = ("portforward.k8s.io",)
READ_BYTES = 32 << 10
CONNECT_TIMEOUT_SECONDS = 10.0


class _Pair:
    def __init__(self, port: int) -> None:
        self.port = port
        self.error: SpdyStream | None = None
        self.data: SpdyStream | None = None


async def serve_port_forward(
    session: SpdySession,
    *,
    pods: LocalPods,
    namespace: str,
    pod: str,
    stream_creation_timeout: float,
) -> None:
    """Pair the client's streams and forward each pair until the connection ends."""
    pairs: dict[str, _Pair] = {}
    tasks: set[asyncio.Task[None]] = set()

    def spawn(work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        while (stream := await session.accept()) is not None:
            request_id = stream.headers.get("requestid", "")
            kind = stream.headers.get("streamtype", "")
            port = _port(stream.headers.get("port", ""))
            first = request_id not in pairs
            pair = pairs.get(request_id) or _Pair(port or 0)
            if port != pair.port or kind not in ("error", "data") or getattr(pair, kind):
                await stream.reset()
                continue
            pairs[request_id] = pair
            setattr(pair, kind, stream)
            if pair.error is not None and pair.data is not None:
                del pairs[request_id]
                spawn(_forward(pair.error, pair.data, pair.port, pods, namespace, pod))
            elif first:
                spawn(_expire(pairs, request_id, pair, stream_creation_timeout))
    finally:
        # The connection ended: stop forwarding.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _port(text: str) -> int | None:
    try:
        port = int(text)
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


async def _expire(pairs: dict[str, _Pair], request_id: str, pair: _Pair, seconds: float) -> None:
    """Reset a half-opened pair still waiting for its other stream after `seconds`."""
    await asyncio.sleep(seconds)
    if pairs.get(request_id) is not pair:
        return
    del pairs[request_id]
    for stream in (pair.error, pair.data):
        if stream is not None:
            await stream.reset()


async def _forward(
    error: SpdyStream, data: SpdyStream, port: int, pods: LocalPods, namespace: str, pod: str
) -> None:
    error.discard()
    try:
        problem = await _connect_and_copy(data, port, pods, namespace, pod)
    except OSError as failure:
        problem = f"connecting to it failed: {failure}"
    if problem is not None:
        message = f"error forwarding port {port} to pod {namespace}/{pod}: {problem}"
        logger.info("kubelet endpoint: %s", message)
        with contextlib.suppress(OSError, ConnectionError):
            await error.write(message.encode())
    with contextlib.suppress(OSError, ConnectionError):
        await data.close()
        await error.close()


async def _connect_and_copy(
    data: SpdyStream, port: int, pods: LocalPods, namespace: str, pod: str
) -> str | None:
    """Copy between `data` and the Pod port's local listener; what went wrong, or None."""
    target = pods.pod_port(namespace, pod, port)
    if target is None:
        return f"the Pod's local process does not serve Pod port {port} under ray-operator dev"
    host, local_port = target
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, local_port), CONNECT_TIMEOUT_SECONDS
    )
    try:
        await asyncio.gather(_to_target(data, writer), _from_target(reader, data))
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()
    return None


async def _to_target(data: SpdyStream, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while chunk := await data.read():
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def _from_target(reader: asyncio.StreamReader, data: SpdyStream) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while chunk := await reader.read(READ_BYTES):
            await data.write(chunk)
    await data.close()
