"""Kubernetes Events about our objects, so `kubectl describe` tells the story of each decision.

`EventRecorder.record(obj, reason=..., message=..., type=...)` writes a core/v1 Event about `obj`.
Like client-go's recorder (its EventCorrelator) it aggregates cheaply, in two ways:
- the same (object, type, reason, message) seen again within `aggregation_window` bumps the
  existing Event's `count` and `lastTimestamp` instead of creating a new one, so a retry loop
  makes one Event with a growing count, not thousands;
- once `similar_limit` different messages of one (object, type, reason) were recorded within the
  window, the next ones all go to a single Event "(combined from similar events): <latest
  message>" whose count and message are bumped: messages that differ by a name cannot flood
  a namespace either.

Recording is best effort: a failure is logged and swallowed, because failing (and retrying) a
reconcile just to report on it would turn an Event outage into a hot loop. Messages are capped at
1 KiB and must never contain secrets (the caller's duty: events are world-readable in a namespace).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import KubeError, NotFound
from ray_operator.spec.kinds import EVENT, OPERATOR_NAME

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

MAX_MESSAGE_LENGTH = 1024
# client-go's EventAggregator defaults: 10 similar events in 10 minutes, then one combined Event.
DEFAULT_SIMILAR_LIMIT = 10
COMBINED_PREFIX = "(combined from similar events): "

_Signature = tuple[str, str, str, str]  # (object uid, type, reason, message)
_Similarity = tuple[str, str, str]  # (object uid, type, reason)


class _Similar:
    """Different messages of one (object, type, reason) in the window; the combined Event."""

    __slots__ = ("combined", "messages", "since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.messages = 0
        self.combined: tuple[str, str, int] | None = None  # (namespace, name, count)


class EventRecorder:
    """Writes (and aggregates) core/v1 Events on behalf of this operator replica."""

    def __init__(
        self,
        client: KubeClient,
        *,
        metrics: Metrics,
        instance: str,
        aggregation_window: float = 600.0,
        remembered: int = 4096,
        similar_limit: int = DEFAULT_SIMILAR_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._instance = instance
        self._window = aggregation_window
        self._remembered = remembered
        self._similar_limit = similar_limit
        self._clock = clock
        # (uid, type, reason, message) -> (event namespace, event name, count, monotonic time)
        self._recent: OrderedDict[_Signature, tuple[str, str, int, float]] = OrderedDict()
        self._similar: OrderedDict[_Similarity, _Similar] = OrderedDict()
        # Held only while a record is under way: a lock no one holds is freed with its entry.
        self._locks: weakref.WeakValueDictionary[_Similarity, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def record(
        self, obj: Mapping[str, Any], *, reason: str, message: str, type: EventType = "Normal"
    ) -> None:
        """Record an Event about `obj` (a cached object dict)."""
        message = message[:MAX_MESSAGE_LENGTH]
        metadata = obj["metadata"]
        signature = (str(metadata.get("uid", "")), type, reason, message)
        self._metrics.events_total.labels(type, reason).inc()
        # Concurrent records of one (object, type, reason) — the failed creates of one batch —
        # take turns: otherwise each would find nothing to bump and create its own Event.
        similarity = signature[:3]
        lock = self._locks.get(similarity)
        if lock is None:
            lock = self._locks[similarity] = asyncio.Lock()
        try:
            async with lock:
                await self._record_in_turn(obj, signature)
        except KubeError as error:
            logger.warning(
                "%s/%s: could not record event %s: %s",
                metadata.get("namespace", ""),
                metadata.get("name"),
                reason,
                error,
            )

    async def _record_in_turn(self, obj: Mapping[str, Any], signature: _Signature) -> None:
        if await self._bump_recent(signature):
            return
        similar = self._similar_of(signature)
        similar.messages += 1
        if similar.messages > self._similar_limit:
            await self._record_combined(obj, signature, similar)
        else:
            await self._create(obj, signature)

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
        self, obj: Mapping[str, Any], signature: _Signature, similar: _Similar
    ) -> None:
        """Bump the one combined Event of this (object, type, reason), or create it."""
        uid, type_, reason, message = signature
        combined_message = (COMBINED_PREFIX + message)[:MAX_MESSAGE_LENGTH]
        if similar.combined is not None:
            namespace, name, count = similar.combined
            patch = {"count": count + 1, "lastTimestamp": _now(), "message": combined_message}
            try:
                await self._client.patch(EVENT, name, namespace=namespace, patch=patch)
            except NotFound:
                similar.combined = None
            else:
                similar.combined = (namespace, name, count + 1)
                return
        namespace, name = await self._create(obj, (uid, type_, reason, combined_message))
        similar.combined = (namespace, name, 1)

    async def _bump_recent(self, signature: _Signature) -> bool:
        recent = self._recent.get(signature)
        if recent is None or self._clock() - recent[3] > self._window:
            return False
        namespace, name, count, _ = recent
        try:
            await self._client.patch(
                EVENT,
                name,
                namespace=namespace,
                patch={"count": count + 1, "lastTimestamp": _now()},
            )
        except NotFound:
            return False
        self._remember(signature, (namespace, name, count + 1, self._clock()))
        return True

    async def _create(self, obj: Mapping[str, Any], signature: _Signature) -> tuple[str, str]:
        """Create a new Event; returns its namespace and name."""
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") or "default"
        _, type_, reason, message = signature
        now = _now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                # client-go's naming: <object>.<unique suffix>
                "name": f"{metadata['name']}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": metadata["name"],
                "namespace": metadata.get("namespace"),
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": OPERATOR_NAME},
            "reportingComponent": OPERATOR_NAME,
            "reportingInstance": self._instance,
        }
        created = await self._client.create(EVENT, event, namespace=namespace)
        name = str(created["metadata"]["name"])
        self._remember(signature, (namespace, name, 1, self._clock()))
        return namespace, name

    def _remember(self, signature: _Signature, entry: tuple[str, str, int, float]) -> None:
        self._recent[signature] = entry
        self._recent.move_to_end(signature)
        while len(self._recent) > self._remembered:
            self._recent.popitem(last=False)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
