"""What all clients of a listener together can make it hold (issue 28, finding 5): room for a body
is reserved before the body is read and given back with the answer; a body that does not fit is
answered 429 with `Retry-After`, unread; small bodies have room of their own; a request without a
body is never refused; connections beyond the limit (TLS handshakes included) are closed as soon
as they are accepted.

Each listener is the real `bounded_application` served by a `BoundedSite`, on an event loop of
its own in a thread, with small `ReadLimits` so the tests take seconds; raw sockets play the
clients. The same limits at the webhook's real sizes, in a real operator, are attacked in
`tests/adversarial/test_admission_starvation.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import http.client
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from ray_operator.pki import create_ca, issue_certificate
from ray_operator.server import BodyLane, ReadLimits, bounded_application
from ray_operator.webhooks.handlers import (
    HELD_INLINE_REVIEW_BYTES,
    HELD_LARGE_REVIEW_BYTES,
    INLINE_REVIEW_BYTES,
    MAX_REVIEW_BYTES,
    REVIEW_READ_LIMITS,
)
from ray_operator.webhooks.tls import ServingCertificate

from tests.runtime.processes import wait_until
from tests.webhooks.server import ApplicationThread

SLACK = 1.5  # scheduling on a loaded 2-core machine: the point is "bounded", not "exact"
LIMITS = ReadLimits(
    header_seconds=10.0,
    body_seconds=1.0,
    max_body_bytes=1000,
    held_body_bytes=1000,
    small_bodies=BodyLane(max_body_bytes=100, held_bytes=300),
    max_connections=8,
    handshake_seconds=1.0,
)


def listener(limits: ReadLimits, *, tls: bool = False) -> ApplicationThread:
    """`bounded_application(limits)` with POST /echo and GET /ping, served by a `BoundedSite`
    on 127.0.0.1 (over TLS with `tls=True`)."""

    def application() -> web.Application:
        bounded = bounded_application(limits)
        bounded.add_routes([web.post("/echo", _echo), web.get("/ping", _ping)])
        return bounded

    return ApplicationThread(
        application, limits=limits, ssl_context=_server_context() if tls else None
    )


async def _echo(request: web.Request) -> web.Response:
    return web.Response(text=str(len(await request.read())))


async def _ping(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _server_context() -> ssl.SSLContext:
    ca = create_ca("test-ca", valid_for=datetime.timedelta(hours=1))
    pair = issue_certificate(
        ca, "listener", valid_for=datetime.timedelta(hours=1), ip_addresses=["127.0.0.1"]
    )
    serving = ServingCertificate()
    serving.load(pair)
    return serving.context


@pytest.fixture(scope="module", name="listener")
def listener_fixture() -> Iterator[ApplicationThread]:
    with listener(LIMITS) as running:
        yield running


# --- clients ---------------------------------------------------------------------------------


@contextlib.contextmanager
def stalled_body(port: int, *, declared: int | None) -> Iterator[socket.socket]:
    """A POST /echo whose headers are complete but whose body never is (`declared=None`: a
    chunked one); the connection is closed on exit."""
    length = "Transfer-Encoding: chunked" if declared is None else f"Content-Length: {declared}"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"POST /echo HTTP/1.1\r\nHost: x\r\n{length}\r\n\r\n".encode())
        sock.sendall(b"5\r\nxxxxx" if declared is None else b"x")
        yield sock


def answer_to_declared(port: int, declared: int) -> tuple[int, dict[str, str]]:
    """Status and headers of the answer to a POST that declares a body and sends none of it."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode()
        )
        return _read_head(sock)


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str]]:
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {received!r}")
        received += chunk
    status_line, *lines = received.split(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers


def post(port: int, size: int, *, context: ssl.SSLContext | None = None) -> int:
    """The status of a whole POST /echo of `size` bytes."""
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        connection.request("POST", "/echo", body=b"x" * size)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def ping(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/ping")
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def wait_for_429(port: int, declared: int) -> dict[str, str]:
    """Until a body of `declared` bytes is refused (the stalled one was reserved); its headers."""
    answers: list[tuple[int, dict[str, str]]] = []

    def refused() -> bool:
        answers.append(answer_to_declared(port, declared))
        return answers[-1][0] == 429

    wait_until(refused, timeout=5, interval=0.05, what=f"a {declared}-byte body refused")
    return answers[-1][1]


def closed_after(sock: socket.socket, *, limit: float) -> float:
    """Seconds until the server closes `sock` (what it sends meanwhile is read and dropped)."""
    sock.settimeout(limit)
    started = time.monotonic()
    with contextlib.suppress(ConnectionResetError):
        while sock.recv(4096):
            pass
    return time.monotonic() - started


# --- bodies held -----------------------------------------------------------------------------


def test_a_body_that_does_not_fit_is_refused_with_429_before_a_byte_of_it_is_read(
    listener: ApplicationThread,
) -> None:
    with stalled_body(listener.port, declared=900):
        headers = wait_for_429(listener.port, declared=200)  # only headers sent: unread
        assert headers["Retry-After"] == "1"
        assert headers["Connection"] == "close"
    # The stalled client went away: its room is back.
    wait_until(lambda: post(listener.port, 200) == 200, timeout=5, what="room given back")


def test_a_body_that_never_ends_is_cut_off_and_its_room_given_back(
    listener: ApplicationThread,
) -> None:
    with stalled_body(listener.port, declared=900) as sock:
        wait_for_429(listener.port, declared=200)
        seconds = closed_after(sock, limit=LIMITS.body_seconds + LIMITS.lingering_seconds + SLACK)
        assert seconds < LIMITS.body_seconds + LIMITS.lingering_seconds + SLACK
        assert post(listener.port, 200) == 200


def test_a_chunked_body_holds_room_for_the_largest_body(listener: ApplicationThread) -> None:
    with stalled_body(listener.port, declared=None):
        wait_for_429(listener.port, declared=101)  # the smallest body outside the small room


def test_small_bodies_have_room_of_their_own_while_the_large_ones_fill_theirs(
    listener: ApplicationThread,
) -> None:
    with stalled_body(listener.port, declared=1000):
        wait_for_429(listener.port, declared=101)
        assert [post(listener.port, 100) for _ in range(20)] == [200] * 20


def test_small_bodies_are_bounded_too(listener: ApplicationThread) -> None:
    with contextlib.ExitStack() as stack:
        for _ in range(3):  # 3 x 100 bytes fill the small room (300)
            stack.enter_context(stalled_body(listener.port, declared=100))
        wait_for_429(listener.port, declared=1)
        assert post(listener.port, 101) == 200  # the large room is untouched


def test_a_request_without_a_body_is_never_refused(listener: ApplicationThread) -> None:
    with stalled_body(listener.port, declared=1000), stalled_body(listener.port, declared=None):
        wait_for_429(listener.port, declared=101)
        assert ping(listener.port) == 200


def test_more_header_lines_than_allowed_are_refused(listener: ApplicationThread) -> None:
    lines = "".join(f"X-Header-{index}: x\r\n" for index in range(LIMITS.max_headers + 1))
    with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as sock:
        sock.sendall(f"GET /ping HTTP/1.1\r\nHost: x\r\n{lines}\r\n".encode())
        status, _ = _read_head(sock)
    assert status == 400


# --- connections -----------------------------------------------------------------------------


def test_a_connection_beyond_the_limit_waits_to_be_accepted_until_one_ends(
    listener: ApplicationThread,
) -> None:
    with contextlib.ExitStack() as stack:
        idle = [
            stack.enter_context(socket.create_connection(("127.0.0.1", listener.port)))
            for _ in range(LIMITS.max_connections)
        ]
        waiting = stack.enter_context(socket.create_connection(("127.0.0.1", listener.port)))
        waiting.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        waiting.settimeout(1.0)
        with pytest.raises(TimeoutError):
            waiting.recv(4096)  # not accepted: nothing reads its request
        idle[0].close()
        waiting.settimeout(5.0)
        status, _ = _read_head(waiting)
    assert status == 200


def test_tls_handshakes_in_progress_count_and_are_cut_off_after_handshake_seconds() -> None:
    limits = ReadLimits(max_connections=2, handshake_seconds=1.0)
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    with listener(limits, tls=True) as tls:
        assert post(tls.port, 10, context=client) == 200
        opened = time.monotonic()
        silent = [socket.create_connection(("127.0.0.1", tls.port)) for _ in range(2)]
        try:
            # The two handshakes never started fill the listener: a TLS client is served only
            # once they are cut off.
            assert post(tls.port, 10, context=client) == 200
            served_after = time.monotonic() - opened
            for sock in silent:
                closed_after(sock, limit=limits.handshake_seconds + SLACK)
            closed_within = time.monotonic() - opened
        finally:
            for sock in silent:
                sock.close()
    assert served_after > limits.handshake_seconds / 2
    assert closed_within < limits.handshake_seconds + SLACK


# --- the documented sizes --------------------------------------------------------------------


def test_the_webhook_holds_the_documented_sizes() -> None:
    assert REVIEW_READ_LIMITS.max_body_bytes == MAX_REVIEW_BYTES == 7 * 1024 * 1024
    assert REVIEW_READ_LIMITS.held_body_bytes == HELD_LARGE_REVIEW_BYTES == 32 * 1024 * 1024
    assert REVIEW_READ_LIMITS.small_bodies == BodyLane(
        max_body_bytes=INLINE_REVIEW_BYTES, held_bytes=HELD_INLINE_REVIEW_BYTES
    )
    assert HELD_INLINE_REVIEW_BYTES == 8 * 1024 * 1024
    assert REVIEW_READ_LIMITS.max_connections == 64


def test_every_other_listener_holds_the_documented_sizes() -> None:
    limits: dict[str, Any] = {
        "held_body_bytes": 1024 * 1024,
        "small_bodies": None,
        "max_connections": 32,
        "handshake_seconds": 10.0,
        "max_headers": 32,
    }
    assert {name: getattr(ReadLimits(), name) for name in limits} == limits


def test_limits_with_room_for_less_than_their_largest_body_are_refused() -> None:
    with pytest.raises(ValueError, match="room for fewer bytes than its largest body"):
        ReadLimits(max_body_bytes=2000, held_body_bytes=1000)
    with pytest.raises(ValueError, match="room for fewer bytes than its largest body"):
        ReadLimits(small_bodies=BodyLane(max_body_bytes=100, held_bytes=99))


# --- Python 3.13's AbstractServer.close_clients / abort_clients -----------------------------


@pytest.mark.parametrize("method", ["close_clients", "abort_clients"])
async def test_closing_the_clients_ends_every_open_connection(method: str) -> None:
    """Python 3.13 gave AbstractServer these two (raising NotImplementedError by default)."""
    from ray_operator.server import _Acceptor

    entered, release = asyncio.Event(), asyncio.Event()

    async def held(request: web.BaseRequest) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="too late")

    server = web.Server(held)
    listening = socket.create_server(("127.0.0.1", 0))
    listening.setblocking(False)
    acceptor = _Acceptor(server, [listening], ssl_context=None, limits=ReadLimits())
    try:
        reader, writer = await asyncio.open_connection(*listening.getsockname()[:2])
        writer.write(b"GET / HTTP/1.1\r\nHost: operator\r\n\r\n")
        await asyncio.wait_for(entered.wait(), timeout=10)
        getattr(acceptor, method)()
        assert await asyncio.wait_for(reader.read(), timeout=10) == b""
        writer.close()
    finally:
        release.set()
        acceptor.close()
        await acceptor.wait_closed()
