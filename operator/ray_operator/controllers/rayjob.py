"""The RayJob controller: an explicit state machine on `status.jobDeploymentStatus` (KubeRay's).

`reconcile` validates, then hands the RayJob to the step of its current state (`STEPS`); each
step does the I/O its state needs (create the RayCluster, create the submitter Job, ask the
dashboard) and returns the next status, computed by the pure rules in `status/rayjob.py`.
After a step the attempt is counted (`backoffLimit` retries), `endTime` is stamped, and the
status is written only when it changed.

Exactly-once submission: the submission id (`status.jobId`) is chosen and *written* in the New
step, before any cluster exists. HTTPMode submits only when the dashboard answers "no such job"
for that id, and a duplicate submit (a race with our own earlier request) is taken as success; so
an operator killed at any point resubmits nothing. K8sJobMode's submitter command checks
`ray job status <id>` before `ray job submit` for the same reason (kuberay#2154). SidecarMode
puts the submitter into the head Pod of the cluster it creates (never restarted) and reads the
outcome from that container's exit code, as KubeRay does.

Taking over from KubeRay: the state lives in the RayJob's status, which KubeRay writes with the
same fields, so a RayJob KubeRay left Running (its `jobId`, `rayClusterName`, `dashboardURL`)
is simply followed: its cluster and submitter Job are found by name and owner, and the job by
its id on the dashboard; nothing is created or submitted again.

One slow or dead dashboard never stalls others: dashboard calls have short timeouts, a failed
dashboard is skipped for a growing cool-down (`DashboardAccess`), and the reconcile requeues
instead of waiting. Deleting a RayJob stops its Ray job (finalizer `ray.io/rayjob-finalizer`)
and deletes its RayCluster, submitter Job and head Service explicitly, rather than relying on the
garbage collector.

This module is the state machine; the steps' I/O lives beside it, one responsibility each:
`rayjob_objects.py` (the RayCluster, submitter Job and head Service: find, create, keep,
delete), `rayjob_dashboard.py` (follow the Ray job, HTTPMode submission, stop it),
`rayjob_cleanup.py` (Suspending/Retrying, `deletionStrategy` and the TTL after the end, the
finalizer), `rayjob_step.py` (`Step`, what a step decides).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.builders import rayjob as build
from ray_operator.controllers import status_writer
from ray_operator.controllers.batch_scheduling import REFUSED_REASON, BatchScheduling
from ray_operator.controllers.dashboards import DashboardAccess
from ray_operator.controllers.rayjob_cleanup import RayJobCleanup
from ray_operator.controllers.rayjob_dashboard import RayJobDashboard
from ray_operator.controllers.rayjob_objects import RayJobObjects
from ray_operator.controllers.rayjob_step import REQUEUE_SECONDS, Step
from ray_operator.dashboard.client import DashboardOptions
from ray_operator.dashboard.resolver import DashboardResolver, dashboard_address
from ray_operator.features import SIDECAR_SUBMITTER_RESTART
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    own_key,
    owner_keys,
)
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import JOB, RAY_CLUSTER, RAY_JOB, SERVICE, Kind, ObjectKey
from ray_operator.spec.object_names import random_suffix
from ray_operator.status import rayjob as rules
from ray_operator.status import waiting
from ray_operator.validation.errors import summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayjob import validate_rayjob

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayJob


logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]


class RayJobController:
    """Reconciles RayJobs; their RayClusters, submitter Jobs and Services map back by owner."""

    kind = RAY_JOB

    def __init__(
        self,
        context: ControllerContext,
        *,
        dashboards: DashboardAccess | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
        suffix: Callable[[], str] = random_suffix,
        limits: ClusterLimits = DEFAULT_LIMITS,
        batch_scheduler: str = "",
    ) -> None:
        self._batch_scheduling = BatchScheduling(context, batch_scheduler)
        self._limits = limits  # the webhook's bounds (--max-pods-per-cluster), re-checked here
        self._submitter_restart = limits.feature_gates.enabled(SIDECAR_SUBMITTER_RESTART)
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._suffix = suffix
        # Status-check failures count from here at the earliest: a `jobStatusCheckFailureStartTime`
        # written before we watched (by KubeRay before a takeover, by us before a restart) says
        # nothing about whether *we* reach the dashboard, and must not fail a RayJob at once.
        self._started = self._now()
        self._objects = RayJobObjects(
            client=context.client,
            events=context.events,
            store=context.store,
            batch_scheduling=self._batch_scheduling,
            clock=self._now,
            submitter_restart=self._submitter_restart,
        )
        self._dashboard = RayJobDashboard(
            dashboards=dashboards or DashboardAccess(context.client, store=context.store),
            events=context.events,
            clock=self._now,
        )
        self._cleanup = RayJobCleanup(
            client=context.client,
            events=context.events,
            store=context.store,
            objects=self._objects,
            dashboard=self._dashboard,
            batch_scheduling=self._batch_scheduling,
            clock=self._now,
        )
        self._steps: dict[str, Callable[[RayJob, JSON], Awaitable[Step]]] = {
            rules.NEW: self.step_new,
            rules.INITIALIZING: self.step_initializing,
            rules.WAITING: self.step_waiting,
            rules.RUNNING: self.step_running,
            rules.SUSPENDING: self._cleanup.release_resources,
            rules.RETRYING: self._cleanup.release_resources,
            rules.SUSPENDED: self.step_suspended,
            rules.COMPLETE: self._cleanup.clean_up_finished_run,
            rules.FAILED_STATE: self._cleanup.clean_up_finished_run,
            rules.VALIDATION_FAILED: self.step_validation_failed,
        }

    def keys_for(self, kind: Kind, obj: Object) -> Iterable[ObjectKey]:
        if kind in (RAY_CLUSTER, JOB, SERVICE, self._batch_scheduling.pod_group_kind):
            return owner_keys(obj, owner=RAY_JOB)
        return own_key(kind, obj, of=RAY_JOB)

    async def reconcile(self, key: ObjectKey) -> Result:
        rayjob = self._store.get(RAY_JOB, key.namespace, key.name)
        if rayjob is None:
            self._objects.forget(key.namespace, key.name)
            self._dashboard.forget(key.namespace, key.name)
            return Result()
        if (rayjob.get("spec") or {}).get("managedBy") not in names.OWN_MANAGED_BY:
            return Result()  # MultiKueue (or another controller) runs this one.
        if rayjob["metadata"].get("deletionTimestamp"):
            return await self._cleanup.finalize(rayjob)
        old: JSON = dict(rayjob.get("status") or {})
        # The webhook's rules, again: an object may predate the webhook or bypass it.
        problems = validate_rayjob(rayjob, limits=self._limits)
        if problems:
            return await self.report_invalid_spec(rayjob, old, summarize(problems))
        step = self._steps.get(rules.state(old))
        if step is None:
            logger.warning("unknown jobDeploymentStatus %r", rules.state(old))
            return Result(requeue_after=REQUEUE_SECONDS)
        outcome = await step(rayjob, old)
        new = old
        if outcome.status is not None:
            new = rules.with_end_time(old, rules.counted(rayjob, outcome.status), now=self._now())
        new = self.with_cluster_waiting(rayjob, new)
        if outcome.status is not None or new != old:
            await self.write_status(rayjob, old, new)
        return Result(requeue_after=outcome.requeue_after)

    def with_cluster_waiting(self, rayjob: RayJob, status: JSON) -> JSON:
        """`status` with the PodsWaiting condition of the RayJob's cluster (owned, or chosen
        by `clusterSelector`: both are named in `rayClusterName`), in `message` too while
        Initializing."""
        name = str(status.get("rayClusterName") or "")
        cluster = (
            self._store.get(RAY_CLUSTER, rayjob["metadata"]["namespace"], name) if name else None
        )
        return waiting.with_clusters_waiting(
            status,
            [cluster],
            now=self._now(),
            generation=int(rayjob["metadata"].get("generation") or 0),
            mirror_message=rules.state(status) == rules.INITIALIZING,
        )

    # --- the state machine's steps ------------------------------------------------------------

    async def step_new(self, rayjob: RayJob, status: JSON) -> Step:
        """Add the finalizer; choose the submission id and cluster name, before anything else."""
        if await self._cleanup.ensure_finalizer(rayjob):
            # Decide on the next look, from the object that has it (the status write below is
            # conditional on the resourceVersion it was computed from).
            return Step(None, requeue_after=REQUEUE_SECONDS)
        name = rayjob["metadata"]["name"]
        return Step(
            rules.initialized(
                rayjob,
                status,
                now=self._now(),
                cluster_name=build.cluster_name_for_job(name, suffix=self._suffix()),
                submission_id=build.submission_id_for_job(name, suffix=self._suffix()),
            )
        )

    async def step_initializing(self, rayjob: RayJob, status: JSON) -> Step:
        """Get the cluster ready, then submit (K8sJobMode) or move on to Running."""
        now = self._now()
        for guard in (
            rules.suspending(rayjob, status),
            rules.active_deadline_passed(rayjob, status, now=now),
            rules.pre_running_deadline_passed(rayjob, status, now=now),
        ):
            if guard is not None:
                return Step(guard)
        refusal = await self._batch_scheduling.ensure_for_job(rayjob)
        if refusal is not None:
            self._events.record(rayjob, reason=REFUSED_REASON, message=refusal, type="Warning")
            # For this spec it stays refused: look again when the RayJob changes.
            return Step(None, requeue_after=None)
        cluster = await self._objects.get_or_create_cluster(rayjob, status)
        if cluster is None:
            return Step(None)
        new = dict(status)
        if not new.get("dashboardURL"):
            if (cluster.get("status") or {}).get("state") != "ready":
                new["rayClusterStatus"] = dict(cluster.get("status") or {})
                return Step(new)
            new["dashboardURL"] = dashboard_address(cluster)
        mode = rules.submission_mode(rayjob)
        if mode == "InteractiveMode":
            return Step({**new, "jobDeploymentStatus": rules.WAITING})
        if mode == "K8sJobMode":
            await self._objects.ensure_submitter_job(rayjob, cluster, new)
        return Step({**new, "jobDeploymentStatus": rules.RUNNING}, requeue_after=0.5)

    async def step_waiting(self, rayjob: RayJob, status: JSON) -> Step:
        """InteractiveMode: wait for the user to put the submission id into `spec.jobId`."""
        deadline = rules.pre_running_deadline_passed(rayjob, status, now=self._now())
        if deadline is not None:
            return Step(deadline)
        job_id = (rayjob.get("spec") or {}).get("jobId")
        if not job_id:
            return Step(None)
        return Step({**status, "jobId": job_id, "jobDeploymentStatus": rules.RUNNING})

    async def step_running(self, rayjob: RayJob, status: JSON) -> Step:
        """Follow the Ray job (and the submitter) until it ends; HTTPMode submits here."""
        now = self._now()
        for guard in (
            rules.suspending(rayjob, status),
            rules.active_deadline_passed(rayjob, status, now=now),
            rules.grace_period_passed(status, now=now),
            rules.status_check_timed_out(status, now=now, not_before=self._started),
        ):
            if guard is not None:
                return Step(guard)
        cluster = await self._objects.get_or_create_cluster(rayjob, status)
        if cluster is None:
            return Step(None)
        await self._objects.ensure_head_service(rayjob, cluster)
        finished_at: str | None = None
        if rules.has_submitter(rayjob):
            failed, finished_at = self.check_submitter(rayjob, status, cluster)
            if failed is not None:
                return Step(failed)
            overdue = rules.submitter_finished_too_long_ago(
                status, finished_at=finished_at, now=now
            )
            if overdue is not None:
                return Step(overdue)
        return await self._dashboard.follow_ray_job(
            rayjob, status, cluster, finished_at=finished_at
        )

    def check_submitter(
        self, rayjob: RayJob, status: JSON, cluster: RayCluster
    ) -> tuple[JSON | None, str | None]:
        """The submitter's verdict (a Failed status, or None) and when it finished (or None):
        K8sJobMode asks the submitter Job, SidecarMode the head Pod's submitter container."""
        if rules.submission_mode(rayjob) == "SidecarMode":
            head = self._objects.head_pod(cluster)
            failed = rules.sidecar_failed(status, head, restartable=self._submitter_restart)
            return failed, rules.sidecar_finished_at(head)
        submitter = self._objects.submitter_job(rayjob)
        return rules.submitter_failed(status, submitter), rules.submitter_finished_at(submitter)

    async def step_suspended(self, rayjob: RayJob, status: JSON) -> Step:
        resumed = rules.resumed(rayjob, status)
        return Step(resumed, requeue_after=0.5) if resumed is not None else Step(None, None)

    async def step_validation_failed(self, rayjob: RayJob, status: JSON) -> Step:
        return Step(None, None)

    # --- status --------------------------------------------------------------------------------

    async def report_invalid_spec(self, rayjob: RayJob, old: JSON, message: str) -> Result:
        """ValidationFailed with the message; a Warning event; no retry until the spec changes."""
        self._events.record(rayjob, reason="InvalidRayJobSpec", message=message, type="Warning")
        await self.write_status(rayjob, old, rules.validation_failed(old, message))
        return Result()

    async def write_status(self, rayjob: RayJob, old: JSON, new: JSON) -> None:
        if not rules.status_changed(old, new):
            return
        # A Conflict (a stale cache: say, one that would choose a second submission id or
        # pending cluster name) is retried from fresh data.
        if not await status_writer.write_status(self._client, RAY_JOB, rayjob, old, new):
            return
        status_writer.record_pods_waiting_news(self._events, rayjob, old, new)
        if rules.state(old) != rules.state(new):
            logger.info(
                "jobDeploymentStatus %s -> %s", rules.state(old) or "New", rules.state(new) or "New"
            )


def rayjob_controller(
    *,
    resolver: DashboardResolver | None = None,
    options: DashboardOptions | None = None,
    limits: ClusterLimits = DEFAULT_LIMITS,
    batch_scheduler: str = "",
) -> ControllerFactory:
    """The factory `app.run(..., controllers=[...])` takes, with how to reach dashboards."""

    def factory(context: ControllerContext) -> RayJobController:
        access = DashboardAccess(
            context.client, store=context.store, resolver=resolver, options=options
        )
        return RayJobController(
            context, dashboards=access, limits=limits, batch_scheduler=batch_scheduler
        )

    return factory
