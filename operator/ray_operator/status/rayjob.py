"""The RayJob state machine's decisions, as pure functions over a RayJob and its status dict.

`jobDeploymentStatus` is the state (KubeRay's names; the empty string is New):

    New ──▶ Initializing ──▶ Running ──▶ Complete
                │   │           │  └───▶ Failed ──(backoffLimit left)──▶ Retrying ──▶ New
                │   └─▶ Waiting ┘ (InteractiveMode)
                └───────────────┴──(suspend)──▶ Suspending ──▶ Suspended ──(resume)──▶ New
    (invalid spec) ─▶ ValidationFailed

Each function takes the current status (a dict, never mutated) and returns the next one, or None
when its rule does not apply; the controller (`controllers/rayjob.py`) runs them in KubeRay's
order and does the I/O between them. Times are RFC 3339 strings, as the API stores them.
Once Complete or Failed, `deletion_plan` (or `shutdown_due_at`) says what to delete and when;
in K8sJobMode the submitter Job, in SidecarMode the head Pod's submitter container, must have
finished before a terminal Ray job ends the run.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_operator.spec.dashboard_models import FAILED, SUCCEEDED, JobInfo, is_job_terminal
from ray_operator.spec.times import format_time

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayJob


JSON = dict[str, Any]
Object = Mapping[str, Any]

NEW = ""
INITIALIZING = "Initializing"
RUNNING = "Running"
COMPLETE = "Complete"
FAILED_STATE = "Failed"
VALIDATION_FAILED = "ValidationFailed"
SUSPENDING = "Suspending"
SUSPENDED = "Suspended"
RETRYING = "Retrying"
WAITING = "Waiting"
TERMINAL_STATES = frozenset({COMPLETE, FAILED_STATE})

# Reasons (KubeRay's JobFailedReason).
SUBMISSION_FAILED = "SubmissionFailed"
DEADLINE_EXCEEDED = "DeadlineExceeded"
PRE_RUNNING_DEADLINE_EXCEEDED = "PreRunningDeadlineExceeded"
APP_FAILED = "AppFailed"
GRACE_PERIOD_EXCEEDED = "JobDeploymentStatusTransitionGracePeriodExceeded"
STATUS_CHECK_TIMEOUT_EXCEEDED = "JobStatusCheckTimeoutExceeded"
VALIDATION_FAILED_REASON = "ValidationFailed"

# KubeRay's defaults (utils/constant.go): how long a terminal Ray job may wait for its
# deployment status to follow, and how long status checks may fail before the RayJob fails.
TRANSITION_GRACE_PERIOD_SECONDS = 300
STATUS_CHECK_TIMEOUT_SECONDS = 300
# How long a Ray job may stay non-terminal after its submitter ended (KubeRay's
# DefaultSubmitterFinishedTimeout).
SUBMITTER_FINISHED_TIMEOUT_SECONDS = 30

CLUSTER_SELECTOR_KEY = "ray.io/cluster"
# The SidecarMode submitter's container name in the head Pod (KubeRay's SubmitterContainerName).
SUBMITTER_CONTAINER_NAME = "ray-job-submitter"
# Restarts of a SidecarSubmitterRestart submitter before the RayJob fails (KubeRay's default
# submitter backoffLimit).
SIDECAR_SUBMITTER_RESTART_LIMIT = 2


def state(status: Object) -> str:
    """The `jobDeploymentStatus` ("" for New)."""
    return str(status.get("jobDeploymentStatus") or NEW)


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def spec_of(rayjob: RayJob) -> Object:
    return rayjob.get("spec") or {}


def uses_cluster_selector(rayjob: RayJob) -> bool:
    return bool(spec_of(rayjob).get("clusterSelector"))


def submission_mode(rayjob: RayJob) -> str:
    return str(spec_of(rayjob).get("submissionMode") or "K8sJobMode")


def has_submitter(rayjob: RayJob) -> bool:
    return submission_mode(rayjob) in ("K8sJobMode", "SidecarMode")


# --- New ------------------------------------------------------------------------------------


def initialized(
    rayjob: RayJob, status: Object, *, now: datetime.datetime, cluster_name: str, submission_id: str
) -> JSON:
    """New → Initializing, with the submission id and cluster name chosen *before* anything is
    created or submitted, so a restart can never submit twice or create a second cluster."""
    new = copy.deepcopy(dict(status))
    spec = spec_of(rayjob)
    if submission_mode(rayjob) != "InteractiveMode" and not new.get("jobId"):
        new["jobId"] = spec.get("jobId") or submission_id
    if not new.get("rayClusterName"):
        selected = (spec.get("clusterSelector") or {}).get(CLUSTER_SELECTOR_KEY)
        new["rayClusterName"] = selected or cluster_name
    new["jobDeploymentStatus"] = INITIALIZING
    new["startTime"] = format_time(now)
    return new


# --- guards checked in Initializing / Running -----------------------------------------------


def suspending(rayjob: RayJob, status: Object) -> JSON | None:
    """Initializing/Running → Suspending when `spec.suspend` is set."""
    if not spec_of(rayjob).get("suspend") or state(status) not in (INITIALIZING, RUNNING):
        return None
    return {**status, "jobDeploymentStatus": SUSPENDING}


def active_deadline_passed(
    rayjob: RayJob, status: Object, *, now: datetime.datetime
) -> JSON | None:
    """→ Failed/DeadlineExceeded once `activeDeadlineSeconds` have passed since startTime."""
    seconds = spec_of(rayjob).get("activeDeadlineSeconds")
    started = parse_time(status.get("startTime"))
    if seconds is None or started is None or now < started + datetime.timedelta(seconds=seconds):
        return None
    return _failed(
        status,
        DEADLINE_EXCEEDED,
        f"The RayJob has passed the activeDeadlineSeconds. StartTime: "
        f"{status.get('startTime')}. ActiveDeadlineSeconds: {seconds}",
    )


def pre_running_deadline_passed(
    rayjob: RayJob, status: Object, *, now: datetime.datetime
) -> JSON | None:
    """→ Failed/PreRunningDeadlineExceeded when Running was not reached in time."""
    seconds = spec_of(rayjob).get("preRunningDeadlineSeconds")
    started = parse_time(status.get("startTime"))
    if seconds is None or started is None or now < started + datetime.timedelta(seconds=seconds):
        return None
    return _failed(
        status,
        PRE_RUNNING_DEADLINE_EXCEEDED,
        f"The RayJob has passed the preRunningDeadlineSeconds. StartTime: "
        f"{status.get('startTime')}. PreRunningDeadlineSeconds: {seconds}",
    )


def grace_period_passed(status: Object, *, now: datetime.datetime) -> JSON | None:
    """Running with a terminal Ray job for too long (the submitter never finished) → terminal."""
    ended = parse_time((status.get("rayJobInfo") or {}).get("endTime"))
    if (
        state(status) != RUNNING
        or not is_job_terminal(status.get("jobStatus"))
        or ended is None
        or now < ended + datetime.timedelta(seconds=TRANSITION_GRACE_PERIOD_SECONDS)
    ):
        return None
    new = {
        **status,
        "jobDeploymentStatus": (FAILED_STATE if status.get("jobStatus") == FAILED else COMPLETE),
    }
    new["reason"] = GRACE_PERIOD_EXCEEDED
    new["message"] = (
        "JobDeploymentStatus does not transition to Complete or Failed within the "
        "grace period after JobStatus reaches a terminal state."
    )
    return new


def status_check_timed_out(
    status: Object, *, now: datetime.datetime, not_before: datetime.datetime | None = None
) -> JSON | None:
    """→ Failed when the dashboard has not answered for `STATUS_CHECK_TIMEOUT_SECONDS`, counted
    from `jobStatusCheckFailureStartTime` but from `not_before` at the earliest (when this
    operator began watching: a failure start recorded by a previous operator is not trusted)."""
    since = parse_time(status.get("jobStatusCheckFailureStartTime"))
    if since is None:
        return None
    if not_before is not None:
        since = max(since, not_before)
    if now < since + datetime.timedelta(seconds=STATUS_CHECK_TIMEOUT_SECONDS):
        return None
    since_text = status.get("jobStatusCheckFailureStartTime")
    return _failed(
        status,
        STATUS_CHECK_TIMEOUT_EXCEEDED,
        f"Job status checks have been failing since {since_text}; "
        f"exceeded timeout of {STATUS_CHECK_TIMEOUT_SECONDS}s",
    )


def status_check_failed(status: Object, *, now: datetime.datetime) -> JSON:
    """Remember when dashboard checks started failing (first failure only)."""
    if status.get("jobStatusCheckFailureStartTime"):
        return dict(status)
    return {**status, "jobStatusCheckFailureStartTime": format_time(now)}


# --- Running --------------------------------------------------------------------------------


def submitter_failed(status: Object, submitter: Object | None) -> JSON | None:
    """The submitter Job failed (backoffLimit reached): → Failed (AppFailed or SubmissionFailed)."""
    condition = _job_condition(submitter, "Failed")
    if condition is None:
        return None
    return _submitter_gave_up(
        status,
        f"Job submission has failed. Reason: {condition.get('reason', '')}. "
        f"Message: {condition.get('message', '')}",
    )


def sidecar_failed(
    status: Object, head_pod: Object | None, *, restartable: bool = False
) -> JSON | None:
    """SidecarMode: the head Pod is gone, or its submitter container exited non-zero → Failed
    (KubeRay's `checkSubmitterAndUpdateStatusIfNeeded`: `ray job submit` exits 1 when the job
    failed, so AppFailed when the dashboard already said FAILED, else SubmissionFailed).
    A `restartable` submitter (the SidecarSubmitterRestart gate) fails only once it has
    restarted `SIDECAR_SUBMITTER_RESTART_LIMIT` times."""
    if head_pod is None:
        return _failed(status, APP_FAILED, "Ray head pod not found.")
    if restartable:
        return _sidecar_restarts_exhausted(status, head_pod)
    terminated = _submitter_terminated(head_pod)
    if terminated is None or not terminated.get("exitCode"):
        return None
    return _submitter_gave_up(
        status,
        f"Ray head pod container {SUBMITTER_CONTAINER_NAME} terminated with exit code "
        f"{terminated.get('exitCode')}: {terminated.get('reason', '')}",
    )


def _sidecar_restarts_exhausted(status: Object, head_pod: Object) -> JSON | None:
    # KubeRay's `checkIsRestartCountExceeded`: only a container that has ended once (lastState)
    # counts, one that has since ended with 0 never; the limit is KubeRay's default submitter
    # backoffLimit, as submitterConfig is refused in SidecarMode.
    container = _submitter_status(head_pod)
    if not (container.get("lastState") or {}).get("terminated"):
        return None
    terminated = (container.get("state") or {}).get("terminated")
    if terminated is not None and terminated.get("exitCode") == 0:
        return None
    if int(container.get("restartCount") or 0) < SIDECAR_SUBMITTER_RESTART_LIMIT:
        return None
    return _submitter_gave_up(
        status,
        f"Ray head pod submitter container {SUBMITTER_CONTAINER_NAME} terminated after "
        "exceeding the maximum restart count",
    )


def sidecar_finished_at(head_pod: Object | None) -> str | None:
    """When the head Pod's submitter container ended (either way), or None while it runs."""
    terminated = _submitter_terminated(head_pod)
    if terminated is None:
        return None
    return str(terminated.get("finishedAt") or "") or None


