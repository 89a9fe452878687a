"""Waiting on a condition instead of sleeping a fixed time (asyncio flavour)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(
    condition: Callable[[], object | Awaitable[object]], *, within: float = 10.0, poll: float = 0.02
) -> None:
    """Return once `condition()` (sync or async) is truthy; TimeoutError after `within` s."""
    async with asyncio.timeout(within):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await asyncio.sleep(poll)
