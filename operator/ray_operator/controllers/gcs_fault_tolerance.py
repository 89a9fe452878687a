"""The GCS fault tolerance step of the RayCluster controller: its storage PVC and Redis cleanup.

Embedded GCS FT keeps the GCS's RocksDB on a PersistentVolumeClaim (KubeRay's
`reconcileGCSStoragePVC`): `<cluster>-gcs-pvc` is created once, an existing one is adopted as it
is and never reconfigured (what differs is reported once), its controller reference follows
`deletionPolicy`; a user's own claim (`storage.claimName`) is only looked for, never created,
owned or deleted.

A cluster with GCS FT on Redis carries KubeRay's `REDIS_CLEANUP_FINALIZER`: on delete its Pods go
first, then the cleanup Job runs, then the finalizer goes (`finish_deletion`). In a namespace
being deleted the Job can never be created (the API server refuses anything new there): the
finalizer goes at once and the cluster's keys stay in Redis, rather than holding the namespace in
Terminating until the deletion timeout (KubeRay's #3388).
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.builders.fault_tolerance import (
    build_gcs_storage_pvc,
    external_storage_namespace,
    gcs_storage_claim_name,
    gcs_storage_pvc_adoption_patch,
    gcs_storage_pvc_drift,
)
from ray_operator.builders.redis_cleanup import (
    build_redis_cleanup_job,
    deletion_timeout_s,
    is_redis_cleanup_job,
    job_outcome,
    needs_redis_cleanup,
)
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.controllers.owned_objects import (
    Batch,
    OwnedObjects,
    Wording,
    owned_by,
    terminating,
)
from ray_operator.runtime.controller import Result
from ray_operator.runtime.errors import NamespaceTerminating, NotFound
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import JOB, PERSISTENT_VOLUME_CLAIM, POD, RAY_CLUSTER, ObjectKey
from ray_operator.spec.raycluster import is_gcs_ft_embedded, is_gcs_ft_enabled, spec

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

    from ray_operator.builders.pods import PodOptions
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]

REDIS_CLEANUP_FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"
"""KubeRay's finalizer on Redis-backed GCS FT clusters: the same name, so either operator
finishes a deletion the other began."""
ENABLE_REDIS_CLEANUP_ENV = "ENABLE_GCS_FT_REDIS_CLEANUP"
"""KubeRay's switch: "false" adds no finalizer and runs no cleanup Job (Redis cleaned by hand)."""
# While a head Pod terminates (KubeRay waits 10 s too); its delete event usually comes first.
HEAD_TERMINATION_RECHECK_S = 10.0


GCS_STORAGE_PVC = Wording(noun="GCS storage PVC", reason="PVC", error_separator=", ")
REDIS_CLEANUP_JOB = Wording(
    noun="Redis cleanup Job", reason="RedisCleanupJob", error_separator=", "
)


