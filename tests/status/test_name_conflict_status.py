"""A name taken by an object the cluster does not own: ReplicaFailure, and never `ready`."""

from __future__ import annotations

import datetime

from ray_operator.status import ReplicaFailure, compute_status
from ray_operator.status.raycluster import name_conflict_reason

from tests.builders.clusters import raycluster
from tests.status.observed import head, pod

NOW = datetime.datetime(2026, 11, 23, 5, 0, 0, tzinfo=datetime.UTC)
CONFLICT = ReplicaFailure(
    name_conflict_reason("Service"), "Service ns1/demo-head-svc exists and ...", blocks_ready=True
)


def test_a_name_conflict_is_a_replica_failure_and_withdraws_ready() -> None:
    cluster = raycluster()
    pods = [head(), pod("demo-workers-worker-aaaaa")]
    cluster["status"] = compute_status(cluster, pods=pods, services=[], now=NOW)
    assert cluster["status"]["state"] == "ready"
    status = compute_status(cluster, pods=pods, services=[], now=NOW, failure=CONFLICT)
    assert "state" not in status
    [failure] = [c for c in status["conditions"] if c["type"] == "ReplicaFailure"]
    assert (failure["status"], failure["reason"]) == ("True", "FailedCreateService")


def test_an_ordinary_pod_failure_leaves_a_ready_state_alone() -> None:
    cluster = raycluster()
    pods = [head(), pod("demo-workers-worker-aaaaa")]
    cluster["status"] = compute_status(cluster, pods=pods, services=[], now=NOW)
    failure = ReplicaFailure("FailedCreateWorkerPod", "quota")
    assert (
        compute_status(cluster, pods=pods, services=[], now=NOW, failure=failure)["state"]
        == "ready"
    )
