"""Kubernetes Events about our objects, so `kubectl describe` tells the story of each decision.

`EventRecorder.record(obj, reason=..., message=..., type=...)` writes a core/v1 Event about `obj`.
Like client-go's recorder it aggregates cheaply: the same (object, type, reason, message) seen again
within `aggregation_window` bumps the existing Event's `count` and `lastTimestamp` instead of
creating a new one, so a retry loop makes one Event with a growing count, not thousands.

Recording is best effort: a failure is logged and swallowed, because failing (and retrying) a
reconcile just to report on it would turn an Event outage into a hot loop. Messages are capped at
1 KiB and must never contain secrets (the caller's duty: events are world-readable in a namespace).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import KubeError, NotFound
from ray_operator.runtime.kinds import EVENT, OPERATOR_NAME

if TYPE_CHECKING:
    # Annotations only: ray_operator.metrics imports runtime.kinds (a cycle at run time).
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

MAX_MESSAGE_LENGTH = 1024


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
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._instance = instance
        self._window = aggregation_window
        self._remembered = remembered
        # (uid, type, reason, message) -> (event namespace, event name, count, monotonic time)
        self._recent: OrderedDict[tuple[str, str, str, str], tuple[str, str, int, float]] = (
            OrderedDict()
        )

    async def record(
        self, obj: Mapping[str, Any], *, reason: str, message: str, type: EventType = "Normal"
    ) -> None:
        """Record an Event about `obj` (a cached object dict)."""
        message = message[:MAX_MESSAGE_LENGTH]
        metadata = obj["metadata"]
        signature = (str(metadata.get("uid", "")), type, reason, message)
        self._metrics.events_total.labels(type, reason).inc()
        try:
            if not await self._bump_recent(signature):
                await self._create(obj, signature)
        except KubeError as error:
            logger.warning(
                "%s/%s: could not record event %s: %s",
                metadata.get("namespace", ""),
                metadata.get("name"),
                reason,
                error,
            )

    async def _bump_recent(self, signature: tuple[str, str, str, str]) -> bool:
        recent = self._recent.get(signature)
        if recent is None or time.monotonic() - recent[3] > self._window:
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
        self._remember(signature, (namespace, name, count + 1, time.monotonic()))
        return True

    async def _create(self, obj: Mapping[str, Any], signature: tuple[str, str, str, str]) -> None:
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
        self._remember(signature, (namespace, created["metadata"]["name"], 1, time.monotonic()))

    def _remember(
        self, signature: tuple[str, str, str, str], entry: tuple[str, str, int, float]
    ) -> None:
        self._recent[signature] = entry
        self._recent.move_to_end(signature)
        while len(self._recent) > self._remembered:
            self._recent.popitem(last=False)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
