"""The watch cache: trimming, the controllers' lookups, and the relist diff."""

from __future__ import annotations

from typing import Any

from ray_operator.runtime import POD, RAY_CLUSTER, SERVICE
from ray_operator.runtime.store import LAST_APPLIED_ANNOTATION, Store


def pod(
    name: str,
    *,
    cluster: str | None = None,
    owner_uid: str | None = None,
    namespace: str = "ns",
    resource_version: str = "1",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "resourceVersion": resource_version,
        "labels": {},
    }
    if cluster:
        metadata["labels"]["ray.io/cluster"] = cluster
    if owner_uid:
        metadata["ownerReferences"] = [{"kind": "RayCluster", "name": cluster, "uid": owner_uid}]
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata}


def test_cached_objects_lose_managed_fields_and_the_last_applied_annotation() -> None:
    # Kinds cached whole (Pods and Jobs keep less: test_projection.py).
    store = Store()
    obj = pod("p")
    obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    obj["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: "{...}", "keep": "me"}
    store.upsert(SERVICE, obj)
    cached = store.get(SERVICE, "ns", "p")
    assert cached is not None
    assert "managedFields" not in cached["metadata"]
    assert cached["metadata"]["annotations"] == {"keep": "me"}


def test_pods_are_found_by_namespace_and_cluster_label() -> None:
    store = Store()
    store.upsert(POD, pod("a-head", cluster="a"))
    store.upsert(POD, pod("a-worker", cluster="a"))
    store.upsert(POD, pod("b-head", cluster="b"))
    store.upsert(POD, pod("a-head", cluster="a", namespace="other"))
    names = [p["metadata"]["name"] for p in store.list_for_cluster(POD, "ns", "a")]
    assert names == ["a-head", "a-worker"]
    assert store.list_for_cluster(SERVICE, "ns", "a") == []


def test_relabelling_or_deleting_a_pod_updates_the_indexes() -> None:
    store = Store()
    store.upsert(POD, pod("p", cluster="a", owner_uid="uid-a"))
    store.upsert(POD, pod("p", cluster="b", owner_uid="uid-b", resource_version="2"))
    assert store.list_for_cluster(POD, "ns", "a") == []
    assert store.list_owned_by(POD, "uid-a") == []
    assert [p["metadata"]["name"] for p in store.list_owned_by(POD, "uid-b")] == ["p"]
    change = store.remove(POD, pod("p"))
    assert change.old is not None
    assert change.new is None
    assert store.list_for_cluster(POD, "ns", "b") == []
    assert store.list_owned_by(POD, "uid-b") == []
    assert store.count(POD) == 0


def test_a_relist_reports_objects_deleted_while_not_watching() -> None:
    store = Store()
    store.upsert(POD, pod("stays"))
    store.upsert(POD, pod("changes"))
    store.upsert(POD, pod("vanished", cluster="a"))
    changes = store.replace(
        POD, [pod("stays"), pod("changes", resource_version="2"), pod("appears")]
    )
    summary = sorted((c.latest["metadata"]["name"], c.old is None, c.new is None) for c in changes)
    assert summary == [
        ("appears", True, False),
        ("changes", False, False),
        ("vanished", False, True),
    ]
    assert store.get(POD, "ns", "vanished") is None
    assert store.list_for_cluster(POD, "ns", "a") == []


def test_a_namespaced_relist_leaves_other_namespaces_alone() -> None:
    store = Store()
    store.upsert(RAY_CLUSTER, pod("here"))
    store.upsert(RAY_CLUSTER, pod("elsewhere", namespace="other"))
    changes = store.replace(RAY_CLUSTER, [], namespace="ns")
    assert [c.latest["metadata"]["name"] for c in changes] == ["here"]
    assert store.get(RAY_CLUSTER, "other", "elsewhere") is not None
