"""Specification of the RayCluster that serves a legacy cluster.ray.io RayCluster: owned by it,
rewritten only when the legacy object changed, restarted when its annotations change, and never
undoing what the autoscaler did."""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders.legacy_cluster import (
    LEGACY_ANNOTATIONS_HASH_ANNOTATION,
    LEGACY_SPEC_HASH_ANNOTATION,
    head_service_changes,
    is_legacy_operator_pod,
    keep_autoscaler_state,
    legacy_head_service,
    needs_rewrite,
    owned_cluster,
    rewritten_cluster,
)
from ray_operator.spec.hashing import pod_template_hash


def legacy(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "example-cluster",
            "namespace": "ray",
            "uid": "legacy-uid",
            "annotations": annotations,
        },
        "spec": {},
    }


def converted(min_workers: int = 2) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "ray-node", "image": "rayproject/ray:2.9.0"}]}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "example-cluster"},
        "spec": {
            "upgradeStrategy": {"type": "Recreate"},
            "headGroupSpec": {"rayStartParams": {}, "template": copy.deepcopy(template)},
            "workerGroupSpecs": [
                {
                    "groupName": "worker-node",
                    "minReplicas": min_workers,
                    "maxReplicas": 3,
                    "replicas": min_workers,
                    "rayStartParams": {},
                    "template": copy.deepcopy(template),
                }
            ],
        },
    }