def _submitter_terminated(head_pod: Object | None) -> Mapping[str, Any] | None:
    return (_submitter_status(head_pod).get("state") or {}).get("terminated")


def _submitter_status(head_pod: Object | None) -> Mapping[str, Any]:
    for container in ((head_pod or {}).get("status") or {}).get("containerStatuses") or ():
        if container.get("name") == SUBMITTER_CONTAINER_NAME:
            return container  # type: ignore[no-any-return]
    return {}


def submitter_finished_at(submitter: Object | None) -> str | None:
    """When the submitter Job completed or failed, or None while it runs."""
    condition = _job_condition(submitter, "Complete") or _job_condition(submitter, "Failed")
    if condition is None:
        return None
    return str(condition.get("lastTransitionTime") or "") or None


def submitter_finished_too_long_ago(
    status: Object, *, finished_at: str | None, now: datetime.datetime
) -> JSON | None:
    """The submitter ended `SUBMITTER_FINISHED_TIMEOUT_SECONDS` ago and the Ray job is still
    not terminal: → Failed (KubeRay's `checkSubmitterFinishedTimeoutAndUpdateStatusIfNeeded`)."""
    finished = parse_time(finished_at)
    if finished is None or now < finished + datetime.timedelta(
        seconds=SUBMITTER_FINISHED_TIMEOUT_SECONDS
    ):
        return None
    new = _failed(
        status,
        GRACE_PERIOD_EXCEEDED,
        f"The RayJob submitter finished at {finished_at} but the ray job did not reach "
        f"terminal state within {SUBMITTER_FINISHED_TIMEOUT_SECONDS}s",
    )
    new["jobStatus"] = FAILED
    return new


