"""The work queue: keys to reconcile, following client-go's keyed model.

- A key is in the queue at most once: a burst of adds for one key coalesces into one reconcile.
- A key is handed to one worker at a time. A key added while it is being processed is marked
  dirty and handed out again once that worker calls `done` — so the change that arrived during the
  reconcile is never lost, yet two reconciles of one object never overlap.
- `add_after` re-adds a key after a delay (a controller's `requeue_after`, or a retry); of several
  pending delays for one key the earliest wins.
- `add_with_backoff` retries a failed key after a per-key exponential delay; `forget` resets it
  after a success.
- While a key waits out its failure backoff, a plain `add` does not run it early: the pending
  retry covers it (it reads the cache as it is then). Without this the events of the operator's
  own writes — a Pod it created, a status it wrote — re-ran a failing key at once, retrying past
  its backoff (issue 12, finding 9). `add(key, urgent=True)` runs it now anyway: the dispatcher
  uses it for a change of the object's spec or its deletion, so a user who fixes a spec does not
  wait out a 5-minute backoff. The same holds for a failed reconcile: adds that arrived during it
  are dropped in favour of the retry, unless one of them was urgent.

Time comes from the event loop (`loop.call_later`), so tests drive it with a virtual clock; only
the wait a key spent queued (a metric, `ray_operator_workqueue_queue_duration_seconds`) is
measured on the process's monotonic clock, since `add` may be called with no loop running.
The queue holds no reconcile logic; `workers.py` decides what to do with each key.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Per-key exponential backoff: `base * 2**failures`, at most `cap` seconds."""

    base: float = 0.1
    """Delay after the first failure, in seconds."""
    cap: float = 300.0
    """The longest delay, in seconds (client-go uses 1000; Ray clusters recover faster)."""

    def delay(self, failures: int) -> float:
        """The delay before retry number `failures + 1`."""
        return min(self.cap, self.base * 2.0 ** min(failures, 64))


class WorkQueue(Generic[K]):
    """De-duplicating, per-key serialising queue with delayed adds and per-key backoff."""

    def __init__(self, *, backoff: Backoff | None = None, metrics: Metrics | None = None) -> None:
        self._backoff = backoff or Backoff()
        self._metrics = metrics
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # waiting to be processed (queued, or re-added in flight)
        self._processing: set[K] = set()
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._failures: dict[K, int] = {}
        self._urgent: set[K] = set()  # in flight, and re-added urgently meanwhile
        self._queued_at: dict[K, float] = {}  # monotonic time each queued key was appended
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._shutting_down = False

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        """Whether `shut_down` was called."""
        return self._shutting_down

    @property
    def in_flight(self) -> int:
        """How many keys workers are processing now."""
        return len(self._processing)

    def add(self, key: K, *, urgent: bool = False) -> None:
        """Queue `key` unless it is queued already; if it is in flight, run it once more after.

        A key waiting out its failure backoff is left to its retry, unless `urgent`.
        """
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.queue_adds_total.inc()
        if urgent and key in self._processing:
            self._urgent.add(key)
        elif not urgent and self.backing_off(key):
            return
        self._enqueue(key)

    def backing_off(self, key: K) -> bool:
        """Whether `key` failed and waits for its retry timer."""
        return key in self._failures and key in self._timers

    def _enqueue(self, key: K) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._append(key)
        self._changed()

    def _append(self, key: K) -> None:
        self._queue.append(key)
        self._queued_at[key] = time.monotonic()
        self._wakeup.set()

    def add_after(self, key: K, delay: float) -> None:
        """Add `key` after `delay` seconds (now if `delay` <= 0); the earliest pending add wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self._enqueue(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending.when() <= when:
                return
            pending.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def add_with_backoff(self, key: K) -> float:
        """Retry `key` after its next backoff delay; returns that delay.

        Called for a key in flight, it also drops the re-adds that came meanwhile (the retry covers
        them), unless one was urgent.
        """
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if key in self._processing and key not in self._urgent:
            self._dirty.discard(key)
        delay = self._backoff.delay(failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset the backoff of `key` (after a successful reconcile)."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """How many times in a row `key` failed."""
        return self._failures.get(key, 0)

    async def get(self) -> K | None:
        """The next key to process (marking it in flight), or None once the queue shuts down."""
        while not self._queue:
            if self._shutting_down:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()
        if self._shutting_down:
            return None
        key = self._queue.popleft()
        queued_at = self._queued_at.pop(key, None)
        if self._metrics is not None and queued_at is not None:
            self._metrics.queue_wait_seconds.observe(time.monotonic() - queued_at)
        self._dirty.discard(key)
        self._processing.add(key)
        self._idle.clear()
        self._changed()
        return key

    def done(self, key: K) -> None:
        """Mark `key` processed; if it was re-added meanwhile, queue it again."""
        self._processing.discard(key)
        self._urgent.discard(key)
        if key in self._dirty and not self._shutting_down:
            self._append(key)
        if not self._processing:
            self._idle.set()
        self._changed()

    def shut_down(self) -> None:
        """Stop handing out keys: `get` returns None; adds and pending delays are dropped."""
        self._shutting_down = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._wakeup.set()

    async def wait_idle(self) -> None:
        """Wait until no key is in flight (used to drain on shutdown)."""
        await self._idle.wait()

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        if self._metrics is not None:
            self._metrics.queue_adds_total.inc()
        self._enqueue(key)

    def _changed(self) -> None:
        if self._metrics is not None:
            self._metrics.queue_depth.set(len(self._queue))
            self._metrics.queue_in_flight.set(len(self._processing))
