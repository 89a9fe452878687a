"""The RayClusters of a RayService: the active and the pending one, created, updated in place,
and replaced ones deleted.

The status names both (`activeServiceStatus`, `pendingServiceStatus`); a pending cluster named
there is created when missing, and returned as created, so the same reconcile does not take it
for absent and name another. As in KubeRay, two changes rewrite a cluster in place instead of
replacing it (event `UpdatedRayCluster`): worker groups only appended to the config, and an
active cluster stamped by another KubeRay version. A cluster that is neither active nor pending
is deleted after `rayClusterDeletionDelaySeconds` (60 by default; at once when the RayService is
being deleted); when it may be deleted is remembered per cluster uid, in memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from ray_operator.builders import rayservice as build
from ray_operator.defaults import DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS
from ray_operator.runtime.errors import AlreadyExists, Conflict, KubeError
from ray_operator.spec.kinds import RAY_CLUSTER
from ray_operator.status import rayservice as rules
from ray_operator.status.incremental_upgrade_pass import strip_worker_replicas

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService

    from ray_operator.controllers.rayservice_serve_config import ServeConfigSubmission
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]


class RayServiceClusters:
    """The active, pending and replaced RayClusters of RayServices; one per RayService
    controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        store: StoreView,
        events: EventRecorder,
        serve: ServeConfigSubmission,
        monotonic: Callable[[], float],
    ) -> None:
        self._client = client
        self._store = store
        self._events = events
        self._serve = serve  # what it remembers of a cluster goes with the cluster
        self._monotonic = monotonic
        # Replaced cluster uid -> when it may be deleted (monotonic seconds).
        self._deletion_due: dict[str, float] = {}

    def forget_deletion(self, uid: str) -> None:
        """Drop the deletion time of a cluster deleted otherwise (a suspension)."""
        self._deletion_due.pop(uid, None)

    async def active_and_pending_clusters(
        self,
        rayservice: RayService,
        status: Object,
    ) -> tuple[RayCluster | None, RayCluster | None]:
        """The clusters named in the status; the pending one is created when missing (and
        returned as created, so this reconcile does not take it for absent and name another)."""
        active = self._owned_cluster(rayservice, _cluster_name(status, "activeServiceStatus"))
        pending_name = _cluster_name(status, "pendingServiceStatus")
        pending = self._owned_cluster(rayservice, pending_name)
        if pending_name and pending is None:
            pending = await self.create_cluster(rayservice, pending_name)
        return active, pending

    async def update_clusters_in_place(
        self,
        rayservice: RayService,
        status: Object,
        active: RayCluster | None,
        pending: RayCluster | None,
        *,
        goal_hash: str,
    ) -> tuple[RayCluster | None, RayCluster | None]:
        """Rewrite the active or pending cluster from `rayClusterConfig` where KubeRay would
        rather than replace it (`rules.should_update_cluster`: stamped by another KubeRay version,
        or worker groups only appended); the clusters as they are afterwards, so the decisions
        that follow compare the re-stamped hash."""
        upgrading = rules.upgrade_in_progress(status)
        if rules.should_update_cluster(
            rayservice, active, active=True, upgrade_in_progress=upgrading, goal_hash=goal_hash
        ):
            assert active is not None
            active = await self.update_cluster(rayservice, active, role="active")
        if rules.should_update_cluster(
            rayservice, pending, active=False, upgrade_in_progress=upgrading, goal_hash=goal_hash
        ):
            assert pending is not None
            pending = await self.update_cluster(rayservice, pending, role="pending")
        return active, pending

    async def update_cluster(
        self, rayservice: RayService, cluster: RayCluster, *, role: str
    ) -> RayCluster:
        """One update (PUT, compare-and-swap on the cached resourceVersion) of the cluster. A
        failure raises: deciding on with the old annotations would prepare a new cluster."""
        namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
        try:
            updated = await self._client.replace(
                RAY_CLUSTER, rules.cluster_updated_in_place(rayservice, cluster)
            )
        except Conflict:
            raise  # a stale cache: retried from fresh data, no Event for a routine race
        except KubeError as error:
            self._events.record(
                rayservice,
                reason="FailedToUpdateRayCluster",
                message=f"Failed to update the {role} RayCluster {namespace}/{name}: {error}",
                type="Warning",
            )
            raise
        logger.info("updated the %s RayCluster %s in place", role, name)
        self._events.record(
            rayservice,
            reason="UpdatedRayCluster",
            message=f"Updated the {role} RayCluster {namespace}/{name}",
        )
        return updated

    async def create_cluster(self, rayservice: RayService, name: str) -> RayCluster:
        namespace = rayservice["metadata"]["namespace"]
        cluster = build.build_cluster_for_service(rayservice, name=name)
        cluster = strip_worker_replicas(rayservice, cluster)
        try:
            created = await self._client.create(RAY_CLUSTER, cluster, namespace=namespace)
        except AlreadyExists:
            # Ours, created by an earlier reconcile and not cached yet.
            return cast("RayCluster", cluster)
        logger.info("created RayCluster %s", name)
        self._events.record(
            rayservice,
            reason="CreatedRayCluster",
            message=f"Created the RayCluster {namespace}/{name}",
        )
        return created

    async def delete_replaced_clusters(self, rayservice: RayService, status: Object) -> bool:
        """Delete owned clusters that are neither active nor pending, after the deletion delay
        (at once when the RayService is being deleted). True while some remain."""
        keep = set()
        deleting = bool(rayservice["metadata"].get("deletionTimestamp"))
        if not deleting:
            keep = {
                _cluster_name(status, "activeServiceStatus"),
                _cluster_name(status, "pendingServiceStatus"),
            }
        spec = rayservice.get("spec", {})
        delay = float(
            spec.get("rayClusterDeletionDelaySeconds", DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS)
        )
        remaining = False
        for cluster in self._store.list_owned_by(RAY_CLUSTER, rayservice["metadata"]["uid"]):
            metadata = cluster["metadata"]
            if metadata["name"] in keep or metadata.get("deletionTimestamp"):
                remaining = remaining or metadata["name"] not in keep
                continue
            remaining = True
            due = self._deletion_due.setdefault(
                metadata["uid"], self._monotonic() + (0 if deleting else delay)
            )
            if self._monotonic() < due:
                continue
            await self._client.delete_seen(RAY_CLUSTER, cluster)
            self._deletion_due.pop(metadata["uid"], None)
            self._serve.forget_cluster(rayservice, metadata["name"])
            logger.info("deleted replaced RayCluster %s", metadata["name"])
            self._events.record(
                rayservice,
                reason="DeletedRayCluster",
                message=f"Deleted the RayCluster {metadata['name']}",
            )
        return remaining

    def _owned_cluster(self, rayservice: RayService, name: str) -> RayCluster | None:
        """The cluster of that name when this RayService owns it and it is not being deleted."""
        if not name:
            return None
        cluster = self._store.get(RAY_CLUSTER, rayservice["metadata"]["namespace"], name)
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            return None
        uid = rayservice["metadata"]["uid"]
        refs = cluster["metadata"].get("ownerReferences") or ()
        return cluster if any(ref.get("uid") == uid for ref in refs) else None


def _cluster_name(status: Object, entry: str) -> str:
    return str((status.get(entry) or {}).get("rayClusterName") or "")
