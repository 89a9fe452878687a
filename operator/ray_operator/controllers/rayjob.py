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
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_operator.builders import rayjob as build
from ray_operator.builders.batch_scheduling import SUBMITTER_GROUP
from ray_operator.controllers import status_writer
from ray_operator.controllers.batch_scheduling import REFUSED_REASON, BatchScheduling
from ray_operator.controllers.dashboards import DashboardAccess
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.dashboard.client import DashboardOptions
from ray_operator.dashboard.resolver import DashboardResolver, dashboard_address
from ray_operator.features import SIDECAR_SUBMITTER_RESTART
from ray_operator.planning.drift import selector_patch
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    own_key,
    owner_keys,
)
from ray_operator.runtime.errors import AlreadyExists, Conflict, NotFound
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.dashboard_errors import DashboardError, JobNotFound, SubmissionIdInUse
from ray_operator.spec.dashboard_models import is_job_terminal
from ray_operator.spec.kinds import (
    JOB,
    POD,
    RAY_CLUSTER,
    RAY_JOB,
    SERVICE,
    Kind,
    ObjectKey,
    Viewed,
)
from ray_operator.spec.object_names import random_suffix
from ray_operator.status import rayjob as rules
from ray_operator.status import waiting
from ray_operator.validation.errors import summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayjob import validate_rayjob

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster, RayJob


logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

