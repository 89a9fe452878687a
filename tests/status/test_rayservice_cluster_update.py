"""Specification: when a RayService's cluster is rewritten in place rather than replaced
(KubeRay's `shouldUpdateCluster`), decided from KubeRay's hash annotations on the RayCluster KubeRay
created for ../shared/fixtures/kuberay-created/ray-service.sample.yaml."""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.status.rayservice import should_update_cluster

from tests.builders.kuberay_created import created_objects


def _service_and_cluster() -> tuple[dict[str, Any], dict[str, Any]]:
    objects = created_objects("ray-service.sample.yaml")
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    (cluster,) = [o for o in objects if o["kind"] == "RayCluster"]
    return copy.deepcopy(service), copy.deepcopy(cluster)


def test_an_unchanged_config_updates_nothing() -> None:
    service, cluster = _service_and_cluster()
    assert not should_update_cluster(service, cluster, active=True, upgrade_in_progress=False)
    assert not should_update_cluster(service, cluster, active=False, upgrade_in_progress=False)


def test_a_worker_group_added_at_the_end_updates_the_cluster_in_place() -> None:
    service, cluster = _service_and_cluster()
    groups = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    groups.append({**copy.deepcopy(groups[0]), "groupName": "added"})
    assert should_update_cluster(service, cluster, active=True, upgrade_in_progress=False)


def test_a_changed_image_is_not_an_in_place_update() -> None:
    service, cluster = _service_and_cluster()
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]
    head["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:other"
    assert not should_update_cluster(service, cluster, active=True, upgrade_in_progress=False)


def test_an_active_cluster_stamped_by_another_kuberay_version_is_restamped() -> None:
    service, cluster = _service_and_cluster()
    cluster["metadata"]["annotations"]["ray.io/kuberay-version"] = "v1.4.2"
    assert should_update_cluster(service, cluster, active=True, upgrade_in_progress=False)
    # During an upgrade only the pending cluster follows the spec.
    assert not should_update_cluster(service, cluster, active=True, upgrade_in_progress=True)


def test_an_unreadable_worker_group_count_compares_as_equal_as_in_kuberay() -> None:
    service, cluster = _service_and_cluster()
    service["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["x"] = "1"
    cluster["metadata"]["annotations"]["ray.io/num-worker-groups"] = "one"
    assert should_update_cluster(service, cluster, active=False, upgrade_in_progress=False)
