"""What a RayCronJob should do now, computed purely: the RayJob to create (if a scheduled time is
due), the RayJobs to delete, and the status.

KubeRay's rules, kept so a switch creates nothing twice:
- a RayJob is named `<cron job>-<scheduled time in minutes since the epoch>`, labelled
  `ray.io/cronjob-name` and annotated `ray.io/cronjob-scheduled-timestamp`; a RayJob of that name
  already there means the time was handled;
- the first time considered is the one after `status.lastScheduleTime`, or after the object's
  creation.

Where this operator differs, each for robustness:
- after an outage or a suspension only the most recent missed time starts (KubeRay starts every
  missed one, one per reconcile: a day away from `* * * * *` would make 1,440 RayJobs, each with
  its own cluster); `startingDeadlineSeconds` bounds how late it may be;
- `concurrencyPolicy` (Allow, KubeRay's behaviour; Forbid; Replace) and the history limits, as a
  Kubernetes CronJob has them;
- the status also says `lastSuccessfulTime`, `nextScheduleTime` and the `active` RayJobs.

Bounded: one pass over the RayCronJob's own RayJobs; the schedule's search is bounded
(`cron.CronSchedule`).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ray_operator.cron import CronSchedule
from ray_operator.spec.dashboard_models import SUCCEEDED
from ray_operator.spec.raycronjob import SCHEDULED_TIMESTAMP_ANNOTATION, rayjob_name
from ray_operator.spec.times import format_time
from ray_operator.status.rayjob import COMPLETE, FAILED_STATE, VALIDATION_FAILED
from ray_operator.status.rayservice import parse_time

if TYPE_CHECKING:
    from ray_io.v1_views import RayCronJob, RayJob

JSON = dict[str, Any]

FINISHED_STATES: Final = frozenset({COMPLETE, FAILED_STATE, VALIDATION_FAILED})

ALLOW: Final = "Allow"
FORBID: Final = "Forbid"
REPLACE: Final = "Replace"


@dataclass(frozen=True, slots=True)
class ChildJob:
    """What the plan needs of one RayJob the RayCronJob created."""

    name: str
    scheduled: datetime.datetime | None
    """Its scheduled time (annotation); None when unreadable."""
    finished: bool
    succeeded: bool


@dataclass(frozen=True, slots=True)
class CronPlan:
    """What to do now."""

    create_for: datetime.datetime | None
    """The scheduled time to create a RayJob for (None: nothing is due)."""
    delete: tuple[str, ...]
    """RayJobs to delete: beyond the history limits, or running when Replace starts another."""
    forbidden: datetime.datetime | None
    """A due time skipped because an earlier RayJob runs (Forbid)."""
    status: JSON
    requeue_after: float | None
    """Seconds until the next scheduled time (None: none, or suspended)."""


def child_job(job: RayJob) -> ChildJob:
    """A RayJob as the plan sees it."""
    status = job.get("status", {})
    state = status.get("jobDeploymentStatus", "")
    annotations = job["metadata"].get("annotations") or {}
    return ChildJob(
        name=job["metadata"]["name"],
        scheduled=parse_time(annotations.get(SCHEDULED_TIMESTAMP_ANNOTATION)),
        finished=state in FINISHED_STATES,
        succeeded=state == COMPLETE and status.get("jobStatus") == SUCCEEDED,
    )


def plan(
    cron: RayCronJob,
    jobs: Sequence[ChildJob],
    schedule: CronSchedule,
    *,
    now: datetime.datetime,
) -> CronPlan:
    """What the RayCronJob should do at `now`, given the RayJobs it created."""
    spec = cron.get("spec", {})
    old_status: Mapping[str, Any] = cron.get("status") or {}
    delete = list(_beyond_history_limits(spec, jobs))
    active = [job for job in jobs if not job.finished]
    last_scheduled = parse_time(old_status.get("lastScheduleTime"))
    create_for = forbidden = None
    due = None if spec.get("suspend") else _due(cron, schedule, last_scheduled, now=now)
    if due is not None:
        policy = spec.get("concurrencyPolicy") or ALLOW
        exists = rayjob_name(cron["metadata"]["name"], due) in {job.name for job in jobs}
        if exists:
            last_scheduled = due  # handled before (the status write was lost)
        elif active and policy == FORBID:
            forbidden = due
        else:
            if policy == REPLACE:
                delete.extend(job.name for job in active)
                active = []
            create_for = last_scheduled = due
    upcoming = None if spec.get("suspend") else schedule.next_after(now)
    active_names = {job.name for job in active}
    if create_for is not None:
        active_names.add(rayjob_name(cron["metadata"]["name"], create_for))
    status = _status(old_status, jobs, sorted(active_names), last_scheduled, upcoming)
    requeue = None if upcoming is None else max(0.0, (upcoming - now).total_seconds())
    return CronPlan(create_for, tuple(dict.fromkeys(delete)), forbidden, status, requeue)


def _due(
    cron: RayCronJob,
    schedule: CronSchedule,
    last_scheduled: datetime.datetime | None,
    *,
    now: datetime.datetime,
) -> datetime.datetime | None:
    """The most recent scheduled time not yet handled, within the starting deadline."""
    since = last_scheduled or parse_time(cron["metadata"].get("creationTimestamp")) or now
    deadline = cron.get("spec", {}).get("startingDeadlineSeconds")
    if isinstance(deadline, int) and not isinstance(deadline, bool):
        # Bounded: at most ~292 years back, where datetime stops.
        window = datetime.timedelta(seconds=min(deadline, 9_000_000_000))
        since = max(since, now - window)
    due: datetime.datetime | None = schedule.last_at_or_before(now, since=since)
    return due


def _beyond_history_limits(spec: Mapping[str, Any], jobs: Sequence[ChildJob]) -> list[str]:
    """Finished RayJobs beyond successfulJobsHistoryLimit / failedJobsHistoryLimit, oldest
    first; unset limits keep everything (as KubeRay does)."""
    doomed: list[str] = []
    for field, succeeded in (
        ("successfulJobsHistoryLimit", True),
        ("failedJobsHistoryLimit", False),
    ):
        limit = spec.get(field)
        if not isinstance(limit, int) or isinstance(limit, bool):
            continue
        finished = [job for job in jobs if job.finished and job.succeeded == succeeded]
        finished.sort(key=_age_key, reverse=True)
        doomed.extend(job.name for job in finished[max(limit, 0) :])
    return doomed


def _age_key(job: ChildJob) -> tuple[float, str]:
    return (job.scheduled.timestamp() if job.scheduled else float("-inf"), job.name)


def _status(
    old: Mapping[str, Any],
    jobs: Sequence[ChildJob],
    active: Sequence[str],
    last_scheduled: datetime.datetime | None,
    upcoming: datetime.datetime | None,
) -> JSON:
    status: JSON = {
        key: value
        for key, value in old.items()
        if key not in ("lastScheduleTime", "nextScheduleTime", "active")
    }
    if last_scheduled is not None:
        status["lastScheduleTime"] = format_time(last_scheduled)
    if upcoming is not None:
        status["nextScheduleTime"] = format_time(upcoming)
    succeeded = [job.scheduled for job in jobs if job.succeeded and job.scheduled is not None]
    known = parse_time(old.get("lastSuccessfulTime"))
    latest = max([*succeeded, *([known] if known else [])], default=None)
    if latest is not None:
        status["lastSuccessfulTime"] = format_time(latest)
    if active:
        status["active"] = list(active)
    return status