class GcsFaultTolerance:
    """The GCS storage PVC and the Redis cleanup of a RayCluster; one per RayCluster controller."""

    def __init__(
        self,
        *,
        store: StoreView,
        client: KubeClient,
        events: EventRecorder,
        objects: OwnedObjects,
        pod_options: PodOptions,
        clock: Callable[[], datetime.datetime],
        redis_cleanup: bool | None = None,
    ) -> None:
        self._store = store
        self._client = client
        self._events = events
        self._objects = objects
        self._pod_options = pod_options
        self._now = clock
        # KubeRay's ENABLE_GCS_FT_REDIS_CLEANUP, read the way it reads it: anything but "false".
        self._redis_cleanup = (
            redis_cleanup
            if redis_cleanup is not None
            else os.environ.get(ENABLE_REDIS_CLEANUP_ENV, "").lower() != "false"
        )
        # Per cluster, (cluster uid, claim name) of users' own GCS storage claims seen to exist
        # (not in the label-selected cache, they are read by name until found).
        self._claims_found: dict[ObjectKey, set[tuple[str, str]]] = {}

    def forget(self, key: ObjectKey) -> None:
        """Drop what is remembered about a deleted cluster."""
        self._claims_found.pop(key, None)

    # --- the GCS storage PVC of embedded GCS FT -------------------------------------------------

    async def ensure_gcs_storage_pvc(self, key: ObjectKey, cluster: RayCluster) -> None:
        """The PVC of embedded GCS FT (KubeRay's `reconcileGCSStoragePVC`), created once.

        A `<cluster>-gcs-pvc` that exists is adopted as it is — a retained one keeps its RocksDB
        state for a cluster of the same name — and never reconfigured: what differs is reported.
        Its controller reference follows `deletionPolicy` (owned: deleted with the cluster;
        Retain: not owned, kept). A user's own claim (`storage.claimName`) is never created,
        owned or deleted; a missing one is reported, the head waits for it.
        """
        if not is_gcs_ft_enabled(cluster) or not is_gcs_ft_embedded(spec(cluster)):
            return
        storage = spec(cluster).get("gcsFaultToleranceOptions", {}).get("storage", {})
        if storage.get("claimName"):
            await self.check_user_gcs_storage_claim(key, cluster)
            return
        desired = build_gcs_storage_pvc(cluster)
        name = desired["metadata"]["name"]
        existing = self._objects.cached_by_name(PERSISTENT_VOLUME_CLAIM, key, name)
        if existing is None:
            existing = await self._create_gcs_storage_pvc(key, cluster, desired)
            if existing is None:
                return
        if terminating(existing):
            return  # An earlier incarnation's, going away: its delete event brings us back.
        drift = gcs_storage_pvc_drift(desired, existing)
        if drift:
            self._objects.report_once(
                cluster,
                f"pvc-drift/{existing['metadata'].get('uid')}/{drift}",
                reason="FailedToCreatePVC",
                message=f"GCS storage PVC {key.namespace}/{name} already exists and cannot be "
                f"reconfigured in place ({drift}); delete the PVC to recreate it with the new "
                "settings",
            )
        await self.adopt_gcs_storage_pvc(key, cluster, existing)

    async def _create_gcs_storage_pvc(
        self, key: ObjectKey, cluster: RayCluster, pvc: Object
    ) -> Object | None:
        """Create the PVC (None), or read the one that already has its name (to adopt it)."""
        if await self._objects.create(
            key, cluster, PERSISTENT_VOLUME_CLAIM, pvc, wording=GCS_STORAGE_PVC
        ):
            return None
        try:
            return await self._client.get(
                PERSISTENT_VOLUME_CLAIM, pvc["metadata"]["name"], namespace=key.namespace
            )
        except NotFound:
            # An earlier incarnation's, deleted meanwhile (we may have just deleted it):
            # its delete event brings us back to create ours.
            return None

    async def adopt_gcs_storage_pvc(self, key: ObjectKey, cluster: RayCluster, pvc: Object) -> None:
        """Align the PVC's controller reference with `deletionPolicy` (one patch, or none)."""
        name = pvc["metadata"]["name"]
        try:
            patch = gcs_storage_pvc_adoption_patch(cluster, pvc)
        except ValueError as error:
            self._objects.report_once(
                cluster, f"pvc-owner/{name}", reason="FailedToCreatePVC", message=str(error)
            )
            return
        if patch is None:
            return
        try:
            await self._client.patch(PERSISTENT_VOLUME_CLAIM, name, patch, namespace=key.namespace)
        except NotFound:
            return  # Deleted meanwhile: its event brings us back, and a new one is created.
        logger.info("%s: set the owner of PersistentVolumeClaim %s per deletionPolicy", key, name)

    async def check_user_gcs_storage_claim(self, key: ObjectKey, cluster: RayCluster) -> None:
        """A Warning Event when the user's claim does not exist (read by name until it does)."""
        claim = gcs_storage_claim_name(cluster)
        seen = (cluster["metadata"]["uid"], claim)
        if seen in self._claims_found.get(key, ()):
            return
        try:
            await self._client.get(PERSISTENT_VOLUME_CLAIM, claim, namespace=key.namespace)
        except NotFound:
            self._objects.report_once(
                cluster,
                f"missing-claim/{claim}",
                reason="FailedToCreatePVC",
                message=f"GcsFaultToleranceOptions.Storage.ClaimName {claim!r} not found in "
                f"namespace {key.namespace}; the head Pod will not start until it exists",
            )
            return
        self._claims_found.setdefault(key, set()).add(seen)

    # --- the Redis cleanup of Redis-backed GCS FT -----------------------------------------------

    async def ensure_redis_cleanup_finalizer(self, cluster: RayCluster) -> bool:
        """Add KubeRay's Redis cleanup finalizer to a Redis-backed GCS FT cluster; True when it
        had to be added (as KubeRay, nothing else is done before it is there)."""
        if not self._redis_cleanup or not needs_redis_cleanup(cluster):
            return False
        added = await add_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        if added:
            logger.info("%s: added %s", ObjectKey.of(cluster), REDIS_CLEANUP_FINALIZER)
        return added

    async def finish_deletion(self, key: ObjectKey, cluster: RayCluster) -> Result:
        """The cluster is being deleted: run the Redis cleanup if our finalizer holds it.

        Under another controller's finalizer nothing is done: creation stops (a running
        scale-up stops at its next create) and the Pods go once the object is gone.
        """
        if not has_finalizer(cluster, REDIS_CLEANUP_FINALIZER):
            return Result()
        if not needs_redis_cleanup(cluster):
            # Switched to the embedded backend (KubeRay removes it too) or FT switched off
            # (KubeRay would keep it forever): there is no Redis data of ours to clean.
            await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
            return Result()
        if not self._redis_cleanup:
            return Result()  # ENABLE_GCS_FT_REDIS_CLEANUP=false: cleaned up and removed by hand.
        return await self.clean_up_redis(key, cluster)

    async def clean_up_redis(self, key: ObjectKey, cluster: RayCluster) -> Result:
        """Delete the Pods; once the head is gone run the cleanup Job; when it has finished (or
        the deletion timeout passed) remove the finalizer. The head must be gone first: a GCS
        still writing would leave keys behind the cleanup."""
        batch = Batch()
        live = [p for p in self._objects.observed_pods(key, cluster) if not terminating(p)]
        await self._objects.delete_all(
            key,
            [(POD, pod) for pod in batch.take(live)],
            why="the RayCluster is being deleted (Redis is cleaned up once its head is gone)",
        )
        if batch.work_left:
            return Result(requeue_after=0)
        uid = cluster["metadata"]["uid"]
        heads = [
            p
            for p in self._store.list_for_cluster(POD, key.namespace, key.name)
            if owned_by(p, uid)
            and p["metadata"].get("labels", {}).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        ]
        if heads:
            return Result(requeue_after=HEAD_TERMINATION_RECHECK_S)
        left = self._seconds_until_deletion_timeout(cluster)
        if left <= 0:
            await self.force_remove_redis_cleanup_finalizer(cluster)
            return Result()
        job = next(
            (j for j in self._objects.observed(JOB, key, cluster) if is_redis_cleanup_job(j)),
            None,
        )
        if job is None:
            try:
                await self.create_redis_cleanup_job(key, cluster)
            except NamespaceTerminating:
                await self.give_up_redis_cleanup_in_terminating_namespace(key, cluster)
                return Result()
            return Result(requeue_after=left)
        outcome = job_outcome(job)
        if outcome is None:
            return Result(requeue_after=left)  # The Job's own status change brings us back.
        await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        job_name = f"{key.namespace}/{job['metadata']['name']}"
        if outcome == "Failed":
            annotations = job["metadata"].get("annotations") or {}
            storage = annotations.get(names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION, "")
            self._events.record(
                cluster,
                reason="RedisCleanupJobFailed",
                type="Warning",
                message=f"Redis cleanup Job {job_name} failed; removed the finalizer anyway: "
                f"delete the storage namespace {storage!r} in Redis by hand",
            )
        else:
            logger.info("%s: Redis cleanup Job %s completed; finalizer removed", key, job_name)
        return Result()

    async def create_redis_cleanup_job(self, key: ObjectKey, cluster: RayCluster) -> None:
        """Create `<cluster>-redis-cleanup` (Events as KubeRay's: CreatedRedisCleanupJob, or
        FailedToCreateRedisCleanupJob and a retry with backoff)."""
        job = build_redis_cleanup_job(cluster, options=self._pod_options)
        # A 409: not cached yet (or not labelled as ours to find): looked at again soon.
        await self._objects.create(key, cluster, JOB, job, wording=REDIS_CLEANUP_JOB)

    async def give_up_redis_cleanup_in_terminating_namespace(
        self, key: ObjectKey, cluster: RayCluster
    ) -> None:
        """The namespace is being deleted, so the cleanup Job can never be created: remove the
        finalizer now, not after the deletion timeout, and say so in the log (an Event cannot be
        written there either). The cluster's keys stay in Redis."""
        await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        logger.warning(
            "%s: namespace %s is being deleted, so no Redis cleanup Job can run there; removed "
            "%s: the cluster's keys stay in Redis (storage namespace %r), delete them by hand",
            key,
            key.namespace,
            REDIS_CLEANUP_FINALIZER,
            external_storage_namespace(cluster),
        )

    async def force_remove_redis_cleanup_finalizer(self, cluster: RayCluster) -> None:
        """The cleanup took longer than the deletion timeout: let the deletion finish anyway."""
        await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        namespace = (cluster["metadata"].get("annotations") or {}).get(
            names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION, ""
        )
        self._events.record(
            cluster,
            reason="ForceDeletedStuckCluster",
            type="Warning",
            message=f"Force-removed GCS FT finalizer after {deletion_timeout_s(cluster)}s "
            f"due to Redis cleanup timeout; Redis storage namespace {namespace!r} may need "
            "manual cleanup",
        )

    def _seconds_until_deletion_timeout(self, cluster: RayCluster) -> float:
        requested = datetime.datetime.fromisoformat(
            str(cluster["metadata"]["deletionTimestamp"]).replace("Z", "+00:00")
        )
        elapsed = (self._now() - requested).total_seconds()
        return deletion_timeout_s(cluster) - elapsed
