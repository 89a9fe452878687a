"""A fair, bounded share of something scarce among tenants: fetch slots, lookup threads.

`FairShare(capacity, per_tenant=...)` lets at most `capacity` holders in at once, and at most
`per_tenant` of them for one tenant (a namespace), so one tenant's hung work can never take
every slot. Waiters queue per tenant; when a slot frees, the tenants with an eligible waiter
are served in turn (round robin), each tenant's own waiters in arrival order. A tenant with a
thousand queued fetches therefore delays another tenant's by at most one turn, never by a
thousand.

Single event loop, no threads: `acquire` and `release` run on the loop (a thread that finishes
hands its `release` to the loop with `call_soon_threadsafe`). A slot is handed to the waiter it
wakes (counted before the waiter runs), so no newcomer can overtake a woken waiter; a waiter
cancelled after it was handed a slot gives it back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator


class FairShare:
    """See the module docstring."""

    def __init__(self, capacity: int, *, per_tenant: int) -> None:
        if capacity < 1 or per_tenant < 1:
            raise ValueError("capacity and per_tenant must be at least 1")
        self.capacity = capacity
        self.per_tenant = min(per_tenant, capacity)
        self._held: dict[str, int] = {}
        self._total = 0
        # Insertion order is the serving order: a tenant served goes to the back.
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}

    @property
    def in_use(self) -> int:
        """Slots held now."""
        return self._total

    def held_by(self, tenant: str) -> int:
        """Slots `tenant` holds now."""
        return self._held.get(tenant, 0)

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one slot for `tenant` for the duration of the block."""
        await self.acquire(tenant)
        try:
            yield
        finally:
            self.release(tenant)

    async def acquire(self, tenant: str) -> None:
        """Wait for a slot (cancellable: a cancelled waiter holds nothing)."""
        if self._eligible(tenant) and tenant not in self._waiting:
            self._take(tenant)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, collections.deque()).append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(tenant)  # handed a slot in the same turn it was cancelled
            else:
                self._forget(tenant, future)
            raise

    def release(self, tenant: str) -> None:
        """Give back a slot `tenant` holds, and hand free slots to waiters in turn."""
        held = self._held.get(tenant, 0)
        if held <= 0:
            raise RuntimeError(f"release without a slot held by {tenant!r}")
        if held == 1:
            del self._held[tenant]
        else:
            self._held[tenant] = held - 1
        self._total -= 1
        self._hand_out()

    def _eligible(self, tenant: str) -> bool:
        return self._total < self.capacity and self._held.get(tenant, 0) < self.per_tenant

    def _take(self, tenant: str) -> None:
        self._held[tenant] = self._held.get(tenant, 0) + 1
        self._total += 1

    def _hand_out(self) -> None:
        while self._total < self.capacity:
            tenant = next((t for t in self._waiting if self._eligible(t)), None)
            if tenant is None:
                return
            queue = self._waiting.pop(tenant)
            future = queue.popleft()
            if queue:
                self._waiting[tenant] = queue  # to the back: the others come first
            if future.done():
                continue  # cancelled, its waiter not yet resumed to forget it
            self._take(tenant)
            future.set_result(None)

    def _forget(self, tenant: str, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(future)
        if not queue:
            del self._waiting[tenant]


__all__ = ["FairShare"]
