"""The status of a cluster that asks for 2^31-1 replicas costs what a small one's does."""

from __future__ import annotations

import datetime
import tracemalloc

from ray_operator.spec.replicas import desired_group_pods, max_group_pods
from ray_operator.status import compute_status

from tests.builders.clusters import raycluster, worker_group
from tests.status.observed import head, pod

INT32_MAX = 2**31 - 1
NOW = datetime.datetime(2026, 11, 23, 5, 0, 0, tzinfo=datetime.UTC)


def test_int32_max_replicas_status_is_computed_in_bounded_memory() -> None:
    groups = [
        worker_group("a", replicas=INT32_MAX, max_replicas=INT32_MAX, numOfHosts=4),
        worker_group("b", replicas=INT32_MAX, max_replicas=INT32_MAX),
    ]
    cluster = raycluster(groups=groups)
    tracemalloc.start()
    try:
        status = compute_status(cluster, pods=[head(), pod("w0", group="b")], services=[], now=NOW)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Sums over groups exceed int32 (the CRD's type): reported clamped, as KubeRay does.
    assert status["desiredWorkerReplicas"] == INT32_MAX
    assert status["maxWorkerReplicas"] == INT32_MAX
    assert status["readyWorkerReplicas"] == 1
    assert peak < 512 * 1024


def test_replica_arithmetic_at_the_bound_is_exact() -> None:
    group = worker_group(replicas=INT32_MAX, max_replicas=INT32_MAX, numOfHosts=8)
    assert desired_group_pods(group) == INT32_MAX * 8
    assert max_group_pods(group) == INT32_MAX * 8
