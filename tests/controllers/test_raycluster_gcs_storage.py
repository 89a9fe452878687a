"""Embedded GCS fault tolerance for real: the `<cluster>-gcs-pvc` the head mounts is created.

Issue 13, section 2: KubeRay's `reconcileGCSStoragePVC`. The operator-made claim is created once
and owned by its RayCluster (deleted with it, as the garbage collector does for KubeRay), or not
owned under `deletionPolicy: Retain` (it outlives the cluster and is adopted by the next cluster
of that name). An existing claim is never reconfigured: a changed size is reported. A user's own
claim (`storage.claimName`) is never created, owned or changed. KubeRay's own PVC is taken over
without a write.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import yaml
from ray_operator.app import Operator

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness, StartClusterOperator
from tests.controllers.lookups import events_with_reason, eventually_named, named_or_none

SAMPLE = Path("../shared/fixtures/kuberay-samples/ray-cluster.embedded-gcs-ft.yaml")


def embedded_cluster(name: str = "gcs", **storage: Any) -> dict[str, Any]:
    return scalable_cluster(
        name, gcsFaultToleranceOptions={"backend": "rocksdb", "storage": storage}
    )


async def pvc(harness: Harness, name: str) -> dict[str, Any] | None:
    return await named_or_none(harness, "pvc", name)


events = events_with_reason


async def existing_pvc(harness: Harness, name: str) -> dict[str, Any]:
    return await eventually_named(harness, "pvc", name, what=f"PVC {name}")


async def head_pod(harness: Harness, cluster: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        pods = await harness.pods(cluster)
        return next(
            (p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"), None
        )

    found: dict[str, Any] = await harness.eventually(check, what=f"head Pod of {cluster}")
    return found


async def workers_exist(harness: Harness, cluster: str, count: int) -> None:
    """Wait for `count` worker Pods: proof that reconciles ran after a change."""

    async def check() -> bool:
        pods = await harness.pods(cluster)
        return sum(p["metadata"]["labels"]["ray.io/node-type"] == "worker" for p in pods) == count

    await harness.eventually(check, what=f"{count} workers of {cluster}")


async def test_embedded_sample_gets_its_pvc_once_owned_by_the_cluster(
    harness: Harness, operator: Operator
) -> None:
    sample = yaml.safe_load(await asyncio.to_thread(SAMPLE.read_text))
    await harness.apply(sample)
    cluster = await harness.cluster("raycluster-embedded-gcs-ft")
    claim = await existing_pvc(harness, "raycluster-embedded-gcs-ft-gcs-pvc")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"] == {"storage": "1Gi"}
    assert claim["metadata"]["labels"]["ray.io/cluster"] == "raycluster-embedded-gcs-ft"
    [owner] = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "RayCluster",
        cluster["metadata"]["uid"],
        True,
    )
    volumes = (await head_pod(harness, "raycluster-embedded-gcs-ft"))["spec"]["volumes"]
    assert {
        "name": "gcs-storage",
        "persistentVolumeClaim": {"claimName": "raycluster-embedded-gcs-ft-gcs-pvc"},
    } in volumes
    [created] = await events(harness, "CreatedPVC")
    assert created["message"] == (
        f"Created GCS storage PVC {harness.namespace}/raycluster-embedded-gcs-ft-gcs-pvc"
    )

    # Later reconciles (a scale-up) neither recreate nor touch it.
    await harness.kubectl(
        "patch", "raycluster", "raycluster-embedded-gcs-ft", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2}]',
    )  # fmt: skip
    await workers_exist(harness, "raycluster-embedded-gcs-ft", 2)
    again = await existing_pvc(harness, "raycluster-embedded-gcs-ft-gcs-pvc")
    assert again["metadata"]["uid"] == claim["metadata"]["uid"]
    assert again["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]
    assert len(await events(harness, "CreatedPVC")) == 1


async def test_deleting_the_cluster_deletes_its_pvc(harness: Harness, operator: Operator) -> None:
    await harness.apply(embedded_cluster())
    await existing_pvc(harness, "gcs-gcs-pvc")
    await harness.kubectl("delete", "raycluster", "gcs", "--wait=false")

    async def deleted() -> bool:
        found = await pvc(harness, "gcs-gcs-pvc")
        # The PVC protection finalizer keeps it Terminating until its Pods are gone; no
        # controller on this control plane removes it, so "deletion requested" is the proof.
        return found is None or bool(found["metadata"].get("deletionTimestamp"))

    await harness.eventually(deleted, what="PVC deleted with its cluster")


async def test_retained_pvc_outlives_the_cluster_and_serves_the_next_of_its_name(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(embedded_cluster(deletionPolicy="Retain"))
    claim = await existing_pvc(harness, "gcs-gcs-pvc")
    assert "ownerReferences" not in claim["metadata"]
    await harness.kubectl("delete", "raycluster", "gcs", "--wait=false")

    async def pods_gone() -> bool:
        return not await harness.pods("gcs")

    await harness.eventually(pods_gone, what="the deleted cluster's Pods gone")
    kept = await existing_pvc(harness, "gcs-gcs-pvc")
    assert not kept["metadata"].get("deletionTimestamp")

    await harness.apply(embedded_cluster(deletionPolicy="Retain"))
    await head_pod(harness, "gcs")
    await workers_exist(harness, "gcs", 1)
    reused = await existing_pvc(harness, "gcs-gcs-pvc")
    assert reused["metadata"]["uid"] == claim["metadata"]["uid"]
    assert reused["metadata"]["resourceVersion"] == kept["metadata"]["resourceVersion"]
    assert len(await events(harness, "CreatedPVC")) == 1  # the first cluster's only


async def test_a_changed_size_is_reported_not_applied(harness: Harness, operator: Operator) -> None:
    await harness.apply(embedded_cluster())
    claim = await existing_pvc(harness, "gcs-gcs-pvc")
    await harness.apply(embedded_cluster(size="5Gi"))

    async def reported() -> list[dict[str, Any]]:
        return await events(harness, "FailedToCreatePVC")

    [event] = await harness.eventually(reported, what="drift reported")
    assert event["type"] == "Warning"
    assert "requested size 5Gi != current 1Gi" in event["message"]
    assert "delete the PVC to recreate it with the new settings" in event["message"]
    unchanged = await existing_pvc(harness, "gcs-gcs-pvc")
    assert unchanged["spec"]["resources"]["requests"] == {"storage": "1Gi"}
    assert unchanged["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]


async def test_switching_to_retain_releases_the_existing_pvc(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(embedded_cluster())
    claim = await existing_pvc(harness, "gcs-gcs-pvc")
    assert claim["metadata"]["ownerReferences"]
    await harness.apply(embedded_cluster(deletionPolicy="Retain"))

    async def released() -> bool:
        found = await pvc(harness, "gcs-gcs-pvc")
        return found is not None and not found["metadata"].get("ownerReferences")

    await harness.eventually(released, what="owner reference removed")
    assert (await existing_pvc(harness, "gcs-gcs-pvc"))["metadata"]["uid"] == claim["metadata"][
        "uid"
    ]


async def test_users_own_claim_is_neither_created_nor_touched(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(embedded_cluster(claimName="shared-gcs"))

    async def reported() -> list[dict[str, Any]]:
        return await events(harness, "FailedToCreatePVC")

    [event] = await harness.eventually(reported, what="missing claim reported")
    assert event["message"] == (
        f"GcsFaultToleranceOptions.Storage.ClaimName 'shared-gcs' not found in namespace "
        f"{harness.namespace}; the head Pod will not start until it exists"
    )
    volumes = (await head_pod(harness, "gcs"))["spec"]["volumes"]
    assert {"name": "gcs-storage", "persistentVolumeClaim": {"claimName": "shared-gcs"}} in volumes
    assert await pvc(harness, "shared-gcs") is None
    assert await pvc(harness, "gcs-gcs-pvc") is None

    await harness.apply(user_claim("shared-gcs"))
    before = await existing_pvc(harness, "shared-gcs")
    await harness.kubectl(
        "patch", "raycluster", "gcs", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2}]',
    )  # fmt: skip
    await workers_exist(harness, "gcs", 2)
    after = await existing_pvc(harness, "shared-gcs")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "ownerReferences" not in after["metadata"]


async def test_a_pvc_of_that_name_made_by_hand_is_adopted_not_recreated(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(user_claim("gcs-gcs-pvc"))
    before = await existing_pvc(harness, "gcs-gcs-pvc")
    await harness.apply(embedded_cluster())
    uid = (await harness.cluster("gcs"))["metadata"]["uid"]

    async def adopted() -> dict[str, Any] | None:
        found = await pvc(harness, "gcs-gcs-pvc")
        owners = (found or {}).get("metadata", {}).get("ownerReferences") or []
        return found if [o["uid"] for o in owners] == [uid] else None

    found = await harness.eventually(adopted, what="the PVC owned by the cluster")
    assert found["metadata"]["uid"] == before["metadata"]["uid"]
    # Labelled, so that the label-selected cache sees it from now on.
    assert found["metadata"]["labels"] == {"ray.io/cluster": "gcs"}
    assert await events(harness, "CreatedPVC") == []


async def test_kuberays_pvc_is_taken_over_without_a_write(
    harness: Harness,
    start_cluster_operator: StartClusterOperator,
) -> None:
    # KubeRay ran here: the cluster, and its PVC as BuildGCSStoragePVC + SetControllerReference
    # made it (only the `ray.io/cluster` label, a controller reference).
    await harness.apply(embedded_cluster())
    cluster = await harness.cluster("gcs")
    kuberays = copy.deepcopy(user_claim("gcs-gcs-pvc"))
    kuberays["metadata"]["labels"] = {"ray.io/cluster": "gcs"}
    kuberays["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "gcs",
            "uid": cluster["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    await harness.apply(kuberays)
    before = await existing_pvc(harness, "gcs-gcs-pvc")

    await start_cluster_operator()
    await head_pod(harness, "gcs")
    await workers_exist(harness, "gcs", 1)
    after = await existing_pvc(harness, "gcs-gcs-pvc")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert await events(harness, "CreatedPVC") == []
    assert await events(harness, "FailedToCreatePVC") == []


def user_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
