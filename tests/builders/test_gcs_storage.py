"""Embedded (RocksDB) GCS fault tolerance: the head's volume and the PVC behind it."""

from __future__ import annotations

from ray_operator.builders import build_gcs_storage_pvc, build_head_pod, needs_gcs_storage_pvc

from tests.builders.clusters import env_of, raycluster


def _embedded(**storage: object) -> dict:
    return raycluster(gcsFaultToleranceOptions={"backend": "rocksdb", "storage": storage})


def test_head_mounts_the_gcs_storage_claim() -> None:
    head = build_head_pod(_embedded(subPath="gcs"), suffix="abcde")
    ray = head["spec"]["containers"][0]
    assert env_of(ray)["RAY_gcs_storage"] == "rocksdb"
    assert env_of(ray)["RAY_gcs_storage_path"] == "/data/gcs"
    assert {"name": "gcs-storage", "mountPath": "/data/gcs", "subPath": "gcs"} in ray[
        "volumeMounts"
    ]
    volume = {"name": "gcs-storage", "persistentVolumeClaim": {"claimName": "demo-gcs-pvc"}}
    assert volume in head["spec"]["volumes"]


def test_operator_managed_claim_defaults_to_one_gibibyte_read_write_once() -> None:
    cluster = _embedded()
    assert needs_gcs_storage_pvc(cluster)
    pvc = build_gcs_storage_pvc(cluster)
    assert pvc["metadata"]["name"] == "demo-gcs-pvc"
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    assert pvc["metadata"]["ownerReferences"][0]["name"] == "demo"


def test_retained_claim_is_not_owned_by_the_cluster() -> None:
    pvc = build_gcs_storage_pvc(
        _embedded(deletionPolicy="Retain", size="5Gi", storageClassName="fast")
    )
    assert "ownerReferences" not in pvc["metadata"]
    assert pvc["spec"]["storageClassName"] == "fast"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_users_own_claim_is_used_and_not_created() -> None:
    cluster = _embedded(claimName="shared-gcs")
    assert not needs_gcs_storage_pvc(cluster)
    volumes = build_head_pod(cluster, suffix="abcde")["spec"]["volumes"]
    assert {"name": "gcs-storage", "persistentVolumeClaim": {"claimName": "shared-gcs"}} in volumes
