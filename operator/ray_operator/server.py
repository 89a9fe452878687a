"""The HTTP side of every replica (leader or not): probes and metrics, on aiohttp.

- `/healthz` (liveness): 200 while the event loop is responsive — a heartbeat task ticks every
  `interval`; if its last tick is older than `max_lag` the loop is starved or blocked and the
  kubelet should restart us. (A fully blocked loop cannot answer at all, which fails the probe too.)
- `/readyz` (readiness): 200 once every watcher has listed its kind (the caches are synced).
- `/metrics`: the Prometheus text exposition of our registry; with `--metrics-auth=kubernetes`
  (the default off loopback) served by `secure_metrics` instead, over HTTPS, to authorized callers.

Probes and metrics may share one address or use two (`--health-addr`, `--metrics-addr`). The
admission webhooks (TLS, `--webhook-port`) are served by `webhooks/component.py`, and the
RayServeGraph event endpoint by `servegraph/events.py`, with the same kind of limits.

Every listener bounds what one client can hold (issue 12: slow-drip connections were kept forever):
`ReadLimits` gives the request headers `header_seconds` from the moment the connection opens or
the previous response ends (aiohttp's keep-alive timer, which it arms at connection start and
which closes a connection whose handler is still waiting for a complete request), the body
`body_seconds` and `max_body_bytes` (`bounded_reads`, a middleware that reads the body before any
handler: 408 past the time, 413 past the size), and a refused body `lingering_seconds` of grace.

And every listener bounds what all its clients together can make it hold (issue 28: fifty 7 MiB
bodies at once, from anyone who could reach the webhook port, were all read into memory):

- **Bodies held** (`HeldBodies`). Before a byte of a body is read, its declared size is reserved
  from the listener's `held_body_bytes` (a chunked body, whose size is unknown, reserves
  `max_body_bytes`) and kept until the handler has answered: a large review waiting for a worker
  process, or in one, still holds its bytes. A body that does not fit is answered `429 Too Many
  Requests` with `Retry-After`, unread. With `small_bodies`, the bodies up to its size draw on a
  budget of their own, so however many large bodies are held, a small one (the everyday admission
  review) never finds its room taken by them. A request without a body (a probe, a scrape)
  reserves nothing and is never refused.
- **Connections** (`BoundedSite`). The site accepts connections itself and holds at most
  `max_connections` at once, counted from accept with the TLS handshakes in progress (each within
  `handshake_seconds`, not asyncio's 60 s). At the limit it stops accepting: new clients wait in
  the kernel's listen backlog, costing the operator nothing, until a connection ends (every one
  ends within the header, body and handshake timeouts). That bounds what no body budget sees:
  request headers not yet complete (at most `max_headers` lines of 8 KiB each) and the part of a
  body already buffered when it is refused (~1 MiB over TLS, measured).

A client that keeps a listener's room filled still denies it to others meanwhile — the API
server's reviews (429, or a wait for a connection), or the kubelet's probes — but can no longer
take the operator's memory. Keeping Pods away from these ports is `config/operator-network-policy`'s
job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, NoReturn

from aiohttp import web

from ray_operator.flags import environment_name
from ray_operator.metrics import CONTENT_TYPE, Metrics
from ray_operator.settings import parse_address

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1
"""What a 429 asks the client to wait. The API server's webhook client (client-go) retries a 429
that carries `Retry-After` after that many seconds, within the webhook's timeout (5 s here)."""
ACCEPT_ERROR_PAUSE_SECONDS = 1.0
"""After an accept fails (out of file descriptors, say), how long to wait before the next one."""
ROOM_POLL_SECONDS = 0.05
"""While a listener holds all the connections it may, how often it looks for one that ended."""


