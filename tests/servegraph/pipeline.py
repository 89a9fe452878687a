"""Asking the pipeline graph (tests/serve_apps/graph_pipeline.py) through the head's Serve proxy."""

from __future__ import annotations

import contextlib

import aiohttp

from tests.controllers.conftest import eventually
from tests.ray_head import RayHead


async def pipeline_answer(head: RayHead) -> str | None:
    """The proxy's answer to `/?x=2` (preprocess → model → postprocess), None while it has none."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{head.serve_url}/?x=2", timeout=aiohttp.ClientTimeout(total=5)) as response,
        ):
            if response.status == 200:
                return await response.text()
    return None


async def wait_for_pipeline_answer(head: RayHead, expected: str, *, within: float) -> None:
    async def check() -> bool:
        return await pipeline_answer(head) == expected

    await eventually(check, within=within, what=f"the pipeline answering {expected!r}")
