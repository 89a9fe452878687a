"""What a RayJob leaves behind, cleaned up: the run's cluster and submitter when it is suspended
or retried, `deletionStrategy` (or `shutdownAfterJobFinishes` after its TTL) once it finished, and
everything it made when the RayJob itself is deleted (finalizer `ray.io/rayjob-finalizer`).

Deletes are explicit, rather than left to the garbage collector, and a step looks again until the
cache shows what it deleted gone: a lost delete must not leak a cluster.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.controllers.rayjob_step import JSON, REQUEUE_SECONDS, Step
from ray_operator.runtime.controller import Result
from ray_operator.runtime.errors import Conflict, NotFound
from ray_operator.spec.dashboard_models import is_job_terminal
from ray_operator.spec.kinds import RAY_CLUSTER, RAY_JOB
from ray_operator.status import rayjob as rules

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayJob

    from ray_operator.controllers.batch_scheduling import BatchScheduling
    from ray_operator.controllers.rayjob_dashboard import RayJobDashboard
    from ray_operator.controllers.rayjob_objects import RayJobObjects
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

FINALIZER = "ray.io/rayjob-finalizer"


class RayJobCleanup:
    """Releases, deletes and finalizes what RayJobs made; one per RayJob controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        events: EventRecorder,
        store: StoreView,
        objects: RayJobObjects,
        dashboard: RayJobDashboard,
        batch_scheduling: BatchScheduling,
        clock: Callable[[], datetime.datetime],
    ) -> None:
        self._client = client
        self._events = events
        self._store = store
        self._objects = objects
        self._dashboard = dashboard
        self._batch_scheduling = batch_scheduling
        self._now = clock

    async def ensure_finalizer(self, rayjob: RayJob) -> bool:
        """Add our finalizer; True when it had to be added (look again once it is cached)."""
        return await add_finalizer(self._client, RAY_JOB, rayjob, FINALIZER)

    async def release_resources(self, rayjob: RayJob, status: JSON) -> Step:
        """Suspending/Retrying: delete the cluster and the submitter; once gone, reset the run."""
        cluster_gone = await self._objects.delete_cluster(rayjob, status)
        submitter_gone = await self._objects.delete_submitter_job(rayjob)
        if not (cluster_gone and submitter_gone):
            return Step(None, requeue_after=1.0)
        await self._batch_scheduling.release_for_job(rayjob, status)
        return Step(rules.released(status), requeue_after=0.5)

    async def clean_up_finished_run(self, rayjob: RayJob, status: JSON) -> Step:
        """Complete/Failed: carry out `deletionStrategy`, or with `shutdownAfterJobFinishes`
        delete the cluster after the TTL (KubeRay's order: the strategy wins when set)."""
        await self._batch_scheduling.release_for_job(rayjob, status)
        cluster = self._objects.cluster(rayjob, status)
        plan = rules.deletion_plan(rayjob, status, cluster=cluster, now=self._now())
        if plan is not None:
            return await self.carry_out_deletion(rayjob, status, plan, cluster=cluster)
        due = rules.shutdown_due_at(rayjob, status)
        if due is None:
            return Step(None, None)
        wait = (due - self._now()).total_seconds()
        if wait > 0:
            return Step(None, requeue_after=wait + 0.1)
        if not await self._objects.delete_cluster(rayjob, status):
            # Look again until the cache shows it gone: a lost delete must not leak a cluster.
            return Step(None, requeue_after=REQUEUE_SECONDS)
        return Step(None, None)

    async def carry_out_deletion(
        self, rayjob: RayJob, status: JSON, plan: rules.DeletionPlan, *, cluster: RayCluster | None
    ) -> Step:
        """One deletion policy per pass (the most destructive one due), then look again when
        the next rule falls due; the caches' events of what we deleted bring us back too."""
        if plan.action == rules.DELETE_SELF:
            await self._client.delete_seen(RAY_JOB, rayjob)
            logger.info("deleted RayJob %s (deletionStrategy)", rayjob["metadata"]["name"])
            return Step(None, None)  # The finalizer takes it from here.
        if plan.action == rules.DELETE_CLUSTER:
            await self._objects.delete_cluster(rayjob, status)
        elif plan.action == rules.DELETE_WORKERS and cluster is not None:
            await self.suspend_worker_groups(rayjob, cluster)
        wait = None
        if plan.next_due is not None:
            wait = max(0.0, (plan.next_due - self._now()).total_seconds()) + 0.1
        if plan.action is not None:
            # Until the cache shows the effect: a lost write must not leave the rule undone.
            wait = REQUEUE_SECONDS if wait is None else min(wait, REQUEUE_SECONDS)
        return Step(None, requeue_after=wait)

    async def suspend_worker_groups(self, rayjob: RayJob, cluster: RayCluster) -> None:
        """DeleteWorkers: `suspend: true` on every worker group of the job's cluster."""
        metadata = cluster["metadata"]
        groups = cluster.get("spec", {}).get("workerGroupSpecs") or ()
        # Preconditions on the uid and resourceVersion we looked at: the whole list is written
        # back, so it must be this very cluster as we saw it (else Conflict, and we look again).
        patch = {
            "metadata": {"uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"]},
            "spec": {"workerGroupSpecs": [{**group, "suspend": True} for group in groups]},
        }
        with contextlib.suppress(NotFound, Conflict):
            await self._client.patch(
                RAY_CLUSTER, metadata["name"], patch, namespace=metadata["namespace"]
            )
            self._events.record(
                rayjob,
                reason="UpdatedRayCluster",
                message=f"Set the `suspend` field to true for all worker groups in cluster "
                f"{metadata['namespace']}/{metadata['name']}",
            )

    async def finalize(self, rayjob: RayJob) -> Result:
        """Stop the Ray job (best effort, as KubeRay), delete what we made, drop the finalizer."""
        if not has_finalizer(rayjob, FINALIZER):
            return Result()
        status = rayjob.get("status") or {}
        cluster = self._store.get(
            RAY_CLUSTER, rayjob["metadata"]["namespace"], str(status.get("rayClusterName") or "")
        )
        if (
            cluster is not None
            and status.get("jobId")
            and not is_job_terminal(status.get("jobStatus"))
        ):
            await self._dashboard.stop_job(cluster, str(status["jobId"]))
        cluster_gone = await self._objects.delete_cluster(rayjob, status)
        submitter_gone = await self._objects.delete_submitter_job(rayjob)
        service_gone = await self._objects.delete_head_service(rayjob)
        if not (cluster_gone and submitter_gone and service_gone):
            return Result(requeue_after=1.0)
        await remove_finalizer(self._client, RAY_JOB, rayjob, FINALIZER)
        return Result()