@dataclasses.dataclass(frozen=True, slots=True)
class BodyLane:
    """Bodies of at most `max_body_bytes`, held `held_bytes` at most at once, in all."""

    max_body_bytes: int
    held_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReadLimits:
    """How long and how much one listener reads from a client before it gives up on it, and how
    much it holds for all its clients together."""

    header_seconds: float = 10.0
    """From connection open (or the end of the previous response) to complete request headers;
    also how long an idle keep-alive connection stays open. Probes, Prometheus and the API
    server send their headers in one packet: 10 s is generous."""
    body_seconds: float = 10.0
    """To read a request body (the API server gives a webhook at most 30 s for everything)."""
    max_body_bytes: int = 64 * 1024
    """Larger bodies are refused with 413 (probes and metrics take none)."""
    lingering_seconds: float = 1.0
    """After a refusal, how long the rest of an unread body is drained before closing."""
    held_body_bytes: int = 1024 * 1024
    """Request bodies held at once (declared sizes, reserved before reading, released with the
    answer); a body that does not fit gets 429. With `small_bodies`: the larger bodies only."""
    small_bodies: BodyLane | None = None
    """Bodies up to `small_bodies.max_body_bytes` are held in a budget of their own
    (`small_bodies.held_bytes`), which larger bodies never draw on."""
    max_connections: int = 32
    """Connections open at once, TLS handshakes included; more wait to be accepted."""
    handshake_seconds: float = 10.0
    """A TLS client's time from connect to a completed handshake."""
    max_headers: int = 32
    """Header lines in a request (each at most 8 KiB, aiohttp's bound); more: 400. Probes,
    Prometheus and the API server send fewer than a dozen."""

    def __post_init__(self) -> None:
        # Room for fewer bytes than the largest body would refuse every such body, forever.
        lanes = [BodyLane(self.max_body_bytes, self.held_body_bytes)]
        lanes += [self.small_bodies] if self.small_bodies is not None else []
        for lane in lanes:
            if lane.held_bytes < lane.max_body_bytes:
                raise ValueError(f"{lane}: room for fewer bytes than its largest body")


class HeldBodies:
    """The request bodies one listener holds, by declared size, within its `ReadLimits`."""

    def __init__(self, limits: ReadLimits) -> None:
        self._max_body_bytes = limits.max_body_bytes
        self._large = _Budget(limits.held_body_bytes)
        small = limits.small_bodies
        self._small_max_body_bytes = -1 if small is None else small.max_body_bytes
        self._small = _Budget(0 if small is None else small.held_bytes)

    def hold(self, request: web.BaseRequest) -> contextlib.AbstractContextManager[bool]:
        """Reserve room for `request`'s body: a context whose value says whether it fit (the
        room is given back on exit)."""
        budget, size = self._room_for(request)
        return budget.holding(size)

    def _room_for(self, request: web.BaseRequest) -> tuple[_Budget, int]:
        if not request.can_read_body:
            return self._large, 0
        declared = request.content_length
        if declared is None:  # chunked: it may grow up to the cap
            return self._large, self._max_body_bytes
        if declared <= self._small_max_body_bytes:
            return self._small, declared
        return self._large, declared