def with_job_info(
    rayjob: RayJob, status: Object, *, info: JobInfo, submitter_finished: bool
) -> JSON:
    """Running + what the dashboard says → still Running, Complete or Failed (AppFailed).

    With a submitter, a terminal Ray job counts only once the submitter finished too, so its
    logs are complete (kuberay#1919).
    """
    new = dict(status)
    new.pop("jobStatusCheckFailureStartTime", None)
    terminal = info.terminal and (submitter_finished or not has_submitter(rayjob))
    deployment, reason = RUNNING, ""
    if terminal:
        deployment = FAILED_STATE if info.status == FAILED else COMPLETE
        reason = APP_FAILED if info.status == FAILED else ""
    new.update(jobStatus=info.status, jobDeploymentStatus=deployment, message=info.message)
    if reason:
        new["reason"] = reason
    else:
        new.pop("reason", None)
    times = dict(new.get("rayJobInfo") or {})
    if info.start_time_ms:
        times["startTime"] = format_time(_from_millis(info.start_time_ms))
    if info.end_time_ms:
        times["endTime"] = format_time(_from_millis(info.end_time_ms))
    if times:
        new["rayJobInfo"] = times
    return new


def missing_job_after_submitter(status: Object) -> JSON:
    """The submitter finished but Ray has no such job: → Failed (AppFailed)."""
    return _failed(status, APP_FAILED, "Submitter completed but Ray job not found in RayCluster.")