FINALIZER = "ray.io/rayjob-finalizer"
# KubeRay's RayJobDefaultRequeueDuration: how often a live RayJob looks at its Ray job.
REQUEUE_SECONDS = 3.0
# How often a RayJob waiting for the RayCluster its clusterSelector names says so again.
MISSING_CLUSTER_REPORT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Step:
    """What one state's step decided: the next status (None: leave it) and when to look again."""

    status: JSON | None
    requeue_after: float | None = REQUEUE_SECONDS


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
        self._dashboards = dashboards or DashboardAccess(context.client, store=context.store)
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._suffix = suffix
        # Status-check failures count from here at the earliest: a `jobStatusCheckFailureStartTime`
        # written before we watched (by KubeRay before a takeover, by us before a restart) says
        # nothing about whether *we* reach the dashboard, and must not fail a RayJob at once.
        self._started = self._now()
        # (namespace, name) of a RayJob → when we last reported its selected cluster missing
        # (an entry per RayJob waiting for one; dropped once found or when the RayJob is gone).
        self._missing_cluster_reported: dict[tuple[str, str], datetime.datetime] = {}
        self._steps: dict[str, Callable[[RayJob, JSON], Awaitable[Step]]] = {
            rules.NEW: self.step_new,
            rules.INITIALIZING: self.step_initializing,
            rules.WAITING: self.step_waiting,
            rules.RUNNING: self.step_running,
            rules.SUSPENDING: self.step_release_resources,
            rules.RETRYING: self.step_release_resources,
            rules.SUSPENDED: self.step_suspended,
            rules.COMPLETE: self.step_finished,
            rules.FAILED_STATE: self.step_finished,
            rules.VALIDATION_FAILED: self.step_validation_failed,
        }

    def keys_for(self, kind: Kind, obj: Object) -> Iterable[ObjectKey]:
        if kind in (RAY_CLUSTER, JOB, SERVICE, self._batch_scheduling.pod_group_kind):
            return owner_keys(obj, owner=RAY_JOB)
        return own_key(kind, obj, of=RAY_JOB)

    async def reconcile(self, key: ObjectKey) -> Result:
        rayjob = self._store.get(RAY_JOB, key.namespace, key.name)
        if rayjob is None:
            self._missing_cluster_reported.pop((key.namespace, key.name), None)
            self._dashboards.forget_owner(key.namespace, key.name)
            return Result()
        if (rayjob.get("spec") or {}).get("managedBy") not in names.OWN_MANAGED_BY:
            return Result()  # MultiKueue (or another controller) runs this one.
        if rayjob["metadata"].get("deletionTimestamp"):
            return await self.finalize(rayjob)
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
        if await self.ensure_finalizer(rayjob):
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
            await self._events.record(
                rayjob, reason=REFUSED_REASON, message=refusal, type="Warning"
            )
            # For this spec it stays refused: look again when the RayJob changes.
            return Step(None, requeue_after=None)
        cluster = await self.get_or_create_cluster(rayjob, status)
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
            await self.ensure_submitter_job(rayjob, cluster, new)
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
        cluster = await self.get_or_create_cluster(rayjob, status)
        if cluster is None:
            return Step(None)
        await self.ensure_head_service(rayjob, cluster)
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
        return await self.follow_ray_job(rayjob, status, cluster, finished_at=finished_at)

    def check_submitter(
        self, rayjob: RayJob, status: JSON, cluster: RayCluster
    ) -> tuple[JSON | None, str | None]:
        """The submitter's verdict (a Failed status, or None) and when it finished (or None):
        K8sJobMode asks the submitter Job, SidecarMode the head Pod's submitter container."""
        if rules.submission_mode(rayjob) == "SidecarMode":
            head = self._head_pod(cluster)
            failed = rules.sidecar_failed(status, head, restartable=self._submitter_restart)
            return failed, rules.sidecar_finished_at(head)
        submitter = self._owned(JOB, rayjob, rayjob["metadata"]["name"])
        return rules.submitter_failed(status, submitter), rules.submitter_finished_at(submitter)

    async def step_release_resources(self, rayjob: RayJob, status: JSON) -> Step:
        """Suspending/Retrying: delete the cluster and the submitter; once gone, reset the run."""
        cluster_gone = await self.delete_cluster(rayjob, status)
        submitter_gone = await self.delete_submitter_job(rayjob)
        if not (cluster_gone and submitter_gone):
            return Step(None, requeue_after=1.0)
        await self._batch_scheduling.release_for_job(rayjob, status)
        return Step(rules.released(status), requeue_after=0.5)

    async def step_suspended(self, rayjob: RayJob, status: JSON) -> Step:
        resumed = rules.resumed(rayjob, status)
        return Step(resumed, requeue_after=0.5) if resumed is not None else Step(None, None)

    async def step_finished(self, rayjob: RayJob, status: JSON) -> Step:
        """Complete/Failed: carry out `deletionStrategy`, or with `shutdownAfterJobFinishes`
        delete the cluster after the TTL (KubeRay's order: the strategy wins when set)."""
        await self._batch_scheduling.release_for_job(rayjob, status)
        cluster = self._owned(RAY_CLUSTER, rayjob, str(status.get("rayClusterName") or ""))
        plan = rules.deletion_plan(rayjob, status, cluster=cluster, now=self._now())
        if plan is not None:
            return await self.carry_out_deletion(rayjob, status, plan, cluster=cluster)
        due = rules.shutdown_due_at(rayjob, status)
        if due is None:
            return Step(None, None)
        wait = (due - self._now()).total_seconds()
        if wait > 0:
            return Step(None, requeue_after=wait + 0.1)
        if not await self.delete_cluster(rayjob, status):
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
            await self.delete_cluster(rayjob, status)
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
            await self._events.record(
                rayjob,
                reason="UpdatedRayCluster",
                message=f"Set the `suspend` field to true for all worker groups in cluster "
                f"{metadata['namespace']}/{metadata['name']}",
            )

    async def step_validation_failed(self, rayjob: RayJob, status: JSON) -> Step:
        return Step(None, None)

    # --- Running: the dashboard ----------------------------------------------------------------

    async def follow_ray_job(
        self, rayjob: RayJob, status: JSON, cluster: RayCluster, *, finished_at: str | None
    ) -> Step:
        job_id = str(status.get("jobId") or "")
        try:
            step = await self.ask_dashboard_about_job(
                rayjob, status, cluster, job_id=job_id, finished_at=finished_at
            )
        except DashboardError as error:
            found = self._dashboards.reachability(cluster, error)
            new = await self._dashboards.report_reachability(
                rayjob, status, found, events=self._events, now=self._now()
            )
            wait = max(REQUEUE_SECONDS, self._dashboards.cooldown_remaining(cluster))
            return Step(rules.status_check_failed(new, now=self._now()), requeue_after=wait)
        found = self._dashboards.reachability(cluster, None)
        base = status if step.status is None else step.status
        new = await self._dashboards.report_reachability(
            rayjob, base, found, events=self._events, now=self._now()
        )
        if step.status is None and new == status:
            return step
        return Step(new, requeue_after=step.requeue_after)

    async def ask_dashboard_about_job(
        self,
        rayjob: RayJob,
        status: JSON,
        cluster: RayCluster,
        *,
        job_id: str,
        finished_at: str | None,
    ) -> Step:
        """The next status from the dashboard's view of the job (HTTPMode: submit it when the
        head does not know it); raises `DashboardError` when the dashboard cannot tell."""
        async with self._dashboards.open(cluster) as ray:
            try:
                info = await ray.get_job(job_id)
            except JobNotFound:
                # HTTPMode: the head does not know this id (never submitted, or a head
                # restarted without GCS fault tolerance lost it). KubeRay submits it then,
                # under the same id (`reconcileHTTPModeJobNotFound`), and so do we: a taken-
                # over RayJob whose job the head still has is followed, never resubmitted,
                # and Ray itself refuses a second job with an id it already holds.
                if rules.submission_mode(rayjob) == "HTTPMode":
                    await self.submit(rayjob, ray.submit_job, job_id=job_id)
                    new = dict(status)
                    new.pop("jobStatusCheckFailureStartTime", None)
                    return Step(new, requeue_after=1.0)
                if finished_at is not None:
                    return Step(rules.missing_job_after_submitter(status))
                return Step(None)
        new = rules.with_job_info(
            rayjob, status, info=info, submitter_finished=finished_at is not None
        )
        new["rayClusterStatus"] = dict(cluster.get("status") or {})
        if rules.state(new) != rules.RUNNING:
            await self._events.record(
                rayjob,
                reason=f"RayJob{rules.state(new)}",
                message=f"Ray job {job_id} ended with status {info.status}",
                type="Warning" if rules.state(new) == rules.FAILED_STATE else "Normal",
            )
        return Step(new)

    async def submit(
        self, rayjob: RayJob, submit_job: Callable[[Any], Awaitable[str]], *, job_id: str
    ) -> None:
        """HTTPMode: submit under the id already stored in the status."""
        try:
            await submit_job(build.job_submission(rayjob, submission_id=job_id))
        except SubmissionIdInUse:
            # Our own earlier submit got there first (e.g. before a restart): nothing to do.
            logger.info("Ray job %s was already submitted", job_id)
            return
        logger.info("submitted Ray job %s", job_id)
        await self._events.record(
            rayjob,
            reason="SubmittedRayJob",
            message=f"Submitted Ray job {job_id} through the dashboard",
        )

    # --- owned objects -------------------------------------------------------------------------

    async def get_or_create_cluster(self, rayjob: RayJob, status: JSON) -> RayCluster | None:
        """The RayCluster of this run; created from `rayClusterSpec` when absent (None until the
        cache shows it). With `clusterSelector`, the selected cluster must exist."""
        name = str(status.get("rayClusterName") or "")
        namespace = rayjob["metadata"]["namespace"]
        cluster = self._store.get(RAY_CLUSTER, namespace, name)
        if cluster is not None:
            self._missing_cluster_reported.pop((namespace, rayjob["metadata"]["name"]), None)
            return cluster
        if rules.uses_cluster_selector(rayjob):
            await self.report_missing_selected_cluster(rayjob, f"{namespace}/{name}")
            return None
        try:
            built = build.build_cluster_for_job(
                rayjob,
                name=name,
                submission_id=str(status.get("jobId") or ""),
                dashboard_address=str(status.get("dashboardURL") or ""),
                submitter_restart=self._submitter_restart,
            )
            if rules.submission_mode(rayjob) == "K8sJobMode":
                self._batch_scheduling.decorate(rayjob, built, group_name="", pod=False)
            await self._client.create(RAY_CLUSTER, built, namespace=namespace)
        except AlreadyExists:
            return None  # Ours, not cached yet (or a stranger's: the next look tells).
        logger.info("created RayCluster %s", name)
        await self._events.record(
            rayjob, reason="CreatedRayCluster", message=f"Created RayCluster {namespace}/{name}"
        )
        return None

    async def report_missing_selected_cluster(self, rayjob: RayJob, cluster: str) -> None:
        """A Warning that the selected cluster does not exist: at once, then again only every
        `MISSING_CLUSTER_REPORT_SECONDS` while we keep looking every few seconds (each report
        is an API write: a RayJob waiting for its user's cluster must not write every 3s)."""
        key = (rayjob["metadata"]["namespace"], rayjob["metadata"]["name"])
        last = self._missing_cluster_reported.get(key)
        now = self._now()
        if last is not None and (now - last).total_seconds() < MISSING_CLUSTER_REPORT_SECONDS:
            return
        self._missing_cluster_reported[key] = now
        await self._events.record(
            rayjob,
            reason="RayClusterNotFound",
            type="Warning",
            message=f"RayCluster {cluster} set in the clusterSelector is not found. "
            "It must be created manually",
        )

    async def ensure_submitter_job(self, rayjob: RayJob, cluster: RayCluster, status: JSON) -> None:
        name = rayjob["metadata"]["name"]
        if self._owned(JOB, rayjob, name) is not None:
            return
        job = build.build_submitter_job(
            rayjob,
            cluster,
            dashboard_address=str(status["dashboardURL"]),
            submission_id=str(status.get("jobId") or ""),
        )
        self._batch_scheduling.decorate(rayjob, job["spec"]["template"], group_name=SUBMITTER_GROUP)
        try:
            await self._client.create(JOB, job, namespace=rayjob["metadata"]["namespace"])
        except AlreadyExists:
            return
        logger.info("created submitter Job %s", name)
        await self._events.record(
            rayjob,
            reason="CreatedRayJobSubmitter",
            message=f"Created Kubernetes Job {job['metadata']['namespace']}/{name}",
        )

    async def ensure_head_service(self, rayjob: RayJob, cluster: RayCluster) -> None:
        """`<rayjob>-head-svc` pointing at the job's cluster (not with clusterSelector)."""
        if rules.uses_cluster_selector(rayjob):
            return
        service = build.build_head_service_for_owner(rayjob, cluster)
        existing = self._owned(SERVICE, rayjob, service["metadata"]["name"])
        if existing is not None:
            await self.keep_head_service_selecting(rayjob, existing, service)
            return
        try:
            await self._client.create(SERVICE, service, namespace=rayjob["metadata"]["namespace"])
        except AlreadyExists:
            return
        await self._events.record(
            rayjob,
            reason="CreatedService",
            message=f"Created Service {service['metadata']['name']}",
        )

    async def keep_head_service_selecting(
        self, rayjob: RayJob, existing: Object, service: JSON
    ) -> None:
        """Make an existing `<rayjob>-head-svc` select exactly the job's head Pod: one taken over
        from KubeRay also requires `created-by=kuberay-operator`, which a head Pod we recreate
        lacks."""
        patch = selector_patch(service, existing)
        if patch is None:
            return
        name = service["metadata"]["name"]
        try:
            await self._client.patch(
                SERVICE, name, patch, namespace=rayjob["metadata"]["namespace"]
            )
        except NotFound:
            return  # Deleted meanwhile: its event brings us back to create it.
        await self._events.record(
            rayjob, reason="UpdatedService", message=f"Updated the selector of Service {name}"
        )

    async def delete_cluster(self, rayjob: RayJob, status: Object) -> bool:
        """Delete this run's RayCluster; True once the cache no longer has it."""
        if rules.uses_cluster_selector(rayjob):
            return True
        name = str(status.get("rayClusterName") or "")
        cluster = self._owned(RAY_CLUSTER, rayjob, name)
        if cluster is None:
            return True
        if not cluster["metadata"].get("deletionTimestamp"):
            await self._client.delete_seen(RAY_CLUSTER, cluster)
            logger.info("deleted RayCluster %s", name)
            await self._events.record(
                rayjob, reason="DeletedRayCluster", message=f"Deleted RayCluster {name}"
            )
        return False

    async def delete_submitter_job(self, rayjob: RayJob) -> bool:
        job = self._owned(JOB, rayjob, rayjob["metadata"]["name"])
        if job is None:
            return True
        if not job["metadata"].get("deletionTimestamp"):
            await self._client.delete_seen(JOB, job)
        return False

    async def delete_head_service(self, rayjob: RayJob) -> bool:
        """Delete `<rayjob>-head-svc`: where no garbage collector runs, nothing else would
        (KubeRay leaves it to the ownerReference)."""
        name = f"{rayjob['metadata']['name']}-{names.HEAD_SERVICE_SUFFIX}"
        service = self._owned(SERVICE, rayjob, name)
        if service is None:
            return True
        if not service["metadata"].get("deletionTimestamp"):
            await self._client.delete_seen(SERVICE, service)
        return False

    async def ensure_finalizer(self, rayjob: RayJob) -> bool:
        """Add our finalizer; True when it had to be added (look again once it is cached)."""
        return await add_finalizer(self._client, RAY_JOB, rayjob, FINALIZER)

    # --- deletion ------------------------------------------------------------------------------

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
            try:
                async with self._dashboards.open(cluster) as ray:
                    await ray.stop_job(str(status["jobId"]))
                logger.info("stopped Ray job %s", status["jobId"])
            except DashboardError as error:
                logger.warning("could not stop Ray job %s: %s", status["jobId"], error)
        cluster_gone = await self.delete_cluster(rayjob, status)
        submitter_gone = await self.delete_submitter_job(rayjob)
        service_gone = await self.delete_head_service(rayjob)
        if not (cluster_gone and submitter_gone and service_gone):
            return Result(requeue_after=1.0)
        await remove_finalizer(self._client, RAY_JOB, rayjob, FINALIZER)
        return Result()

    # --- status --------------------------------------------------------------------------------

    async def report_invalid_spec(self, rayjob: RayJob, old: JSON, message: str) -> Result:
        """ValidationFailed with the message; a Warning event; no retry until the spec changes."""
        await self._events.record(
            rayjob, reason="InvalidRayJobSpec", message=message, type="Warning"
        )
        await self.write_status(rayjob, old, rules.validation_failed(old, message))
        return Result()

    async def write_status(self, rayjob: RayJob, old: JSON, new: JSON) -> None:
        if not rules.status_changed(old, new):
            return
        # A Conflict (a stale cache: say, one that would choose a second submission id or
        # pending cluster name) is retried from fresh data.
        if not await status_writer.write_status(self._client, RAY_JOB, rayjob, old, new):
            return
        await status_writer.record_pods_waiting_news(self._events, rayjob, old, new)
        if rules.state(old) != rules.state(new):
            logger.info(
                "jobDeploymentStatus %s -> %s", rules.state(old) or "New", rules.state(new) or "New"
            )

    # --- helpers -------------------------------------------------------------------------------

    def _owned(self, kind: Kind[Viewed], owner: Object, name: str) -> Viewed | None:
        obj = self._store.get(kind, owner["metadata"]["namespace"], name)
        if obj is None:
            return None
        uid = owner["metadata"]["uid"]
        refs = obj["metadata"].get("ownerReferences") or ()
        return obj if any(ref.get("uid") == uid for ref in refs) else None

    def _head_pod(self, cluster: RayCluster) -> Pod | None:
        """The cluster's head Pod as cached (ours or KubeRay's: by label and owner uid)."""
        metadata = cluster["metadata"]
        for pod in self._store.list_for_cluster(POD, metadata["namespace"], metadata["name"]):
            labels = pod["metadata"].get("labels") or {}
            refs = pod["metadata"].get("ownerReferences") or ()
            if labels.get(names.NODE_TYPE_LABEL) == names.HEAD_NODE and any(
                ref.get("uid") == metadata["uid"] for ref in refs
            ):
                return pod
        return None


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
