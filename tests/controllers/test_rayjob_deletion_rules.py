"""`spec.deletionStrategy` of a finished RayJob, as KubeRay carries it out (feature gate
RayJobDeletionPolicy, on by default): against the real API server and a real Ray head, and the
pure rules that decide which policy is due.

Rules fall due `ttlSeconds` after the RayJob's `endTime`; of those due, the most destructive one
runs (DeleteSelf > DeleteCluster > DeleteWorkers > DeleteNone), one per pass, and a policy whose
effect is already there is not repeated. DeleteWorkers suspends every worker group of the job's
RayCluster, DeleteCluster deletes it, DeleteSelf deletes the RayJob (its finalizer then cleans up).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from ray_operator.status import rayjob as rules

from tests.controllers.conftest import Harness, eventually
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    head_only_cluster_spec,
    ray_head,
    start_operator,
)
from tests.controllers.rayjobs import rayjob, wait_for_state

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]

ENDED = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
SUCCEEDED_RULES = [
    {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}},
    {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 4}},
    {"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 8}},
    {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED", "ttlSeconds": 0}},
]


def cluster_spec_with_workers() -> dict[str, Any]:
    spec = head_only_cluster_spec()
    worker = {
        "groupName": "small",
        "replicas": 1,
        "minReplicas": 1,
        "maxReplicas": 1,
        "rayStartParams": {},
        "template": {
            "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]}
        },
    }
    return {**spec, "workerGroupSpecs": [worker]}


async def test_deletion_rules_suspend_workers_then_delete_the_cluster_then_the_rayjob(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator()
    job = rayjob(
        "tidy", 'python -c "print(1)"', deletionStrategy={"deletionRules": SUCCEEDED_RULES}
    )
    job["spec"]["rayClusterSpec"] = cluster_spec_with_workers()
    await harness.apply(job)
    status = await wait_for_state(harness, "tidy", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status

    seen: dict[str, float] = {}

    async def step_seen() -> bool:
        clusters = (await harness.get_json("rayclusters"))["items"]
        live = [c for c in clusters if not c["metadata"].get("deletionTimestamp")]
        if live and live[0]["spec"]["workerGroupSpecs"][0].get("suspend") is True:
            seen.setdefault("workers suspended", time.monotonic())
        if not live:
            seen.setdefault("cluster deleted", time.monotonic())
        if not (await harness.get_json("rayjobs"))["items"]:
            seen.setdefault("rayjob deleted", time.monotonic())
        return "rayjob deleted" in seen

    await eventually(step_seen, within=60, what="the RayJob deleted by its DeleteSelf rule")
    assert list(seen) == ["workers suspended", "cluster deleted", "rayjob deleted"], seen
    # TTLs 0, 4 and 8 seconds after the end: the steps come in order, a few seconds apart.
    assert seen["cluster deleted"] - seen["workers suspended"] > 2, seen
    assert seen["rayjob deleted"] - seen["cluster deleted"] > 2, seen
    assert not (await harness.get_json("rayclusters"))["items"]


# --- pure rules ------------------------------------------------------------------------------


def finished(**spec: Any) -> dict[str, Any]:
    job = rayjob("unit", **spec)
    job["metadata"].update(namespace="ns", uid="uid-1")
    return job


SUCCEEDED_STATUS = {
    "jobDeploymentStatus": "Complete",
    "jobStatus": "SUCCEEDED",
    "endTime": "2026-01-01T12:00:00Z",
}
LIVE_CLUSTER = {"metadata": {"name": "c"}, "spec": {"workerGroupSpecs": [{"groupName": "g"}]}}


def plan_at(seconds: int, job: dict[str, Any], cluster: Any = LIVE_CLUSTER) -> Any:
    now = ENDED + datetime.timedelta(seconds=seconds)
    return rules.deletion_plan(job, SUCCEEDED_STATUS, cluster=cluster, now=now)


def test_no_deletion_strategy_leaves_the_decision_to_shutdown_after_job_finishes() -> None:
    assert plan_at(100, finished(shutdownAfterJobFinishes=True)) is None


def test_the_most_destructive_due_rule_runs_first_and_the_next_due_time_is_kept() -> None:
    job = finished(deletionStrategy={"deletionRules": SUCCEEDED_RULES})
    assert plan_at(0, job) == rules.DeletionPlan(
        "DeleteWorkers", ENDED + datetime.timedelta(seconds=4)
    )
    assert plan_at(5, job).action == "DeleteCluster"
    assert plan_at(100, job) == rules.DeletionPlan("DeleteSelf", None)


def test_a_rule_whose_effect_is_there_is_not_repeated() -> None:
    job = finished(deletionStrategy={"deletionRules": SUCCEEDED_RULES[:2]})
    suspended = {"metadata": {"name": "c"}, "spec": {"workerGroupSpecs": [{"suspend": True}]}}
    assert plan_at(1, job, suspended) == rules.DeletionPlan(
        None, ENDED + datetime.timedelta(seconds=4)
    )
    assert plan_at(5, job, cluster=None) == rules.DeletionPlan(None, None)
    deleting = {"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T12:00:05Z"}}
    assert plan_at(5, job, deleting) == rules.DeletionPlan(None, None)


def test_rules_of_another_outcome_never_fall_due() -> None:
    job = finished(deletionStrategy={"deletionRules": SUCCEEDED_RULES[3:]})
    assert plan_at(100, job) == rules.DeletionPlan(None, None)


def test_legacy_on_success_policy_applies_after_the_ttl() -> None:
    strategy = {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteNone"}}
    job = finished(
        deletionStrategy=strategy, shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=10
    )
    assert plan_at(9, job) == rules.DeletionPlan(None, ENDED + datetime.timedelta(seconds=10))
    assert plan_at(10, job) == rules.DeletionPlan("DeleteCluster", None)


def test_a_selected_cluster_is_never_deleted_by_any_rule() -> None:
    job = finished(
        clusterSelector={"ray.io/cluster": "shared"},
        deletionStrategy={"deletionRules": SUCCEEDED_RULES},
    )
    assert plan_at(100, job) is None
