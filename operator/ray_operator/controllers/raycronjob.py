"""The RayCronJob controller: RayJobs on a cron schedule (KubeRay's alpha kind, on by default here;
`--feature-gates=RayCronJob=false` turns it off).

`reconcile` reads as a table of contents: the webhook's rules again (an invalid spec creates
nothing: one Warning Event per generation), the schedule parsed once per spec, the plan
(`status.raycronjob.plan`: which scheduled time is due, which RayJobs go), the deletions, the
RayJob for the due time, then the status, written only when it changed. The key is requeued for
the next scheduled time; every change of one of its RayJobs brings it back too, so the status
follows them and a Forbid-skipped time starts as soon as the running RayJob ends.

Time comes from the injected clock (`clock`), so tests move it instead of waiting. A RayJob
create that timed out after it took effect is found by its deterministic name on the next
reconcile, never created twice. Deleting a RayCronJob leaves its RayJobs to the garbage
collector through their ownerReference, as KubeRay does (it has no finalizer to remove, so a
switch back to KubeRay never finds an object stuck in Terminating).
"""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.raycronjob import build_scheduled_rayjob
from ray_operator.controllers import status_writer
from ray_operator.cron import CronSchedule, InvalidScheduleError, parse_schedule
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    owner_keys,
)
from ray_operator.runtime.errors import AlreadyExists
from ray_operator.spec.kinds import RAY_CRON_JOB, RAY_JOB, Kind, ObjectKey
from ray_operator.spec.times import format_time
from ray_operator.status import raycronjob as rules
from ray_operator.validation.errors import summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycronjob import validate_raycronjob

if TYPE_CHECKING:
    from ray_io.v1_views import RayCronJob

logger = logging.getLogger(__name__)

INVALID_SPEC: Final = "InvalidRayCronJobSpec"
"""KubeRay's Event reason for a spec it refuses."""


class RayCronJobController:
    """Reconciles RayCronJobs; the RayJobs they created map back by owner."""

    kind = RAY_CRON_JOB
    reads = (RAY_CRON_JOB, RAY_JOB)

    def __init__(
        self,
        context: ControllerContext,
        *,
        limits: ClusterLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._limits = limits
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        # Per object: the spec version (uid, generation) last checked, and its problem or
        # schedule; and what was last reported, so a reconcile per RayJob change adds no Event.
        self._checked: dict[ObjectKey, tuple[tuple[str, int], str | CronSchedule]] = {}
        self._reported: dict[ObjectKey, tuple[str, str, str]] = {}

    def keys_for(self, kind: Kind, obj: Mapping[str, Any]) -> Iterable[ObjectKey]:
        if kind == RAY_CRON_JOB:
            return [RAY_CRON_JOB.key(obj)]
        if kind == RAY_JOB:
            return owner_keys(obj, owner=RAY_CRON_JOB)
        return []

    async def reconcile(self, key: ObjectKey) -> Result:
        cron = self._store.get(RAY_CRON_JOB, key.namespace, key.name)
        if cron is None or cron["metadata"].get("deletionTimestamp"):
            self._checked.pop(key, None)
            self._reported.pop(key, None)
            return Result()
        checked = self.check_spec(key, cron)
        if isinstance(checked, str):
            self.report_once(key, cron, reason=INVALID_SPEC, message=checked)
            return Result()  # only a spec change (a new event) can fix it
        uid = cron["metadata"]["uid"]
        jobs = [rules.child_job(job) for job in self._store.list_owned_by(RAY_JOB, uid)]
        plan = rules.plan(cron, jobs, checked, now=self._now())
        await self.delete_rayjobs(cron, plan.delete)
        if plan.forbidden is not None:
            message = (
                f"skipped the run of {format_time(plan.forbidden)}: an earlier RayJob still "
                "runs and concurrencyPolicy is Forbid"
            )
            self.report_once(key, cron, reason="SkippedRayJob", message=message)
        if plan.create_for is not None:
            await self.create_rayjob(cron, plan.create_for)
        if cron.get("spec", {}).get("suspend"):
            message = "RayCronJob suspended, no new RayJobs will be created"
            self.report_once(key, cron, reason="SuspendedRayCronJob", message=message)
        await self.write_status(cron, plan.status)
        return Result(requeue_after=plan.requeue_after)

    def check_spec(self, key: ObjectKey, cron: RayCronJob) -> str | CronSchedule:
        """The webhook's rules, then the parsed schedule; once per generation of the spec."""
        metadata = cron["metadata"]
        version = (str(metadata.get("uid", "")), int(metadata.get("generation") or 0))
        known = self._checked.get(key)
        if known is not None and known[0] == version:
            return known[1]
        errors = validate_raycronjob(cron, limits=self._limits)
        outcome: str | CronSchedule
        if errors:
            outcome = summarize(errors)
        else:
            spec = cron.get("spec", {})
            try:
                outcome = parse_schedule(spec.get("schedule", ""), time_zone=spec.get("timeZone"))
            except InvalidScheduleError as error:  # validated just now: kept for safety
                outcome = f"spec.schedule: {error}"
        self._checked[key] = (version, outcome)
        return outcome

    def report_once(self, key: ObjectKey, cron: RayCronJob, *, reason: str, message: str) -> None:
        """An Event the first time this object shows this (reason, message) in a row."""
        seen = (str(cron["metadata"].get("uid", "")), reason, message)
        if self._reported.get(key) == seen:
            return
        self._reported[key] = seen
        logger.info("%s: %s", reason, message)
        self._events.record(
            cron,
            reason=reason,
            message=message,
            type="Normal" if reason == "SuspendedRayCronJob" else "Warning",
        )

    async def delete_rayjobs(self, cron: RayCronJob, names: Iterable[str]) -> None:
        """Delete RayJobs of this cron job (history limits, Replace), each by name and uid."""
        namespace = cron["metadata"]["namespace"]
        for name in names:
            job = self._store.get(RAY_JOB, namespace, name)
            if job is None or job["metadata"].get("deletionTimestamp"):
                continue
            await self._client.delete_seen(RAY_JOB, job)
            logger.info("deleted RayJob %s", name)
            self._events.record(cron, reason="DeletedRayJob", message=f"deleted RayJob {name}")

    async def create_rayjob(self, cron: RayCronJob, scheduled: datetime.datetime) -> None:
        body = build_scheduled_rayjob(cron, scheduled)
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        try:
            await self._client.create(RAY_JOB, body, namespace=namespace)
        except AlreadyExists:
            return  # created before (a lost answer, or KubeRay ran here): that time is handled
        logger.info("created RayJob %s for %s", name, format_time(scheduled))
        self._events.record(
            cron,
            reason="CreatedRayJob",
            message=f"created RayJob {name} for the run of {format_time(scheduled)}",
        )

    async def write_status(self, cron: RayCronJob, new: dict[str, Any]) -> None:
        old = dict(cron.get("status") or {})
        if old == new:
            return
        # Conflict: the object changed since the cache showed it, and that change brings it back
        # here: the next reconcile writes the status again.
        await status_writer.write_status(
            self._client, RAY_CRON_JOB, cron, old, new, drop_conflicts=True
        )


def raycronjob_controller(
    *,
    limits: ClusterLimits = DEFAULT_LIMITS,
    clock: Callable[[], datetime.datetime] | None = None,
) -> ControllerFactory:
    """The factory `app.run(..., controllers=[...])` takes."""
    return functools.partial(RayCronJobController, limits=limits, clock=clock)