# --- Suspending / Retrying / Suspended ------------------------------------------------------


def released(status: Object) -> JSON:
    """Cluster and submitter are gone: Suspending → Suspended, Retrying → New, run fields reset."""
    new = {
        key: value
        for key, value in status.items()
        if key
        not in (
            "rayClusterStatus",
            "rayClusterName",
            "dashboardURL",
            "jobId",
            "message",
            "reason",
            "rayJobInfo",
            "jobStatusCheckFailureStartTime",
            "jobStatus",
        )
    }
    new["jobDeploymentStatus"] = SUSPENDED if state(status) == SUSPENDING else NEW
    return new


def resumed(rayjob: RayJob, status: Object) -> JSON | None:
    """Suspended and `suspend` was cleared → New."""
    if state(status) != SUSPENDED or spec_of(rayjob).get("suspend"):
        return None
    new = dict(status)
    new.pop("jobStatus", None)
    new["jobDeploymentStatus"] = NEW
    return new


# --- after every pass through the state machine ---------------------------------------------


def counted(rayjob: RayJob, status: Object) -> JSON:
    """Count the attempt that just ended and retry while `backoffLimit` allows
    (KubeRay's `checkBackoffLimitAndUpdateStatusIfNeeded`)."""
    new = dict(status)
    failed = int(new.get("failed") or 0) + (1 if state(new) == FAILED_STATE else 0)
    succeeded = int(new.get("succeeded") or 0) + (
        1 if state(new) == COMPLETE and new.get("jobStatus") == SUCCEEDED else 0
    )
    new["failed"], new["succeeded"] = failed, succeeded
    limit = spec_of(rayjob).get("backoffLimit")
    if (
        state(new) == FAILED_STATE
        and limit is not None
        and failed < int(limit) + 1
        and new.get("reason") not in (DEADLINE_EXCEEDED, STATUS_CHECK_TIMEOUT_EXCEEDED)
    ):
        new["jobDeploymentStatus"] = RETRYING
    return new


