"""What keeps a burst of refresh requests cheap: one read of a refresh Secret per `ttl`
(`SecretCache`), and one annotation patch per object per window (`RefreshCoalescer`), however
many requests ask at once.

A burst must cost one fetch: the first request for an object opens a window of
`DEFAULT_COALESCE_SECONDS`, every request in it waits for the one patch written at its end, and
all get the same answer; a request arriving after a window closed opens the next one (it may
announce a newer document, so it is never dropped). A caller that disconnects cancels neither the
read nor the patch the others wait for. The annotation value is `refresh_timestamp`'s.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

DEFAULT_COALESCE_SECONDS = 1.0
SECRET_CACHE_SECONDS = 5.0
"""How long a read refresh Secret is reused: a burst of N events reads it once, and a rotated
secret applies within seconds."""
_MAX_CACHED_SECRETS = 1024


def refresh_timestamp(now: datetime.datetime) -> str:
    """The annotation value: RFC 3339 in UTC with microseconds (sorts as it compares)."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SecretCache:
    """Reads Secrets by name, once per `ttl` and key, however many requests ask at once."""

    def __init__(
        self,
        read: Callable[[str, str], Awaitable[Mapping[str, Any]]],
        *,
        ttl: float = SECRET_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[tuple[str, str], tuple[float, asyncio.Future[Mapping[str, Any]]]] = {}

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The Secret (raises what `read` raises; a failed read is not cached)."""
        key = (namespace, name)
        now = self._clock()
        entry = self._entries.get(key)
        if entry is None or entry[0] <= now or _failed(entry[1]):
            self._forget_expired(now)
            future = asyncio.ensure_future(self._read(namespace, name))
            future.add_done_callback(_retrieve)
            entry = (now + self._ttl, future)
            self._entries[key] = entry
        return await asyncio.shield(entry[1])

    def _forget_expired(self, now: float) -> None:
        for key in [key for key, (expiry, _) in self._entries.items() if expiry <= now]:
            del self._entries[key]
        while len(self._entries) >= _MAX_CACHED_SECRETS:
            del self._entries[next(iter(self._entries))]

    def close(self) -> None:
        """Cancel reads still in flight."""
        for _, future in self._entries.values():
            future.cancel()
        self._entries.clear()


class RefreshCoalescer:
    """One annotation patch per object per window, whatever number of requests asked for it."""

    def __init__(
        self,
        patch: Callable[[str, str, str], Awaitable[None]],
        *,
        window: float = DEFAULT_COALESCE_SECONDS,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._patch = patch
        self._window = window
        self._now = now
        self._pending: dict[tuple[str, str], asyncio.Task[str]] = {}
        self._running: set[asyncio.Task[str]] = set()  # in their window or patching
        self.patches = 0
        """How many patches were sent (for tests and logs)."""

    async def request(self, namespace: str, name: str) -> str:
        """Wait for the patch that covers this request; the annotation value it wrote."""
        key = (namespace, name)
        task = self._pending.get(key)
        if task is None:
            task = asyncio.create_task(
                self._patch_at_window_end(key), name=f"refresh:{namespace}/{name}"
            )
            task.add_done_callback(_retrieve)
            task.add_done_callback(self._running.discard)
            self._pending[key] = task
            self._running.add(task)
        # A caller that disconnects must not cancel the patch the others wait for.
        return await asyncio.shield(task)

    async def _patch_at_window_end(self, key: tuple[str, str]) -> str:
        try:
            await asyncio.sleep(self._window)
        finally:
            # Closed before the patch is sent: a request from now on opens the next window,
            # so an event announcing a newer document is never folded into an older patch.
            del self._pending[key]
        stamp = refresh_timestamp(self._now())
        self.patches += 1
        await self._patch(key[0], key[1], stamp)
        return stamp

    async def close(self) -> None:
        """Cancel the windows still open and the patches under way."""
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


def _failed(future: asyncio.Future[Any]) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)


def _retrieve(future: asyncio.Future[Any]) -> None:
    # Every waiter may have gone (clients disconnected): mark the outcome as seen.
    if not future.cancelled():
        future.exception()