class _Budget:
    """Bytes reserved out of a capacity; the first refusal of a run of them is logged."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self._refusing = False

    @contextlib.contextmanager
    def holding(self, size: int) -> Iterator[bool]:
        if self.held + size > self.capacity:
            if not self._refusing:
                logger.warning(
                    "refusing request bodies with 429: %d of %d bytes held, %d more asked for",
                    self.held,
                    self.capacity,
                    size,
                )
            self._refusing = True
            yield False
            return
        self._refusing = False
        self.held += size
        try:
            yield True
        finally:
            self.held -= size


def bounded_reads(limits: ReadLimits) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware reading each request's body within `limits` before its handler runs.

    The body is kept by aiohttp (`request.read()` returns it again); a handler never waits on
    the network, so a slow client cannot hold a handler or what it guards. Room for the body is
    reserved (`HeldBodies`) before it is read and given back once the handler has answered.
    """
    held = HeldBodies(limits)

    @web.middleware
    async def read_body_in_time(
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        declared = request.content_length
        if declared is not None and declared > limits.max_body_bytes:
            return _refusal(413, f"request body above {limits.max_body_bytes} bytes\n")
        with held.hold(request) as fits:
            if not fits:
                return _too_many_bodies()
            try:
                async with asyncio.timeout(limits.body_seconds):
                    await request.read()  # 413 (HTTPRequestEntityTooLarge) past client_max_size
            except TimeoutError:
                return _refusal(408, f"request body not received within {limits.body_seconds:g}s\n")
            return await handler(request)

    return read_body_in_time


def _refusal(status: int, text: str) -> web.Response:
    response = web.Response(status=status, text=text)
    response.force_close()  # the connection carries an unread body: never reuse it
    return response


def _too_many_bodies() -> web.Response:
    response = _refusal(429, "too many request bodies at once; retry later\n")
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def bounded_application(limits: ReadLimits) -> web.Application:
    """An Application whose requests are read within `limits` (routes still to be added)."""
    return web.Application(
        client_max_size=limits.max_body_bytes, middlewares=[bounded_reads(limits)]
    )


def bounded_runner(application: web.Application, limits: ReadLimits) -> web.AppRunner:
    """The AppRunner of a bounded listener: header timeout, header count and lingering as in
    `limits` (serve it with a `BoundedSite`)."""
    return web.AppRunner(
        application,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=limits.header_seconds,
        lingering_time=limits.lingering_seconds,
        max_headers=limits.max_headers,
    )


class BoundedSite(web.BaseSite):
    """A TCP site (TLS with `ssl_context`) holding at most `limits.max_connections` connections.

    aiohttp's `TCPSite` leaves accepting to asyncio, which accepts every connection and counts
    none; here `_Acceptor` accepts while there is room, counts, and hands each connection to the
    runner's server (`loop.connect_accepted_socket`, which also bounds the TLS handshake).
    """

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        limits: ReadLimits,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._limits = limits

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # the runner was set up (BaseSite.__init__ checks it)
        # In a thread, as asyncio's create_server resolves: a host name may take a while. (And a
        # port in use found at once, while the watches' first TLS handshakes are in flight, would
        # cut them short: uvloop logs each as a fatal error with its traceback.)
        bind = functools.partial(_listening_sockets, self._host, self._port, backlog=self._backlog)
        sockets = await asyncio.get_running_loop().run_in_executor(None, bind)
        self._server = _Acceptor(
            server, sockets, ssl_context=self._ssl_context, limits=self._limits
        )


def _listening_sockets(host: str, port: int, *, backlog: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for `host` ("": every address, IPv4 and IPv6; a
    name: each address it resolves to) and `port`, as asyncio's `create_server` makes them: an
    address family the host has not enabled is skipped. Blocking (resolves `host`)."""
    addresses = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, protocol, _, address in dict.fromkeys(addresses):
            listener = _listening_socket(family, kind, protocol, address, backlog=backlog)
            if listener is not None:
                sockets.append(listener)
    except OSError:
        for listener in sockets:
            listener.close()
        raise
    if not sockets:
        raise OSError(errno.EADDRNOTAVAIL, f"no address of {host or 'this host'} can be bound")
    return sockets


def _listening_socket(
    family: int, kind: int, protocol: int, address: Any, *, backlog: int
) -> socket.socket | None:
    """One listening socket; None when the family is not enabled here (no IPv6, say)."""
    try:
        listener = socket.socket(family, kind, protocol)
    except OSError:
        return None
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        listener.bind(address)
        listener.listen(backlog)
        listener.setblocking(False)
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRNOTAVAIL:  # the family is not enabled (bpo-30945)
            return None
        raise
    return listener


class _Acceptor(asyncio.AbstractServer):
    """Accepts on `sockets` while fewer than `limits.max_connections` are open (with several
    listening addresses, one more per extra address), and gives each accepted connection to
    `server` (the aiohttp protocol factory), over TLS if asked."""

    def __init__(
        self,
        server: web.Server,
        sockets: list[socket.socket],
        *,
        ssl_context: ssl.SSLContext | None,
        limits: ReadLimits,
    ) -> None:
        self._server = server
        self._sockets = sockets
        self._ssl_context = ssl_context
        self._limits = limits
        self._handshaking = 0
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        for listener in sockets:
            self._spawn(self._accept_forever(listener))

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """The listening sockets (aiohttp's `runner.addresses` reads them)."""
        return tuple(self._sockets)

    def open_connections(self) -> int:
        """Connections in a TLS handshake plus those the server holds (until their handler ends)."""
        return self._handshaking + len(self._server.connections)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for listener in self._sockets:
            listener.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    # Python 3.13 added these two to AbstractServer, whose defaults raise NotImplementedError
    # (mypy for 3.13 calls the class abstract without them); aiohttp closes its connections itself.
    def close_clients(self) -> None:
        """Close every connection the server holds (what asyncio.Server.close_clients does)."""
        for connection in list(self._server.connections):
            if connection.transport is not None:
                connection.transport.close()

    def abort_clients(self) -> None:
        """Abort every connection the server holds, dropping unsent data."""
        for connection in list(self._server.connections):
            if connection.transport is not None:
                connection.transport.abort()

    def is_serving(self) -> bool:
        return any(listener.fileno() != -1 for listener in self._sockets)

    async def start_serving(self) -> None:
        """Serving from construction on."""

    async def serve_forever(self) -> None:
        await asyncio.Event().wait()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_forever(self, listener: socket.socket) -> NoReturn:
        while True:
            await self._room_for_one_more()
            try:
                connection, _ = await self._loop.sock_accept(listener)
            except OSError as error:  # EMFILE and the like: the listener itself is fine
                logger.warning("could not accept a connection: %s", error)
                await asyncio.sleep(ACCEPT_ERROR_PAUSE_SECONDS)
                continue
            # Counted now, not when its task starts: a burst of accepts must see each other.
            self._handshaking += 1
            self._spawn(self._connect(connection))

    async def _room_for_one_more(self) -> None:
        """Return once fewer than `max_connections` are open. Meanwhile new clients wait in the
        kernel's listen backlog, where they cost the operator nothing, and are accepted (in
        order) as connections end: a client that would have got a reset gets a late answer."""
        if self.open_connections() < self._limits.max_connections:
            return
        logger.warning(
            "%d connections open, the most this listener holds: new ones wait to be accepted",
            self.open_connections(),
        )
        # Polled: a connection ends inside aiohttp's server, which tells no one. Only while full.
        while self.open_connections() >= self._limits.max_connections:  # noqa: ASYNC110
            await asyncio.sleep(ROOM_POLL_SECONDS)

    async def _connect(self, connection: socket.socket) -> None:
        """Hand an accepted connection (counted as handshaking) to the server."""
        try:
            await self._loop.connect_accepted_socket(
                self._server,
                connection,
                ssl=self._ssl_context,
                ssl_handshake_timeout=(
                    self._limits.handshake_seconds if self._ssl_context else None
                ),
            )
        except OSError:  # a failed or timed-out handshake (ssl.SSLError is an OSError)
            connection.close()
        finally:
            self._handshaking -= 1


class Heartbeat:
    """Measures event-loop responsiveness for /healthz."""

    def __init__(self, *, interval: float = 1.0, max_lag: float = 10.0) -> None:
        self._interval = interval
        self._max_lag = max_lag
        self._last_tick: float | None = None

    async def run(self) -> NoReturn:
        """Tick forever."""
        loop = asyncio.get_running_loop()
        while True:
            self._last_tick = loop.time()
            await asyncio.sleep(self._interval)

    def lag(self) -> float:
        """Seconds since the last tick beyond the expected interval (0 when healthy)."""
        if self._last_tick is None:
            return 0.0
        return max(0.0, asyncio.get_running_loop().time() - self._last_tick - self._interval)

    def healthy(self) -> bool:
        """Whether the loop kept up recently."""
        return self.lag() <= self._max_lag


def probe_routes(
    *, heartbeat: Heartbeat, synced: Callable[[], Sequence[str]]
) -> list[web.RouteDef]:
    """/healthz and /readyz; `synced()` names the watchers that have not listed yet."""

    async def healthz(_: web.Request) -> web.Response:
        if heartbeat.healthy():
            return web.Response(text="ok\n")
        return web.Response(status=500, text=f"event loop lagging {heartbeat.lag():.1f}s\n")

    async def readyz(_: web.Request) -> web.Response:
        waiting = synced()
        if not waiting:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="caches not synced: " + ", ".join(waiting) + "\n")

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]


MetricsGuard = Callable[[web.Request], Awaitable[web.Response | None]]
"""Decides who may read /metrics: None serves the request, a response refuses it."""


def metrics_routes(metrics: Metrics, *, guard: MetricsGuard | None = None) -> list[web.RouteDef]:
    """/metrics, for every caller or only those `guard` lets through (`secure_metrics`)."""

    async def exposition(request: web.Request) -> web.Response:
        refusal = await guard(request) if guard is not None else None
        if refusal is not None:
            return refusal
        response = web.Response(body=metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    return [web.get("/metrics", exposition)]


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value, or None."""
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class ListenerInUse(OSError):  # noqa: N818
    """A listener's port is taken; the message names the flag and env var that move it."""


async def start_site(site: web.BaseSite, *, host: str, port: int, flags: Sequence[str]) -> None:
    """Start `site`; a port in use becomes `ListenerInUse` naming `flags` (e.g. `--health-addr`)
    and their RAY_OPERATOR_* twins, so the operator stops with one line instead of a traceback."""
    try:
        await site.start()
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        ways = " or ".join(f"{flag} / {environment_name(flag)}" for flag in flags)
        raise ListenerInUse(
            errno.EADDRINUSE,
            f"port {port} on {host or '0.0.0.0'} is in use; choose another with {ways}",
        ) from None


async def serve(
    sites: Sequence[tuple[str, list[web.RouteDef], str]], *, limits: ReadLimits | None = None
) -> NoReturn:
    """Serve each (`host:port`, routes, flag naming the address) (routes of equal addresses
    merged) until cancelled."""
    limits = limits or ReadLimits()
    merged: dict[tuple[str, int], list[web.RouteDef]] = {}
    flags: dict[tuple[str, int], list[str]] = {}
    for address, routes, flag in sites:
        merged.setdefault(parse_address(address), []).extend(routes)
        flags.setdefault(parse_address(address), []).append(flag)
    runners: list[web.AppRunner] = []
    try:
        for (host, port), routes in merged.items():
            app = bounded_application(limits)
            app.add_routes(routes)
            runner = bounded_runner(app, limits)
            await runner.setup()
            runners.append(runner)
            site = BoundedSite(runner, host, port, limits=limits)
            await start_site(site, host=host, port=port, flags=flags[host, port])
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
    finally:
        for runner in runners:
            await runner.cleanup()
