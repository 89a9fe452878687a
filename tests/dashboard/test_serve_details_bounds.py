"""`serve_details` against a hostile dashboard: the answer's size and depth are bounded.

The Serve details answer grows with the user's config and the number of replicas, and a
cluster's head runs the user's image: a loopback server stands in for a head that answers too
much or too deeply nested JSON (no real Ray would).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from ray_operator.dashboard.client import DashboardClient, DashboardEndpoint, DashboardOptions
from ray_operator.spec.dashboard_errors import DashboardBadResponse

LIMIT = 64 * 1024


@pytest.fixture
async def hostile_dashboard() -> AsyncIterator[dict[str, bytes]]:
    """A loopback server answering `GET /api/serve/applications/` with `answer["body"]`."""
    answer = {"body": b"{}"}

    async def serve_details(_: web.Request) -> web.Response:
        return web.Response(body=answer["body"], content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/serve/applications/", serve_details)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    answer["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}".encode()
    try:
        yield answer
    finally:
        await runner.cleanup()


async def details_from(answer: dict[str, bytes]) -> object:
    endpoint = DashboardEndpoint(answer["url"].decode())
    options = DashboardOptions(max_response_bytes=LIMIT)
    async with DashboardClient(endpoint, options=options) as ray:
        return await ray.serve_details()


async def test_a_serve_details_answer_over_the_size_limit_is_refused(
    hostile_dashboard: dict[str, bytes],
) -> None:
    padding = b"x" * LIMIT
    hostile_dashboard["body"] = b'{"applications": {}, "pad": "' + padding + b'"}'
    with pytest.raises(DashboardBadResponse, match="exceeds"):
        await details_from(hostile_dashboard)


async def test_a_serve_details_answer_nested_too_deeply_is_refused(
    hostile_dashboard: dict[str, bytes],
) -> None:
    depth = 30_000  # within the size limit, beyond Python's recursion limit
    hostile_dashboard["body"] = b'{"applications": {"a": ' + b"[" * depth + b"]" * depth + b"}}"
    with pytest.raises(DashboardBadResponse, match="nested too deeply"):
        await details_from(hostile_dashboard)