def with_end_time(old: Object, new: Object, *, now: datetime.datetime) -> JSON:
    """Set `endTime` when the deployment status becomes Complete or Failed."""
    result = dict(new)
    if state(new) in TERMINAL_STATES and state(old) != state(new):
        result["endTime"] = format_time(now)
    return result


def status_changed(old: Object, new: Object) -> bool:
    """Whether the status must be written: anything but the cluster status' own timestamps."""
    return _comparable(old) != _comparable(new)


def shutdown_due_at(rayjob: RayJob, status: Object) -> datetime.datetime | None:
    """When a finished RayJob's cluster goes (`shutdownAfterJobFinishes` + TTL), or None."""
    spec = spec_of(rayjob)
    ended = parse_time(status.get("endTime"))
    if not spec.get("shutdownAfterJobFinishes") or uses_cluster_selector(rayjob) or ended is None:
        return None
    return ended + datetime.timedelta(seconds=int(spec.get("ttlSecondsAfterFinished") or 0))


# --- Complete / Failed: deletionStrategy ---------------------------------------------------

DELETE_NONE = "DeleteNone"
DELETE_WORKERS = "DeleteWorkers"
DELETE_CLUSTER = "DeleteCluster"
DELETE_SELF = "DeleteSelf"
# When several rules are due at once, the most destructive one runs (KubeRay's
# `selectMostImpactfulRule`); the others are then done by it or no longer matter.
_IMPACT = {DELETE_NONE: 1, DELETE_WORKERS: 2, DELETE_CLUSTER: 3, DELETE_SELF: 4}


@dataclass(frozen=True, slots=True)
class DeletionPlan:
    """What a finished RayJob's `deletionStrategy` asks for now, and when to look again."""

    action: str | None
    """The policy to carry out now (DeleteWorkers, DeleteCluster, DeleteSelf), or None."""
    next_due: datetime.datetime | None
    """When the next rule falls due (None: no rule is pending)."""


def deletion_plan(
    rayjob: RayJob, status: Object, *, cluster: RayCluster | None, now: datetime.datetime
) -> DeletionPlan | None:
    """The `deletionStrategy` of a Complete/Failed RayJob (KubeRay's `handleDeletionRules` and
    `handleLegacyDeletionPolicy`); None when it has none (then `shutdownAfterJobFinishes` rules).

    `cluster` is the RayJob's RayCluster as cached (None when gone): a policy whose effect is
    already there (cluster deleting or gone, every worker group suspended) is not done again.
    """
    strategy = spec_of(rayjob).get("deletionStrategy")
    ended = parse_time(status.get("endTime"))
    if not strategy or uses_cluster_selector(rayjob):
        return None
    if ended is None:
        return DeletionPlan(None, None)
    rules = strategy.get("deletionRules")
    if rules:
        return _plan_rules(rules, status, cluster=cluster, ended=ended, now=now)
    return _plan_legacy(rayjob, strategy, status, cluster=cluster, ended=ended, now=now)


