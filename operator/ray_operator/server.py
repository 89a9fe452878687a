"""The HTTP side of every replica (leader or not): probes and metrics, on aiohttp.

- `/healthz` (liveness): 200 while the event loop is responsive — a heartbeat task ticks every
  `interval`; if its last tick is older than `max_lag` the loop is starved or blocked and the
  kubelet should restart us. (A fully blocked loop cannot answer at all, which fails the probe too.)
- `/readyz` (readiness): 200 once every watcher has listed its kind (the caches are synced).
- `/metrics`: the Prometheus text exposition of our registry.

Probes and metrics may share one address or use two (`--health-addr`, `--metrics-addr`). Admission
webhooks (TLS, `--webhook-port`) will be served from here too; they are not wired yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import NoReturn

from aiohttp import web

from ray_operator.metrics import CONTENT_TYPE, Metrics
from ray_operator.settings import parse_address


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


def metrics_routes(metrics: Metrics) -> list[web.RouteDef]:
    """/metrics."""

    async def exposition(_: web.Request) -> web.Response:
        response = web.Response(body=metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    return [web.get("/metrics", exposition)]


async def serve(sites: Sequence[tuple[str, list[web.RouteDef]]]) -> NoReturn:
    """Serve each (`host:port`, routes) (routes of equal addresses merged) until cancelled."""
    merged: dict[tuple[str, int], list[web.RouteDef]] = {}
    for address, routes in sites:
        merged.setdefault(parse_address(address), []).extend(routes)
    runners: list[web.AppRunner] = []
    try:
        for (host, port), routes in merged.items():
            app = web.Application()
            app.add_routes(routes)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port).start()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
    finally:
        for runner in runners:
            await runner.cleanup()
