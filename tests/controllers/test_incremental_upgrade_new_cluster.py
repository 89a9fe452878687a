"""A pending cluster built during an incremental upgrade starts without worker `replicas` (it
grows with its Serve capacity through the autoscaler), as KubeRay builds it; the first cluster,
and clusters of other upgrade types, keep theirs."""

from __future__ import annotations

from typing import Any

from ray_operator.builders.rayservice import build_cluster_for_service
from ray_operator.status.incremental_upgrade_pass import strip_worker_replicas


def rayservice(kind: str, *, active: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "fruit", "namespace": "shop", "uid": "uid"},
        "spec": {
            "upgradeStrategy": {"type": kind},
            "rayClusterConfig": {
                "enableInTreeAutoscaling": True,
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head"}]}}},
                "workerGroupSpecs": [
                    {"groupName": "small", "replicas": 2, "minReplicas": 1, "maxReplicas": 4}
                ],
            },
        },
        "status": {"activeServiceStatus": {"rayClusterName": active}} if active else {},
    }


def replicas(service: dict[str, Any]) -> list[Any]:
    cluster = strip_worker_replicas(service, build_cluster_for_service(service, name="fruit-x"))
    return [group.get("replicas") for group in cluster["spec"]["workerGroupSpecs"]]


def test_the_new_cluster_of_an_incremental_upgrade_has_no_worker_replicas() -> None:
    assert replicas(rayservice("NewClusterWithIncrementalUpgrade", active="fruit-a")) == [None]


def test_the_first_cluster_and_other_upgrade_types_keep_their_replicas() -> None:
    assert replicas(rayservice("NewClusterWithIncrementalUpgrade")) == [2]
    assert replicas(rayservice("NewCluster", active="fruit-a")) == [2]
