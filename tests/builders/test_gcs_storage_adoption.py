"""An existing `<cluster>-gcs-pvc`: what is reported as drift, and the one write that adopts it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.builders.fault_tolerance import (
    build_gcs_storage_pvc,
    gcs_storage_pvc_adoption_patch,
    gcs_storage_pvc_drift,
)

from tests.builders.clusters import raycluster


def _embedded(**storage: object) -> dict[str, Any]:
    return raycluster(gcsFaultToleranceOptions={"backend": "rocksdb", "storage": storage})


def _kuberays_pvc(cluster: dict[str, Any]) -> dict[str, Any]:
    """The PVC as KubeRay creates it: only `ray.io/cluster`, a controller reference."""
    pvc = build_gcs_storage_pvc(cluster)
    pvc["metadata"]["labels"] = {"ray.io/cluster": "demo"}
    pvc["metadata"]["resourceVersion"] = "42"
    return pvc


def test_same_size_written_differently_is_no_drift() -> None:
    cluster = _embedded(size="1Gi")
    existing = _kuberays_pvc(cluster)
    existing["spec"]["resources"]["requests"]["storage"] = "1024Mi"
    existing["spec"]["storageClassName"] = "standard"  # the default class, filled in
    assert gcs_storage_pvc_drift(build_gcs_storage_pvc(cluster), existing) == ""


def test_size_class_and_access_modes_that_differ_are_reported() -> None:
    existing = _kuberays_pvc(_embedded())
    desired = build_gcs_storage_pvc(
        _embedded(size="5Gi", storageClassName="fast", accessModes=["ReadWriteMany"])
    )
    drift = gcs_storage_pvc_drift(desired, existing)
    assert "requested size 5Gi != current 1Gi" in drift
    assert "storageClassName fast != current <default>" in drift
    assert "accessModes ['ReadWriteMany'] != current ['ReadWriteOnce']" in drift


def test_kuberays_own_pvc_needs_no_write() -> None:
    cluster = _embedded()
    assert gcs_storage_pvc_adoption_patch(cluster, _kuberays_pvc(cluster)) is None


def test_an_unowned_pvc_gets_the_controller_reference() -> None:
    cluster = _embedded()
    existing = _kuberays_pvc(cluster)
    del existing["metadata"]["ownerReferences"]
    patch = gcs_storage_pvc_adoption_patch(cluster, existing)
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "42"
    [owner] = patch["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == ("uid-1", True)


def test_retain_removes_only_the_clusters_controller_reference() -> None:
    cluster = _embedded(deletionPolicy="Retain")
    existing = _kuberays_pvc(_embedded())
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "note", "uid": "u2"}
    existing["metadata"]["ownerReferences"].append(other)
    patch = gcs_storage_pvc_adoption_patch(cluster, existing)
    assert patch is not None
    assert patch["metadata"]["ownerReferences"] == [other]


def test_an_unlabelled_pvc_gets_the_cluster_label_so_the_cache_sees_it() -> None:
    cluster = _embedded(deletionPolicy="Retain")
    existing = _kuberays_pvc(cluster)
    del existing["metadata"]["labels"]
    patch = gcs_storage_pvc_adoption_patch(cluster, existing)
    assert patch == {"metadata": {"labels": {"ray.io/cluster": "demo"}, "resourceVersion": "42"}}


def test_a_pvc_controlled_by_another_object_is_not_taken() -> None:
    cluster = _embedded()
    existing = _kuberays_pvc(cluster)
    foreign = copy.deepcopy(existing["metadata"]["ownerReferences"][0])
    foreign["uid"] = "uid-of-an-earlier-cluster"
    existing["metadata"]["ownerReferences"] = [foreign]
    with pytest.raises(ValueError, match="controlled by RayCluster demo"):
        gcs_storage_pvc_adoption_patch(cluster, existing)
