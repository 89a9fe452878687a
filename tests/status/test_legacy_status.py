"""Specification of a legacy cluster.ray.io RayCluster's status: the legacy `phase` scripts read,
and `Converted` and `Ready` conditions mirrored from the ray.io RayCluster serving it."""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.status.legacy import (
    ERROR,
    PENDING,
    RAY_CLUSTER_EXISTS,
    RUNNING,
    Observed,
    compute_status,
    converted_condition,
    status_changed,
)

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)


def ray_cluster(*, state: str | None, head_ready: bool, generation: int = 1) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "HeadPodReady",
                "status": "True" if head_ready else "False",
                "message": "" if head_ready else "the head Pod is not ready",
            }
        ],
    }
    if state:
        status["state"] = state
    return {"metadata": {"name": "c", "generation": generation}, "status": status}


def observed(cluster: dict[str, Any] | None, *, problem: str | None = None) -> Observed:
    return Observed(
        generation=3, cluster_name="c", converted=converted_condition(problem), cluster=cluster
    )


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_ready_ray_cluster_makes_the_legacy_cluster_running() -> None:
    status = compute_status({}, observed(ray_cluster(state="ready", head_ready=True)), now=NOW)
    assert status["phase"] == RUNNING
    assert conditions(status) == {
        "Converted": ("True", "Converted"),
        "Ready": ("True", "RayClusterReady"),
    }
    assert (status["rayClusterName"], status["observedGeneration"]) == ("c", 3)


def test_a_ray_cluster_still_starting_is_pending() -> None:
    for cluster in (
        None,
        ray_cluster(state=None, head_ready=False),
        ray_cluster(state="ready", head_ready=False),  # ready once, its head since lost
    ):
        assert compute_status({}, observed(cluster), now=NOW)["phase"] == PENDING


def test_a_ray_cluster_that_has_not_taken_up_its_new_spec_is_pending() -> None:
    cluster = ray_cluster(state="ready", head_ready=True)
    cluster["metadata"]["generation"] = 2
    status = compute_status({}, observed(cluster), now=NOW)
    assert (status["phase"], conditions(status)["Ready"]) == (
        PENDING,
        ("False", "RayClusterUpdating"),
    )


def test_a_failing_ray_cluster_or_an_unconvertible_spec_is_an_error() -> None:
    failing = ray_cluster(state=None, head_ready=False)
    failing["status"]["conditions"].append(
        {"type": "ReplicaFailure", "status": "True", "message": "quota exceeded"}
    )
    assert compute_status({}, observed(failing), now=NOW)["phase"] == ERROR
    status = compute_status({}, observed(None, problem="spec.headPodType: not found"), now=NOW)
    assert status["phase"] == ERROR
    assert conditions(status)["Converted"] == ("False", "InvalidSpec")


def test_autoscaler_retries_are_kept_as_the_legacy_operator_left_them() -> None:
    old = {"phase": "Running", "autoscalerRetries": 2}
    cluster = ray_cluster(state="ready", head_ready=True)
    assert compute_status(old, observed(cluster), now=NOW)["autoscalerRetries"] == 2
    assert compute_status({}, observed(cluster), now=NOW)["autoscalerRetries"] == 0


def test_the_same_observation_later_writes_nothing() -> None:
    cluster = ray_cluster(state="ready", head_ready=True)
    first = compute_status({}, observed(cluster), now=NOW)
    again = compute_status(first, observed(cluster), now=LATER)
    assert not status_changed(first, again)
    assert again == first


def test_a_ray_cluster_not_ours_is_named_in_converted() -> None:
    state = converted_condition("a RayCluster named c exists", reason=RAY_CLUSTER_EXISTS)
    status = compute_status({}, Observed(generation=1, cluster_name="c", converted=state), now=NOW)
    assert conditions(status)["Converted"] == ("False", RAY_CLUSTER_EXISTS)
    assert status["phase"] == ERROR
