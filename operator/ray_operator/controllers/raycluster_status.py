"""Writing a RayCluster's status: only when it changed, progress at most once a second.

`status/raycluster.py` computes the status (pure); this step compares it with the last one
(`status_changed` ignores timestamps, as KubeRay's `InconsistentRayClusterStatus`), writes the
status subresource, and tells in one Event when the reasons Pods wait for changed. Until the watch
delivers the version our write produced, the cache shows the older status: the status we wrote is
the baseline meanwhile, so the same status is not written twice.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.controllers.owned_objects import OwnedObjects
from ray_operator.runtime.errors import NotFound
from ray_operator.spec.kinds import RAY_CLUSTER, SERVICE, ObjectKey
from ray_operator.status import raycluster as cluster_status
from ray_operator.status import waiting

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder

logger = logging.getLogger(__name__)

# Status changes that only move counters or addresses are written at most this often per
# cluster: while Pods come up one by one they would otherwise cost one write each.
MIN_SECONDS_BETWEEN_PROGRESS_WRITES = 1.0


class ClusterStatusWriter:
    """Computes and writes RayClusters' status; one per RayCluster controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        events: EventRecorder,
        objects: OwnedObjects,
        clock: Callable[[], datetime.datetime],
        monotonic: Callable[[], float],
    ) -> None:
        self._client = client
        self._events = events
        self._objects = objects
        self._now = clock
        self._monotonic = monotonic
        self._last_status_write: dict[ObjectKey, float] = {}
        # The status we last wrote, per cluster, with the resourceVersion our write produced:
        # until the watch delivers that version the cache shows the older status, and comparing
        # with it would write the same status twice.
        self._written_status: dict[ObjectKey, tuple[str, Mapping[str, Any]]] = {}

    def forget(self, key: ObjectKey) -> None:
        """Drop what is remembered about a deleted cluster."""
        self._written_status.pop(key, None)
        self._last_status_write.pop(key, None)

    async def update_status(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        *,
        failure: cluster_status.ReplicaFailure | None = None,
        invalid_spec: str | None = None,
    ) -> float | None:
        """Write the status subresource when something other than timestamps changed.

        Progress-only changes (counters, addresses) within a second of the previous write are
        held back; the returned delay says when to look again (None: nothing held back).
        """
        new = cluster_status.compute_status(
            cluster,
            pods=self._objects.observed_pods(key, cluster),
            services=self._objects.observed(SERVICE, key, cluster),
            now=self._now(),
            failure=failure,
            invalid_spec=invalid_spec,
        )
        old = self._status_baseline(key, cluster)
        if not cluster_status.status_changed(old, new):
            return None
        since_last = self._monotonic() - self._last_status_write.get(key, float("-inf"))
        if since_last < MIN_SECONDS_BETWEEN_PROGRESS_WRITES and not _is_news(old, new):
            return MIN_SECONDS_BETWEEN_PROGRESS_WRITES - since_last
        # A merge patch keeps fields it does not mention: name the vanished ones as null.
        patch = {**{k: None for k in old if k not in new}, **new}
        try:
            written = await self._client.patch_status(
                RAY_CLUSTER, key.name, {"status": patch}, namespace=key.namespace
            )
        except NotFound:
            return None
        self._last_status_write[key] = self._monotonic()
        self._written_status[key] = (
            written["metadata"]["resourceVersion"],
            written.get("status") or {},
        )
        if old.get("state") != new.get("state") and new.get("state"):
            logger.info("%s: state %s -> %s", key, old.get("state") or "(none)", new["state"])
        self.tell_why_pods_wait(cluster, old, new)
        return None

    def tell_why_pods_wait(
        self, cluster: RayCluster, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> None:
        """One Event when the PodsWaiting reasons change (told by the status we just wrote,
        so not on every reconcile, nor once per Pod)."""
        told = waiting.news(old.get("conditions") or (), new.get("conditions") or ())
        if told is not None:
            self._events.record(cluster, reason=told.reason, message=told.message, type=told.type)

    def _status_baseline(self, key: ObjectKey, cluster: RayCluster) -> Mapping[str, Any]:
        """The status to compare with: ours until the cache has caught up with our last write."""
        cached: Mapping[str, Any] = cluster.get("status") or {}
        if key not in self._written_status:
            return cached
        written_version, written = self._written_status[key]
        if cluster["metadata"].get("resourceVersion") == written_version:
            del self._written_status[key]
            return cached
        return written


def _is_news(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a status change is one a person or a script waits for (not mere progress)."""

    def headline(status: Mapping[str, Any]) -> tuple[Any, ...]:
        conditions = sorted(
            (c.get("type"), c.get("status"), c.get("reason"))
            for c in status.get("conditions") or ()
        )
        return status.get("state"), status.get("observedGeneration"), conditions

    return headline(old) != headline(new)
