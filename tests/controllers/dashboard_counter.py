"""A loopback reverse proxy in front of the real Ray dashboard that records every request.

The operator under test is pointed at the proxy (a `StaticResolver` entry) instead of the head:
every request it makes reaches the real Ray dashboard unchanged (method, path, query, body, the
auth headers), and the proxy keeps `(method, path)` of each, so a test can prove what the
operator did NOT ask, e.g. that it never POSTed a job submission. Nothing is answered by the proxy,
except a failure status while a test sets `failing_with` (a dashboard behind a broken proxy).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.ray_head import RayHead

FORWARDED_HEADERS = ("accept", "content-type", "authorization", "x-ray-authorization")


class CountingDashboard:
    """Forwards to `upstream` (the head's dashboard URL) and records each request."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, in arrival order."""
        self.failing_with: int | None = None
        """An HTTP status to answer with instead of forwarding (a broken dashboard); None:
        forward."""

    def count(self, method: str, path_prefix: str) -> int:
        """How many `method` requests had a path starting with `path_prefix`."""
        return sum(1 for m, path in self.requests if m == method and path.startswith(path_prefix))

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        self.requests.append((request.method, request.path))
        if self.failing_with is not None:
            return web.Response(status=self.failing_with, text="failing on purpose")
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        async with self._session.request(
            request.method,
            self._upstream + request.path_qs,
            data=await request.read() or None,
            headers=headers,
        ) as upstream:
            body = await upstream.read()
            content_type = upstream.headers.get("Content-Type", "application/json")
            return web.Response(
                status=upstream.status, body=body, headers={"Content-Type": content_type}
            )


@pytest.fixture
async def counting_dashboard(ray_head: RayHead) -> AsyncIterator[CountingDashboard]:
    """A counting proxy in front of the run's real Ray head."""
    proxy = CountingDashboard(ray_head.dashboard_url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
