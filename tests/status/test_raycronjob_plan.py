"""Specification of what a RayCronJob does at a given moment (a fake clock: `now` is an argument):
which scheduled time gets its RayJob, under each concurrency policy and deadline, what the
history limits delete, and the status."""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.builders.raycronjob import build_scheduled_rayjob
from ray_operator.cron import parse_schedule
from ray_operator.spec.raycronjob import rayjob_name
from ray_operator.status.raycronjob import ChildJob, child_job, plan

UTC = datetime.UTC
CREATED = datetime.datetime(2026, 11, 26, 9, 0, 30, tzinfo=UTC)
EVERY_MINUTE = parse_schedule("* * * * *", time_zone="UTC")
HOURLY = parse_schedule("0 * * * *", time_zone="UTC")


def at(hour: int, minute: int, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 11, 26, hour, minute, second, tzinfo=UTC)


def cron(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCronJob",
        "metadata": {
            "name": "nightly",
            "namespace": "ray",
            "uid": "cron-uid",
            "creationTimestamp": "2026-11-26T09:00:30Z",
        },
        "spec": {"schedule": "* * * * *", "jobTemplate": {"entrypoint": "python job.py"}, **spec},
        "status": status or {},
    }


def job(minute: int, *, finished: bool = False, succeeded: bool = False) -> ChildJob:
    scheduled = at(9, minute)
    return ChildJob(rayjob_name("nightly", scheduled), scheduled, finished, succeeded)


def test_nothing_is_due_before_the_first_scheduled_time() -> None:
    result = plan(cron(), [], EVERY_MINUTE, now=at(9, 0, 50))
    assert result.create_for is None
    assert result.status["nextScheduleTime"] == "2026-11-26T09:01:00Z"
    assert result.requeue_after == 10.0


def test_a_due_time_gets_a_rayjob_named_as_kuberay_names_it() -> None:
    result = plan(cron(), [], EVERY_MINUTE, now=at(9, 1, 2))
    assert result.create_for == at(9, 1)
    assert rayjob_name("nightly", at(9, 1)) == f"nightly-{int(at(9, 1).timestamp()) // 60}"
    assert result.status["lastScheduleTime"] == "2026-11-26T09:01:00Z"
    assert result.status["active"] == [rayjob_name("nightly", at(9, 1))]
    assert result.requeue_after == 58.0


def test_after_an_outage_only_the_most_recent_missed_time_starts() -> None:
    # KubeRay would create one RayJob per missed minute: 59 clusters.
    result = plan(
        cron({"lastScheduleTime": "2026-11-26T09:01:00Z"}), [], EVERY_MINUTE, now=at(10, 0, 5)
    )
    assert result.create_for == at(10, 0)


def test_a_starting_deadline_skips_a_time_missed_by_longer() -> None:
    late = cron({"lastScheduleTime": "2026-11-26T09:00:00Z"}, startingDeadlineSeconds=30)
    assert plan(late, [], HOURLY, now=at(10, 0, 29)).create_for == at(10, 0)
    assert plan(late, [], HOURLY, now=at(10, 0, 31)).create_for is None


def test_a_time_whose_rayjob_exists_is_recorded_not_created_again() -> None:
    # The create took effect but its answer, and the status write, were lost.
    result = plan(cron(), [job(1)], EVERY_MINUTE, now=at(9, 1, 10))
    assert result.create_for is None
    assert result.status["lastScheduleTime"] == "2026-11-26T09:01:00Z"


def test_allow_runs_rayjobs_side_by_side() -> None:
    status = {"lastScheduleTime": "2026-11-26T09:01:00Z"}
    result = plan(cron(status), [job(1)], EVERY_MINUTE, now=at(9, 2, 1))
    assert result.create_for == at(9, 2)
    assert result.status["active"] == sorted([job(1).name, rayjob_name("nightly", at(9, 2))])


