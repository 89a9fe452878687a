"""Specification: what an in-place update of a RayService's cluster writes (KubeRay's
`modifyRayCluster` over `constructRayClusterForRayService`), and that groups appended at the end
never prepare a new cluster (KubeRay's `shouldPrepareNewCluster`), on the RayService and
RayCluster KubeRay created for ../shared/fixtures/kuberay-samples/ray-service.sample.yaml."""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders import rayservice as build
from ray_operator.spec import kuberay_names as names
from ray_operator.status import rayservice as rules

from tests.builders.kuberay_created import created_objects


def _service_and_cluster() -> tuple[dict[str, Any], dict[str, Any]]:
    objects = created_objects("ray-service.sample.yaml")
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    (cluster,) = [o for o in objects if o["kind"] == "RayCluster"]
    service, cluster = copy.deepcopy(service), copy.deepcopy(cluster)
    service["metadata"].setdefault("uid", "rayservice-uid")  # the fixtures keep no uids
    cluster["metadata"].setdefault("uid", "raycluster-uid")
    return service, cluster


def _with_group_appended(service: dict[str, Any]) -> dict[str, Any]:
    groups = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    groups.append({**copy.deepcopy(groups[0]), "groupName": "appended"})
    return service


def test_the_update_restamps_hash_group_count_and_version() -> None:
    service, cluster = _service_and_cluster()
    cluster["metadata"]["annotations"][names.KUBERAY_VERSION_ANNOTATION] = "v1.5.1"
    cluster["metadata"]["annotations"][build.CLUSTER_HASH_ANNOTATION] = "STALE"
    _with_group_appended(service)
    body = rules.cluster_updated_in_place(service, cluster)
    annotations = body["metadata"]["annotations"]
    assert annotations[build.CLUSTER_HASH_ANNOTATION] == build.cluster_config_hash(service)
    groups = len(service["spec"]["rayClusterConfig"]["workerGroupSpecs"])
    assert annotations[build.NUM_WORKER_GROUPS_ANNOTATION] == str(groups)
    assert annotations[names.KUBERAY_VERSION_ANNOTATION] == names.KUBERAY_VERSION
    assert body["spec"]["workerGroupSpecs"][-1]["groupName"] == "appended"


def test_the_update_is_a_compare_and_swap_on_the_cluster_it_read() -> None:
    service, cluster = _service_and_cluster()
    cluster["metadata"]["resourceVersion"] = "4242"
    body = rules.cluster_updated_in_place(service, cluster)
    assert body["metadata"]["resourceVersion"] == "4242"
    assert body["metadata"]["uid"] == cluster["metadata"]["uid"]
    assert body["metadata"].get("ownerReferences") == cluster["metadata"].get("ownerReferences")
    assert "status" not in body


def test_the_update_keeps_the_clusters_own_suspend() -> None:
    # Kueue owns `suspend` once the cluster exists: the RayService's value is not written.
    service, cluster = _service_and_cluster()
    service["spec"]["rayClusterConfig"]["suspend"] = False
    cluster["spec"]["suspend"] = True
    assert rules.cluster_updated_in_place(service, cluster)["spec"]["suspend"] is True
    del cluster["spec"]["suspend"]
    assert "suspend" not in rules.cluster_updated_in_place(service, cluster)["spec"]


def test_a_group_appended_at_the_end_prepares_no_new_cluster() -> None:
    service, cluster = _with_group_appended_pair()
    goal = build.cluster_config_hash(service)
    assert not rules.needs_new_cluster(service, goal_hash=goal, active=cluster, pending=None)


def test_a_group_inserted_before_the_others_prepares_a_new_cluster() -> None:
    service, cluster = _service_and_cluster()
    groups = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    groups.insert(0, {**copy.deepcopy(groups[0]), "groupName": "inserted"})
    goal = build.cluster_config_hash(service)
    assert rules.needs_new_cluster(service, goal_hash=goal, active=cluster, pending=None)


def _with_group_appended_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    service, cluster = _service_and_cluster()
    return _with_group_appended(service), cluster
