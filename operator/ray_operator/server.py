"""The HTTP side of every replica (leader or not): probes and metrics, on aiohttp.

- `/healthz` (liveness): 200 while the event loop is responsive — a heartbeat task ticks every
  `interval`; if its last tick is older than `max_lag` the loop is starved or blocked and the
  kubelet should restart us. (A fully blocked loop cannot answer at all, which fails the probe too.)
- `/readyz` (readiness): 200 once every watcher has listed its kind (the caches are synced).
- `/metrics`: the Prometheus text exposition of our registry; with `--metrics-auth=kubernetes`
  (the default off loopback) served by `secure_metrics` instead, over HTTPS, to authorized callers.

Probes and metrics may share one address or use two (`--health-addr`, `--metrics-addr`). The
admission webhooks (TLS, `--webhook-port`) are served by `webhooks/component.py`, with the same
read limits.

Every listener bounds what one client can hold (issue 12: slow-drip connections were kept forever):
`ReadLimits` gives the request headers `header_seconds` from the moment the connection opens or
the previous response ends (aiohttp's keep-alive timer, which it arms at connection start and
which closes a connection whose handler is still waiting for a complete request), the body
`body_seconds` and `max_body_bytes` (`bounded_reads`, a middleware that reads the body before any
handler: 408 past the time, 413 past the size), and a refused body `lingering_seconds` of grace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn

from aiohttp import web

from ray_operator.metrics import CONTENT_TYPE, Metrics
from ray_operator.settings import ENV_PREFIX, parse_address


@dataclasses.dataclass(frozen=True, slots=True)
class ReadLimits:
    """How long and how much one listener reads from a client before it gives up on it."""

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


def bounded_reads(limits: ReadLimits) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware reading each request's body within `limits` before its handler runs.

    The body is kept by aiohttp (`request.read()` returns it again); a handler never waits on
    the network, so a slow client cannot hold a handler or what it guards.
    """

    @web.middleware
    async def read_body_in_time(
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        declared = request.content_length
        if declared is not None and declared > limits.max_body_bytes:
            return _refusal(413, f"request body above {limits.max_body_bytes} bytes\n")
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


def bounded_application(limits: ReadLimits) -> web.Application:
    """An Application whose requests are read within `limits` (routes still to be added)."""
    return web.Application(
        client_max_size=limits.max_body_bytes, middlewares=[bounded_reads(limits)]
    )


def bounded_runner(application: web.Application, limits: ReadLimits) -> web.AppRunner:
    """The AppRunner of a bounded listener: header timeout and lingering as in `limits`."""
    return web.AppRunner(
        application,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=limits.header_seconds,
        lingering_time=limits.lingering_seconds,
    )


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


async def start_site(site: web.TCPSite, *, host: str, port: int, flags: Sequence[str]) -> None:
    """Start `site`; a port in use becomes `ListenerInUse` naming `flags` (e.g. `--health-addr`)
    and their RAY_OPERATOR_* twins, so the operator stops with one line instead of a traceback."""
    try:
        await site.start()
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        ways = " or ".join(
            f"{flag} / {ENV_PREFIX}{flag.lstrip('-').upper().replace('-', '_')}" for flag in flags
        )
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
            site = web.TCPSite(runner, host, port)
            await start_site(site, host=host, port=port, flags=flags[host, port])
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
    finally:
        for runner in runners:
            await runner.cleanup()
