"""The status we compute for a cluster KubeRay ran equals the status KubeRay wrote (pure).

For each RayCluster KubeRay's own operator ran for its samples (`kuberay-created/`), from its
Pods and Services as KubeRay left them: nothing to write but the timestamp, so a takeover
writes no status (KubeRay's counters are `omitempty`: a 0 is no field, ours too) — except our
PodsWaiting condition, which KubeRay lacks, where a Pod it left waits (a worker that no node can
take, in its label-selector sample: the very case ray-operator reports and KubeRay does not).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from ray_operator.status import waiting
from ray_operator.status.raycluster import compute_status, status_changed

from tests.takeover.staging import fixture_files, load_fixture

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


def clusters_kuberay_ran() -> list[tuple[str, str]]:
    return [
        (file_name, obj["metadata"]["name"])
        for file_name in fixture_files()
        for obj in load_fixture(file_name)
        if obj["kind"] == "RayCluster" and obj.get("status")
    ]


def _owned_by(obj: dict[str, Any], name: str) -> bool:
    references = obj["metadata"].get("ownerReferences") or ()
    return any(r["kind"] == "RayCluster" and r["name"] == name for r in references)


@pytest.mark.parametrize(("file_name", "name"), clusters_kuberay_ran())
def test_the_status_kuberay_wrote_needs_no_write(file_name: str, name: str) -> None:
    objects = load_fixture(file_name)
    [cluster] = [o for o in objects if o["kind"] == "RayCluster" and o["metadata"]["name"] == name]
    pods = [o for o in objects if o["kind"] == "Pod" and _owned_by(o, name)]
    services = [o for o in objects if o["kind"] == "Service" and _owned_by(o, name)]
    new = compute_status(cluster, pods=pods, services=services, now=NOW)
    told = waiting.condition_of(new["conditions"])
    assert (told is not None) == (waiting.pods_waiting(pods) is not None)
    new["conditions"] = [c for c in new["conditions"] if c is not told]
    assert not status_changed(cluster["status"], new), (cluster["status"], new)


def test_the_worker_kuberay_left_unschedulable_is_told_with_the_schedulers_words() -> None:
    objects = load_fixture("ray-cluster-label-selector.yaml")
    [cluster] = [o for o in objects if o["kind"] == "RayCluster"]
    pods = [o for o in objects if o["kind"] == "Pod" and _owned_by(o, "ray-label-cluster")]

    new = compute_status(cluster, pods=pods, services=[], now=NOW)

    told = waiting.condition_of(new["conditions"])
    assert told is not None
    assert told["reason"] == "Unschedulable"
    assert told["message"].startswith(
        "1 Pod cannot be scheduled: ray-label-cluster-large-cpu-group-worker-skkmm: 0/1 nodes are "
        "available: 1 node(s) didn't match Pod's node affinity/selector."
    )


def test_a_cluster_without_workers_has_no_zero_counters() -> None:
    [cluster] = [
        o for o in load_fixture("ray-cluster.autoscaler.yaml") if o["kind"] == "RayCluster"
    ]
    pods = [o for o in load_fixture("ray-cluster.autoscaler.yaml") if o["kind"] == "Pod"]
    new = compute_status(cluster, pods=pods, services=[], now=NOW)
    assert "readyWorkerReplicas" not in new
    assert "availableWorkerReplicas" not in new
