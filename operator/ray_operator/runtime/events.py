"""Kubernetes Events about our objects, so `kubectl describe` tells the story of each decision.

`EventRecorder.record(obj, reason=..., message=..., type=...)` queues a core/v1 Event about `obj`
and returns at once: one background writer sends the queued Events, one request at a time. A
reconcile never waits for its Events. They are the operator's most numerous write after the Pods
(three per new cluster), so they also yield to the writes they tell of: once 32 wait and more
keep being recorded (the operator is busy), the writer sends one a second, and the rest once
recording has paused for a quarter second, or at full speed when three quarters of the backlog
are used up. A thousand clusters created at once thus get their Pods at the API server's pace and
their Events right after; a few Events are written at once. Like client-go's recorder (its
EventCorrelator) the writer aggregates cheaply, in three ways:
- the same (object, type, reason, message) recorded again while still queued is merged into the
  queued one (its count grows), so a retry loop costs no extra request;
- seen again within `aggregation_window` after it was written, it bumps the existing Event's
  `count` and `lastTimestamp` instead of creating a new one;
- once `similar_limit` different messages of one (object, type, reason) were written within the
  window, the next ones all go to a single Event "(combined from similar events): <latest
  message>" whose count and message are bumped: messages that differ by a name cannot flood
  a namespace either.

Recording is best effort, as in client-go (whose broadcaster drops Events when its queue is full):
a failed write is logged and the Event given up, and once `backlog` distinct Events wait, new ones
are dropped and counted (`ray_operator_events_dropped_total`), so an API server that cannot keep up
costs bounded memory. Failing (and retrying) a reconcile just to report on it would turn an Event
outage into a hot loop. Messages are capped at 1 KiB and must never contain secrets (the caller's
duty: events are world-readable in a namespace).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import KubeError, NotFound, NotLeader
from ray_operator.spec.kinds import EVENT, OPERATOR_NAME

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

MAX_MESSAGE_LENGTH = 1024
# client-go's EventAggregator defaults: 10 similar events in 10 minutes, then one combined Event.
DEFAULT_SIMILAR_LIMIT = 10
COMBINED_PREFIX = "(combined from similar events): "
# Distinct Events waiting to be written before new ones are dropped. Each is well under 2 KiB (the
# message is capped at 1 KiB), so a full queue is a few MiB at worst; 1000 clusters created at
# once queue about 3000.
DEFAULT_BACKLOG = 4096
# How long a stopping operator keeps writing queued Events (a shutdown has about 30 s in all).
EVENTS_GRACE_SECONDS = 5.0
# While BUSY_QUEUE or more Events wait and more keep being recorded, one is written per
# BUSY_WRITE_INTERVAL; the rest wait until none was recorded for QUIET_SECONDS (a reconcile
# records its Events within milliseconds). A few waiting Events are written at once.
BUSY_QUEUE = 32
QUIET_SECONDS = 0.25
BUSY_WRITE_INTERVAL = 1.0

_Signature = tuple[str, str, str, str]  # (object uid, type, reason, message)
_Similarity = tuple[str, str, str]  # (object uid, type, reason)


@dataclass(slots=True)
class _Queued:
    """One distinct Event waiting for the writer, with how often it was recorded meanwhile."""

    involved: dict[str, Any]
    """The involvedObject, taken when recorded (the cached object may change meanwhile)."""
    count: int
    first: str
    last: str


class _Similar:
    """Different messages of one (object, type, reason) in the window; the combined Event."""

    __slots__ = ("combined", "messages", "since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.messages = 0
        self.combined: tuple[str, str, int] | None = None  # (namespace, name, count)


class EventRecorder:
    """Queues (and aggregates) core/v1 Events on behalf of this operator replica."""

    def __init__(
        self,
        client: KubeClient,
        *,
        metrics: Metrics,
        instance: str,
        aggregation_window: float = 600.0,
        remembered: int = 4096,
        similar_limit: int = DEFAULT_SIMILAR_LIMIT,
        backlog: int = DEFAULT_BACKLOG,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._instance = instance
        self._window = aggregation_window
        self._remembered = remembered
        self._similar_limit = similar_limit
        self._backlog = backlog
        self._clock = clock
        # (uid, type, reason, message) -> (event namespace, event name, count, monotonic time)
        self._recent: OrderedDict[_Signature, tuple[str, str, int, float]] = OrderedDict()
        self._similar: OrderedDict[_Similarity, _Similar] = OrderedDict()
        self._queue: OrderedDict[_Signature, _Queued] = OrderedDict()
        self._writer: asyncio.Task[None] | None = None
        self._last_record = float("-inf")
        self._last_write = float("-inf")
        self._dropping = False  # warned once per overflow, until the queue has room again

    def record(
        self, obj: Mapping[str, Any], *, reason: str, message: str, type: EventType = "Normal"
    ) -> None:
        """Queue an Event about `obj` (a cached object dict); it is written in the background."""
        message = message[:MAX_MESSAGE_LENGTH]
        metadata = obj["metadata"]
        signature = (str(metadata.get("uid", "")), type, reason, message)
        self._metrics.events_total.labels(type, reason).inc()
        self._last_record = self._clock()
        now = _now()
        queued = self._queue.get(signature)
        if queued is not None:
            queued.count += 1
            queued.last = now
            return
        if len(self._queue) >= self._backlog:
            self._drop(metadata, reason)
            return
        self._queue[signature] = _Queued(_involved_object(obj), 1, now, now)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._write_queued(), name="event-writer"
            )

    async def flush(self, *, within: float | None = None) -> bool:
        """Wait until every queued Event was written (or given up); False if `within` seconds
        passed first."""
        writer = self._writer
        if writer is None or writer.done():
            return True
        done, _ = await asyncio.wait([writer], timeout=within)
        return bool(done)

    async def close(self, *, grace: float) -> None:
        """Write what is queued, for at most `grace` seconds; then give up on the rest."""
        if await self.flush(within=grace):
            return
        left = len(self._queue)
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.wait([self._writer])
        self._queue.clear()
        logger.warning("stopping: %d queued Events were not written within %.0fs", left, grace)

    def _drop(self, metadata: Mapping[str, Any], reason: str) -> None:
        self._metrics.events_dropped_total.inc()
        if not self._dropping:
            self._dropping = True
            logger.warning(
                "%d Events wait to be written; dropping new ones (first: %s about %s/%s) until "
                "the API server catches up",
                len(self._queue),
                reason,
                metadata.get("namespace", ""),
                metadata.get("name"),
            )

    async def _write_queued(self) -> None:
        while self._queue:
            await self._yield_while_busy()
            self._last_write = self._clock()
            # Taken off the queue before the write: a record of the same Event made while it is
            # being written queues anew (and bumps it next), instead of merging into a write
            # already sent.
            signature, queued = self._queue.popitem(last=False)
            self._dropping = False  # there is room again: the next overflow is warned about
            try:
                await self._write(signature, queued)
            except NotLeader as error:
                # No write of this replica can land any more: one line, not one per Event.
                logger.warning("dropping %d queued Events: %s", len(self._queue) + 1, error)
                self._queue.clear()
            except KubeError as error:
                involved = queued.involved
                logger.warning(
                    "%s/%s: could not record event %s: %s",
                    involved.get("namespace") or "",
                    involved.get("name"),
                    signature[2],
                    error,
                )

    async def _yield_while_busy(self) -> None:
        """Return when the next Event may be written: few wait, recording paused, a second since
        the last write, or three quarters of the backlog used (so that yielding never makes the
        queue drop Events)."""
        busy_from = min(BUSY_QUEUE, self._backlog // 4)
        while busy_from <= len(self._queue) < self._backlog * 3 // 4:
            now = self._clock()
            quiet_in = self._last_record + QUIET_SECONDS - now
            due_in = self._last_write + BUSY_WRITE_INTERVAL - now
            if quiet_in <= 0 or due_in <= 0:
                return
            await asyncio.sleep(min(quiet_in, due_in))

    async def _write(self, signature: _Signature, queued: _Queued) -> None:
        if await self._bump_recent(signature, queued):
            return
        similar = self._similar_of(signature)
        similar.messages += 1
        if similar.messages > self._similar_limit:
            await self._record_combined(signature, queued, similar)
        else:
            await self._create(signature, queued)

    def _similar_of(self, signature: _Signature) -> _Similar:
        """The (object, type, reason) entry of `signature`, started afresh after the window."""
        uid, type_, reason, _ = signature
        key = (uid, type_, reason)
        similar = self._similar.get(key)
        if similar is None or self._clock() - similar.since > self._window:
            similar = _Similar(self._clock())
            self._similar[key] = similar
        self._similar.move_to_end(key)
        while len(self._similar) > self._remembered:
            self._similar.popitem(last=False)
        return similar

    async def _record_combined(
        self, signature: _Signature, queued: _Queued, similar: _Similar
    ) -> None:
        """Bump the one combined Event of this (object, type, reason), or create it."""
        uid, type_, reason, message = signature
        combined_message = (COMBINED_PREFIX + message)[:MAX_MESSAGE_LENGTH]
        if similar.combined is not None:
            namespace, name, count = similar.combined
            count += queued.count
            patch = {"count": count, "lastTimestamp": queued.last, "message": combined_message}
            try:
                await self._client.patch(EVENT, name, namespace=namespace, patch=patch)
            except NotFound:
                similar.combined = None
            else:
                similar.combined = (namespace, name, count)
                return
        namespace, name = await self._create((uid, type_, reason, combined_message), queued)
        similar.combined = (namespace, name, queued.count)

    async def _bump_recent(self, signature: _Signature, queued: _Queued) -> bool:
        recent = self._recent.get(signature)
        if recent is None or self._clock() - recent[3] > self._window:
            return False
        namespace, name, count, _ = recent
        count += queued.count
        try:
            await self._client.patch(
                EVENT,
                name,
                namespace=namespace,
                patch={"count": count, "lastTimestamp": queued.last},
            )
        except NotFound:
            return False
        self._remember(signature, (namespace, name, count, self._clock()))
        return True

    async def _create(self, signature: _Signature, queued: _Queued) -> tuple[str, str]:
        """Create a new Event; returns its namespace and name."""
        involved = queued.involved
        namespace = involved.get("namespace") or "default"
        _, type_, reason, message = signature
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                # client-go's naming: <object>.<unique suffix>
                "name": f"{involved['name']}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type_,
            "count": queued.count,
            "firstTimestamp": queued.first,
            "lastTimestamp": queued.last,
            "source": {"component": OPERATOR_NAME},
            "reportingComponent": OPERATOR_NAME,
            "reportingInstance": self._instance,
        }
        created = await self._client.create(EVENT, event, namespace=namespace)
        name = str(created["metadata"]["name"])
        self._remember(signature, (namespace, name, queued.count, self._clock()))
        return namespace, name

    def _remember(self, signature: _Signature, entry: tuple[str, str, int, float]) -> None:
        self._recent[signature] = entry
        self._recent.move_to_end(signature)
        while len(self._recent) > self._remembered:
            self._recent.popitem(last=False)


def _involved_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj["metadata"]
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": metadata["name"],
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
