"""A RayJob's Ray job on its cluster's dashboard: following it while Running, submitting it in
HTTPMode, stopping it when the RayJob is deleted. The RayJob controller's only dashboard calls.

Exactly-once submission: HTTPMode submits only when the dashboard answers "no such job" for the
submission id the status already holds, and a duplicate submit (a race with our own earlier
request) is taken as success. One slow or dead dashboard never stalls others: calls have short
timeouts, a failed dashboard is skipped for a growing cool-down (`DashboardAccess`), and the
step requeues instead of waiting.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ray_operator.builders import rayjob as build
from ray_operator.controllers.rayjob_step import JSON, REQUEUE_SECONDS, Step
from ray_operator.spec.dashboard_errors import DashboardError, JobNotFound, SubmissionIdInUse
from ray_operator.status import rayjob as rules

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayJob

    from ray_operator.controllers.dashboards import DashboardAccess
    from ray_operator.runtime.events import EventRecorder

logger = logging.getLogger(__name__)


class RayJobDashboard:
    """Speaks to RayJobs' dashboards through `DashboardAccess`; one per RayJob controller."""

    def __init__(
        self,
        *,
        dashboards: DashboardAccess,
        events: EventRecorder,
        clock: Callable[[], datetime.datetime],
    ) -> None:
        self._dashboards = dashboards
        self._events = events
        self._now = clock

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered about a deleted RayJob's dashboard."""
        self._dashboards.forget_owner(namespace, name)

    async def follow_ray_job(
        self, rayjob: RayJob, status: JSON, cluster: RayCluster, *, finished_at: str | None
    ) -> Step:
        """Running: the next status from the dashboard, and whether it could be reached (a
        failure starts or continues `jobStatusCheckFailureStartTime`, after a cool-down)."""
        job_id = str(status.get("jobId") or "")
        try:
            step = await self.ask_dashboard_about_job(
                rayjob, status, cluster, job_id=job_id, finished_at=finished_at
            )
        except DashboardError as error:
            found = self._dashboards.reachability(cluster, error)
            new = self._dashboards.report_reachability(
                rayjob, status, found, events=self._events, now=self._now()
            )
            wait = max(REQUEUE_SECONDS, self._dashboards.cooldown_remaining(cluster))
            return Step(rules.status_check_failed(new, now=self._now()), requeue_after=wait)
        found = self._dashboards.reachability(cluster, None)
        base = status if step.status is None else step.status
        new = self._dashboards.report_reachability(
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
            self._events.record(
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
        self._events.record(
            rayjob,
            reason="SubmittedRayJob",
            message=f"Submitted Ray job {job_id} through the dashboard",
        )

    async def stop_job(self, cluster: RayCluster, job_id: str) -> None:
        """Stop the Ray job, best effort (as KubeRay): a dashboard that cannot is logged."""
        try:
            async with self._dashboards.open(cluster) as ray:
                await ray.stop_job(job_id)
            logger.info("stopped Ray job %s", job_id)
        except DashboardError as error:
            logger.warning("could not stop Ray job %s: %s", job_id, error)