def test_forbid_skips_while_one_runs_and_starts_once_it_finished() -> None:
    status = {"lastScheduleTime": "2026-11-26T09:01:00Z"}
    forbid = cron(status, concurrencyPolicy="Forbid")
    running = plan(forbid, [job(1)], EVERY_MINUTE, now=at(9, 2, 1))
    assert (running.create_for, running.forbidden) == (None, at(9, 2))
    assert running.status["lastScheduleTime"] == "2026-11-26T09:01:00Z"
    done = plan(forbid, [job(1, finished=True)], EVERY_MINUTE, now=at(9, 2, 30))
    assert done.create_for == at(9, 2)


def test_replace_deletes_the_running_rayjobs_first() -> None:
    status = {"lastScheduleTime": "2026-11-26T09:01:00Z"}
    result = plan(
        cron(status, concurrencyPolicy="Replace"), [job(1)], EVERY_MINUTE, now=at(9, 2, 1)
    )
    assert result.delete == (job(1).name,)
    assert result.create_for == at(9, 2)


def test_suspended_creates_nothing_and_has_no_next_time() -> None:
    result = plan(cron(suspend=True), [], EVERY_MINUTE, now=at(9, 5))
    assert result.create_for is None
    assert "nextScheduleTime" not in result.status
    assert result.requeue_after is None


def test_history_limits_delete_the_oldest_finished_rayjobs_of_each_outcome() -> None:
    jobs = [
        job(1, finished=True, succeeded=True),
        job(2, finished=True, succeeded=True),
        job(3, finished=True, succeeded=True),
        job(4, finished=True),
        job(5, finished=True),
        job(6),
    ]
    status = {"lastScheduleTime": "2026-11-26T09:06:00Z"}
    limited = cron(status, successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0)
    result = plan(limited, jobs, EVERY_MINUTE, now=at(9, 6, 30))
    assert set(result.delete) == {job(1).name, job(2).name, job(4).name, job(5).name}
    unlimited = plan(cron(status), jobs, EVERY_MINUTE, now=at(9, 6, 30))
    assert unlimited.delete == ()  # as KubeRay: everything kept


def test_the_last_successful_time_is_the_latest_succeeded_run() -> None:
    jobs = [job(1, finished=True, succeeded=True), job(2, finished=True), job(3)]
    status = {"lastScheduleTime": "2026-11-26T09:03:00Z"}
    result = plan(cron(status), jobs, EVERY_MINUTE, now=at(9, 3, 30))
    assert result.status["lastSuccessfulTime"] == "2026-11-26T09:01:00Z"
    assert result.status["active"] == [job(3).name]


def test_the_rayjob_is_kuberays_labelled_annotated_and_owned() -> None:
    body = build_scheduled_rayjob(cron(), at(9, 1))
    assert body["metadata"]["name"] == rayjob_name("nightly", at(9, 1))
    assert body["metadata"]["labels"] == {"ray.io/cronjob-name": "nightly"}
    assert body["metadata"]["annotations"] == {
        "ray.io/cronjob-scheduled-timestamp": "2026-11-26T09:01:00Z"
    }
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("RayCronJob", "cron-uid", True)
    assert body["spec"] == {"entrypoint": "python job.py"}
    # And read back, as the planner sees it.
    assert child_job(body).scheduled == at(9, 1)  # type: ignore[arg-type]


def test_a_time_zone_moves_the_scheduled_instant() -> None:
    taipei = parse_schedule("45 21 * * *", time_zone="Asia/Taipei")
    result = plan(
        cron(schedule="45 21 * * *", timeZone="Asia/Taipei"),
        [],
        taipei,
        now=datetime.datetime(2026, 11, 26, 13, 45, 5, tzinfo=UTC),
    )
    assert result.create_for == datetime.datetime(2026, 11, 26, 13, 45, tzinfo=UTC)
    assert result.create_for > CREATED


def test_resuming_starts_only_the_most_recent_time_missed_while_suspended() -> None:
    status = {"lastScheduleTime": "2026-11-26T09:01:00Z"}
    resumed = plan(cron(status, suspend=False), [], EVERY_MINUTE, now=at(9, 30, 10))
    assert resumed.create_for == at(9, 30)
    limited = cron(status, suspend=False, startingDeadlineSeconds=5)
    assert plan(limited, [], EVERY_MINUTE, now=at(9, 30, 10)).create_for is None