def _plan_rules(
    rules: list[Any],
    status: Object,
    *,
    cluster: RayCluster | None,
    ended: datetime.datetime,
    now: datetime.datetime,
) -> DeletionPlan:
    overdue: list[str] = []
    next_due: datetime.datetime | None = None
    for rule in rules:
        condition = rule.get("condition") or {}
        if not _rule_matches(condition, status):
            continue
        due = ended + datetime.timedelta(seconds=int(condition.get("ttlSeconds") or 0))
        if now < due:
            next_due = due if next_due is None else min(next_due, due)
        elif not deletion_done(str(rule.get("policy")), cluster):
            overdue.append(str(rule.get("policy")))
    action = max(overdue, key=lambda policy: _IMPACT.get(policy, 0)) if overdue else None
    return DeletionPlan(action, next_due)


def _rule_matches(condition: Object, status: Object) -> bool:
    # The webhook makes sure exactly one of the two is set.
    if condition.get("jobStatus") is not None:
        return bool(condition["jobStatus"] == status.get("jobStatus"))
    return bool(condition.get("jobDeploymentStatus") == state(status))


def _plan_legacy(
    rayjob: RayJob,
    strategy: Object,
    status: Object,
    *,
    cluster: RayCluster | None,
    ended: datetime.datetime,
    now: datetime.datetime,
) -> DeletionPlan:
    """`onSuccess`/`onFailure` (deprecated): by the Ray job's outcome, after the spec's TTL."""
    outcome = {SUCCEEDED: "onSuccess", FAILED: "onFailure"}.get(str(status.get("jobStatus")))
    if outcome is None:
        return DeletionPlan(None, None)
    policy = str((strategy.get(outcome) or {}).get("policy") or DELETE_NONE)
    ttl = int(spec_of(rayjob).get("ttlSecondsAfterFinished") or 0)
    due = ended + datetime.timedelta(seconds=ttl)
    if now < due:
        return DeletionPlan(None, due)
    return DeletionPlan(None if deletion_done(policy, cluster) else policy, None)


def deletion_done(policy: str, cluster: RayCluster | None) -> bool:
    """Whether the effect of `policy` is already there (KubeRay's `isDeletionActionCompleted`)."""
    if policy == DELETE_NONE:
        return True
    if policy == DELETE_SELF:
        return False  # We are still here.
    if cluster is None or cluster.get("metadata", {}).get("deletionTimestamp"):
        return True
    if policy == DELETE_WORKERS:
        groups = cluster.get("spec", {}).get("workerGroupSpecs") or ()
        return all(group.get("suspend") is True for group in groups)
    return False


def validation_failed(status: Object, message: str) -> JSON:
    return {
        **status,
        "jobDeploymentStatus": VALIDATION_FAILED,
        "reason": VALIDATION_FAILED_REASON,
        "message": message,
    }


def _submitter_gave_up(status: Object, message: str) -> JSON:
    """Failed: AppFailed when Ray already said the job failed (the submitter only reported it),
    else SubmissionFailed with `message`."""
    if status.get("jobStatus") == FAILED:
        return {**status, "jobDeploymentStatus": FAILED_STATE, "reason": APP_FAILED}
    return _failed(status, SUBMISSION_FAILED, message)


def _failed(status: Object, reason: str, message: str) -> JSON:
    return {**status, "jobDeploymentStatus": FAILED_STATE, "reason": reason, "message": message}


def _job_condition(job: Object | None, kind: str) -> Mapping[str, Any] | None:
    for condition in ((job or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition  # type: ignore[no-any-return]
    return None


def _from_millis(millis: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC)


def _comparable(status: Object) -> JSON:
    result = copy.deepcopy(dict(status))
    cluster = result.get("rayClusterStatus")
    if isinstance(cluster, dict):
        cluster.pop("lastUpdateTime", None)
        for condition in cluster.get("conditions") or ():
            condition.pop("lastTransitionTime", None)
    return result
