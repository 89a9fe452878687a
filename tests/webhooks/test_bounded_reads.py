"""Every listener gives a client bounded time and size (issue 12, finding 7): a connection that
drips its headers or its body is closed after a bounded time, an oversized body is refused unread,
and meanwhile /healthz keeps answering within a second.

The probes server (`server.serve`) runs exactly as the operator runs it, on an event loop of its
own in a thread, with short `ReadLimits` so the tests take seconds; raw sockets play the client.
The same `ReadLimits` mechanism on the HTTPS webhook listener, at its real defaults, is tested in
`test_admission_load.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ray_operator.server import Heartbeat, ReadLimits, probe_routes, serve

from tests.webhooks.server import free_port

LIMITS = ReadLimits(header_seconds=1.0, body_seconds=1.0, max_body_bytes=1024)
SLACK = 1.5  # scheduling on a loaded 2-core machine; the point is "bounded", not "exact"


class ProbeServer:
    """`serve()` with /healthz and /readyz on 127.0.0.1, on its own loop in a thread."""

    def __init__(self, limits: ReadLimits) -> None:
        self.port = free_port()
        self.limits = limits
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._started = threading.Event()

    def __enter__(self) -> ProbeServer:
        self._thread.start()
        assert self._started.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return self
            time.sleep(0.05)
        raise TimeoutError("the probe server did not start")

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None
        for task in self._tasks:
            self._loop.call_soon_threadsafe(task.cancel)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        heartbeat = Heartbeat()
        routes = probe_routes(heartbeat=heartbeat, synced=list)
        self._tasks = [
            asyncio.create_task(heartbeat.run()),
            asyncio.create_task(
                serve([(f"127.0.0.1:{self.port}", routes, "--health-addr")], limits=self.limits)
            ),
        ]
        self._started.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture(scope="module")
def probes() -> Iterator[ProbeServer]:
    with ProbeServer(LIMITS) as server:
        yield server


def healthz_seconds(port: int) -> float:
    """One GET /healthz on a new connection: how long the answer took (must be 200)."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        assert response.status == 200
        response.read()
    finally:
        connection.close()
    return time.monotonic() - started


def drip(port: int, data: bytes, *, every: float = 0.1, limit: float = 10.0) -> tuple[float, bytes]:
    """Send `data` a byte at a time; seconds until the server closed the connection, and what it
    answered. Fails if the server still holds the connection after `limit` seconds."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(every)
    started, received = time.monotonic(), b""
    try:
        for index in range(10**6):
            with contextlib.suppress(OSError):
                sock.send(data[index % len(data) : index % len(data) + 1])
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                chunk = None
            except OSError:
                return time.monotonic() - started, received  # reset: closed
            if chunk == b"":
                return time.monotonic() - started, received
            received += chunk or b""
            if time.monotonic() - started > limit:
                break
    finally:
        sock.close()
    raise AssertionError(f"the connection was still open after {limit}s")


def test_a_client_dripping_its_headers_is_closed_while_healthz_answers(probes: ProbeServer) -> None:
    latencies: list[float] = []
    stop = threading.Event()

    def poll_healthz() -> None:
        while not stop.is_set():
            latencies.append(healthz_seconds(probes.port))
            time.sleep(0.1)

    poller = threading.Thread(target=poll_healthz)
    poller.start()
    try:
        headers = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        seconds, answer = drip(probes.port, headers)
    finally:
        stop.set()
        poller.join()
    assert answer == b""  # no request was ever complete: nothing to answer
    assert LIMITS.header_seconds - 0.2 < seconds < LIMITS.header_seconds + SLACK
    assert latencies
    assert max(latencies) < 1.0


def test_a_client_that_sends_nothing_is_closed(probes: ProbeServer) -> None:
    with socket.create_connection(("127.0.0.1", probes.port)) as sock:
        sock.settimeout(LIMITS.header_seconds + SLACK)
        started = time.monotonic()
        assert sock.recv(1) == b""
        assert time.monotonic() - started < LIMITS.header_seconds + SLACK


def test_an_idle_keep_alive_connection_is_closed(probes: ProbeServer) -> None:
    with socket.create_connection(("127.0.0.1", probes.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(LIMITS.header_seconds + SLACK)
        answer = b""
        started = time.monotonic()
        while chunk := sock.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")
        assert time.monotonic() - started < LIMITS.header_seconds + SLACK


def test_a_client_dripping_its_body_gets_408_and_is_closed(probes: ProbeServer) -> None:
    headers = b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    with socket.create_connection(("127.0.0.1", probes.port)) as sock:
        sock.sendall(headers)
        seconds, answer = drip_on(sock, b"x")
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    bound = LIMITS.body_seconds + LIMITS.lingering_seconds + SLACK
    assert seconds < bound


def drip_on(sock: socket.socket, byte: bytes, *, limit: float = 10.0) -> tuple[float, bytes]:
    """Like `drip`, on a connection that already sent its headers."""
    sock.settimeout(0.1)
    started, received = time.monotonic(), b""
    while time.monotonic() - started < limit:
        with contextlib.suppress(OSError):
            sock.send(byte)
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started, received
        if chunk == b"":
            return time.monotonic() - started, received
        received += chunk
    raise AssertionError(f"the connection was still open after {limit}s")


def test_a_declared_body_over_the_cap_is_refused_unread(probes: ProbeServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", probes.port, timeout=5)
    try:
        connection.putrequest("POST", "/healthz")
        connection.putheader("Content-Length", str(LIMITS.max_body_bytes + 1))
        connection.endheaders()
        started = time.monotonic()
        response = connection.getresponse()  # before a byte of the body was sent
        assert response.status == 413
        assert time.monotonic() - started < 1.0
    finally:
        connection.close()
    assert healthz_seconds(probes.port) < 1.0


def test_a_chunked_body_over_the_cap_is_refused(probes: ProbeServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", probes.port, timeout=5)
    try:
        body = b"x" * (LIMITS.max_body_bytes * 4)
        connection.request("POST", "/healthz", body=iter([body]), encode_chunked=True)
        assert connection.getresponse().status == 413
    finally:
        connection.close()


def test_the_default_limits_are_the_documented_ones() -> None:
    assert ReadLimits() == ReadLimits(
        header_seconds=10.0, body_seconds=10.0, max_body_bytes=64 * 1024, lingering_seconds=1.0
    )
