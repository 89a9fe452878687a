"""Turning cache changes into keys, and keys into reconciles: the dispatcher and the worker pool.

`Workers.dispatch(change)` is what watchers call for every cache change: it asks each controller's
key mapper which keys the change concerns (for an update, of both the old and the new state, so a
relabelled Pod also wakes the cluster it left) and adds them to the queue. The add is urgent — it
runs the key even while the key waits out a failure backoff — only when the change is the
object's own creation, spec change (`metadata.generation`) or deletion; changes of dependents
(Pods, Services) and of the object's status or metadata, mostly the echo of our own writes, leave
a failing key to its backoff (issue 12, finding 9).

`Workers.run()` runs `concurrency` worker coroutines, each taking one key at a time from the
queue — so at most `concurrency` reconciles run at once and one key never runs twice at once —
until the queue shuts down. This loop alone decides what happens after a reconcile:

- `Result()` → forget the key's backoff;
- `Result(requeue_after=s)` → forget its backoff, look again in `s` seconds;
- an exception → log it and retry with per-key exponential backoff (`NotLeader` quietly: the
  leadership supervisor is stopping the workers anyway).

Before a reconcile the loop checks the cache (`CacheSync`): when a kind the controller reads
(its optional `reads` attribute, a tuple of `Kind`s; else every watched kind) is unsynced in the
key's namespace — its watch broke and has not been listed again — the key is parked, holding no
worker, and re-added as soon as that kind syncs. A reconcile never plans from a cache that may
miss objects created just before an API-server crash (issue 12, finding 5).

Each reconcile runs inside `logs.about(key)`, so its log lines start with `namespace/name`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ray_operator.logs import about
from ray_operator.runtime.controller import Controller, Result
from ray_operator.runtime.errors import (
    Conflict,
    NotFound,
    NotLeader,
    ReportedError,
    TransportError,
)
from ray_operator.runtime.queue import WorkQueue
from ray_operator.runtime.store import CacheSync, Change, StoreView
from ray_operator.spec.kinds import Kind, ObjectKey

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)


class Workers:
    """The dispatcher (changes → keys) and the bounded pool of reconcile workers."""

    def __init__(
        self,
        controllers: Sequence[Controller],
        queue: WorkQueue[ObjectKey],
        *,
        metrics: Metrics,
        concurrency: int,
        sync: CacheSync | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.queue = queue
        self._controllers = {controller.kind.key_kind: controller for controller in controllers}
        self._metrics = metrics
        self._concurrency = concurrency
        self._sync = sync
        self._parked: set[ObjectKey] = set()  # waiting for the caches they read to sync
        if sync is not None:
            sync.on_synced(self._release_parked)

    @property
    def parked(self) -> frozenset[ObjectKey]:
        """Keys held back until the caches they read are synced again."""
        return frozenset(self._parked)

    def dispatch(self, change: Change) -> None:
        """Enqueue every key any controller maps this change to."""
        states = [state for state in (change.old, change.new) if state is not None]
        urgent_key = _own_key_if_urgent(change)
        for controller in self._controllers.values():
            try:
                keys = {key for state in states for key in controller.keys_for(change.kind, state)}
            except Exception:
                # A bug in one key mapper must not stop the watcher that feeds every controller.
                logger.exception(
                    "%s: the %s key mapper failed on a %s",
                    change.kind.key(change.latest),
                    controller.kind,
                    change.kind,
                )
                continue
            for key in sorted(keys):
                self.queue.add(key, urgent=key == urgent_key)

    def enqueue_all(self, store: StoreView) -> None:
        """Enqueue every cached object of every controller's kind (leadership start, resync)."""
        for controller in self._controllers.values():
            for obj in store.list(controller.kind):
                self.queue.add(controller.kind.key(obj))

    async def run(self) -> None:
        """Run the workers until the queue shuts down and in-flight reconciles finish."""
        async with asyncio.TaskGroup() as workers:
            for number in range(self._concurrency):
                workers.create_task(self._work(), name=f"worker-{number}")

    async def _work(self) -> None:
        while (key := await self.queue.get()) is not None:
            try:
                with about(key):
                    await self._process(key)
            finally:
                self.queue.done(key)

    async def _process(self, key: ObjectKey) -> None:
        controller = self._controllers.get(key.kind)
        if controller is None:
            logger.error("no controller reconciles kind %s; dropping the key", key.kind)
            return
        if not self._caches_synced(controller, key):
            self._parked.add(key)
            self._metrics.reconcile_total.labels(key.kind, "cache_not_synced").inc()
            logger.debug("held back until the caches it reads are synced again")
            return
        started = time.perf_counter()
        try:
            result = await controller.reconcile(key)
        except NotLeader:
            self._metrics.reconcile_total.labels(key.kind, "not_leader").inc()
            logger.info("stopped: this replica is no longer the leader")
            return
        except Exception as error:
            self._record(key, "error", started)
            self._metrics.reconcile_errors_total.labels(key.kind, type(error).__name__).inc()
            self._metrics.queue_retries_total.inc()
            attempt = self.queue.failures(key) + 1
            delay = self.queue.add_with_backoff(key)
            logger.warning(
                "reconcile failed (attempt %d), retrying in %.2fs: %s: %s",
                attempt,
                delay,
                type(error).__name__,
                error,
                exc_info=not _is_expected(error),
            )
            return
        self.queue.forget(key)
        if result.requeue_after is not None:
            self._record(key, "requeue", started)
            self.queue.add_after(key, result.requeue_after)
            logger.debug("reconciled; looking again in %.1fs", result.requeue_after)
        else:
            self._record(key, "success", started)
            logger.debug("reconciled")

    def _caches_synced(self, controller: Controller, key: ObjectKey) -> bool:
        if self._sync is None:
            return True
        reads: Collection[Kind] | None = getattr(controller, "reads", None)
        return self._sync.all_synced(reads, key.namespace)

    def _release_parked(self) -> None:
        """A part of the cache synced: re-add the parked keys whose caches are all complete."""
        for key in sorted(self._parked):
            controller = self._controllers.get(key.kind)
            if controller is None or self._caches_synced(controller, key):
                self._parked.discard(key)
                self.queue.add(key)

    def _record(self, key: ObjectKey, result: str, started: float) -> None:
        self._metrics.reconcile_total.labels(key.kind, result).inc()
        self._metrics.reconcile_duration_seconds.labels(key.kind).observe(
            time.perf_counter() - started
        )


def _own_key_if_urgent(change: Change) -> ObjectKey | None:
    """The changed object's own key when the change must run it at once even in backoff: it
    was created, deleted (or marked for deletion), or its spec changed (a new generation)."""
    old, new = change.old, change.new
    latest = change.latest
    metadata = latest.get("metadata") or {}
    key = ObjectKey(change.kind.key_kind, metadata.get("namespace", ""), metadata.get("name", ""))
    if old is None or new is None:
        return key
    if _generation(old) != _generation(new):
        return key
    if _deletion_requested(new) and not _deletion_requested(old):
        return key
    return None


def _generation(obj: Mapping[str, Any]) -> object:
    return (obj.get("metadata") or {}).get("generation")


def _deletion_requested(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _is_expected(error: Exception) -> bool:
    """Errors a healthy operator meets (races, API hiccups): no traceback needed in the log."""
    return isinstance(error, Conflict | NotFound | TransportError | ReportedError)


__all__ = ["Result", "Workers"]