def test_the_ray_cluster_is_controlled_by_the_legacy_object_in_its_namespace() -> None:
    cluster = owned_cluster(legacy(), converted())
    assert cluster["metadata"]["namespace"] == "ray"
    assert cluster["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "cluster.ray.io/v1",
            "kind": "RayCluster",
            "name": "example-cluster",
            "uid": "legacy-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_an_unchanged_legacy_object_needs_no_rewrite_whatever_the_autoscaler_did() -> None:
    stored = owned_cluster(legacy(), converted())
    stored["spec"]["workerGroupSpecs"][0]["replicas"] = 3  # the autoscaler scaled up
    stored["spec"]["enableInTreeAutoscaling"] = True  # the API server defaulted something
    assert not needs_rewrite(stored, owned_cluster(legacy(), converted()))


def test_a_changed_spec_needs_a_rewrite() -> None:
    stored = owned_cluster(legacy(), converted(min_workers=2))
    assert needs_rewrite(stored, owned_cluster(legacy(), converted(min_workers=1)))


def test_a_changed_annotation_changes_every_pod_template_and_so_restarts_the_pods() -> None:
    before = owned_cluster(legacy(), converted())
    after = owned_cluster(legacy(**{"try": "again"}), converted())
    assert needs_rewrite(before, after)
    for cluster in (before, after):
        templates = [
            cluster["spec"]["headGroupSpec"]["template"],
            cluster["spec"]["workerGroupSpecs"][0]["template"],
        ]
        marks = {
            t["metadata"]["annotations"][LEGACY_ANNOTATIONS_HASH_ANNOTATION] for t in templates
        }
        assert len(marks) == 1
    # KubeRay's Recreate upgrade replaces the Pods when this hash moves.
    assert pod_template_hash(before) != pod_template_hash(after)


def test_kubectls_last_applied_copy_is_no_annotation_that_restarts() -> None:
    applied = legacy(**{"kubectl.kubernetes.io/last-applied-configuration": '{"spec": {}}'})
    reapplied = legacy(**{"kubectl.kubernetes.io/last-applied-configuration": '{"spec": {"a": 1}}'})
    assert not needs_rewrite(
        owned_cluster(applied, converted()), owned_cluster(reapplied, converted())
    )


def test_a_rewrite_keeps_the_autoscalers_replicas_within_the_new_bounds() -> None:
    existing = {"workerGroupSpecs": [{"groupName": "worker-node", "replicas": 3}]}
    assert (
        keep_autoscaler_state(converted(2)["spec"], existing)["workerGroupSpecs"][0]["replicas"]
        == 3
    )
    raised = converted(2)["spec"]
    raised["workerGroupSpecs"][0]["maxReplicas"] = 2
    assert keep_autoscaler_state(raised, existing)["workerGroupSpecs"][0]["replicas"] == 2
    lowered = {"workerGroupSpecs": [{"groupName": "worker-node", "replicas": 0}]}
    assert (
        keep_autoscaler_state(converted(2)["spec"], lowered)["workerGroupSpecs"][0]["replicas"] == 2
    )


def test_a_rewrite_keeps_pending_deletions_and_leaves_new_groups_at_their_minimum() -> None:
    strategy = {"workersToDelete": ["example-cluster-worker-node-abcde"]}
    existing = {
        "workerGroupSpecs": [{"groupName": "worker-node", "replicas": 3, "scaleStrategy": strategy}]
    }
    desired = converted(2)["spec"]
    desired["workerGroupSpecs"].append(
        {**copy.deepcopy(desired["workerGroupSpecs"][0]), "groupName": "gpu", "replicas": 1}
    )
    kept = keep_autoscaler_state(desired, existing)["workerGroupSpecs"]
    assert kept[0]["scaleStrategy"] == strategy
    assert (kept[1]["groupName"], kept[1]["replicas"]) == ("gpu", 1)


def test_the_rewritten_object_is_a_put_of_the_stored_one_with_the_new_spec() -> None:
    stored = owned_cluster(legacy(), converted(2))
    stored["metadata"].update(resourceVersion="42", uid="ray-io-uid")
    stored["metadata"]["annotations"]["ray.io/other"] = "kept"
    stored["status"] = {"state": "ready"}
    desired = owned_cluster(legacy(), converted(1))

    body = rewritten_cluster(stored, desired)

    assert body["metadata"]["resourceVersion"] == "42"  # a compare-and-swap
    assert "status" not in body
    annotations = body["metadata"]["annotations"]
    assert annotations["ray.io/other"] == "kept"
    assert (
        annotations[LEGACY_SPEC_HASH_ANNOTATION]
        == (desired["metadata"]["annotations"][LEGACY_SPEC_HASH_ANNOTATION])
    )
    assert body["spec"]["workerGroupSpecs"][0]["minReplicas"] == 1
    assert not needs_rewrite(body, desired)


def test_the_legacy_head_service_keeps_its_name_and_ports_and_selects_the_new_head() -> None:
    source = legacy()
    source["spec"] = {
        "headServicePorts": [
            {"name": "dashboard", "port": 8266, "targetPort": 8265},
            {"name": "metrics", "port": 8080, "targetPort": 8080},
        ]
    }
    service = legacy_head_service(source)
    assert service is not None
    assert service["metadata"]["name"] == "example-cluster-ray-head"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "legacy-uid"
    assert service["spec"]["selector"] == {
        "ray.io/cluster": "example-cluster",
        "ray.io/node-type": "head",
    }
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {
        "client": (10001, 10001),
        "dashboard": (8266, 8265),
        "ray-serve": (8000, 8000),
        "metrics": (8080, 8080),
    }


def test_no_legacy_head_service_when_its_name_would_be_too_long() -> None:
    source = legacy()
    source["metadata"]["name"] = "c" * 55
    assert legacy_head_service(source) is None


def test_the_legacy_operators_head_service_is_repointed_and_then_left_as_it_is() -> None:
    desired = legacy_head_service(legacy())
    assert desired is not None
    theirs = {
        "spec": {
            "selector": {"component": "example-cluster-ray-head"},
            "ports": copy.deepcopy(desired["spec"]["ports"]),
            "clusterIP": "10.0.0.7",
        }
    }
    assert head_service_changes(theirs, desired["spec"]) == [
        {"op": "add", "path": "/spec/selector", "value": desired["spec"]["selector"]}
    ]
    stored = copy.deepcopy(theirs)
    stored["spec"]["selector"] = desired["spec"]["selector"]
    assert head_service_changes(stored, desired["spec"]) == []


def test_only_pods_the_legacy_object_controls_are_the_legacy_operators() -> None:
    def pod(uid: str, *, controller: bool = True) -> dict[str, Any]:
        reference = {"uid": uid, "controller": controller, "kind": "RayCluster"}
        return {"metadata": {"name": "p", "ownerReferences": [reference]}}

    assert is_legacy_operator_pod(pod("legacy-uid"), legacy())
    assert not is_legacy_operator_pod(pod("ray-io-cluster-uid"), legacy())
    assert not is_legacy_operator_pod(pod("legacy-uid", controller=False), legacy())
    assert not is_legacy_operator_pod({"metadata": {"name": "p"}}, legacy())
