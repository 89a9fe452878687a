"""`headGroupSpec.enableIngress` for real: the head's dashboard Ingress, as KubeRay makes it.

Issue 13, section 2 (KubeRay's `reconcileIngress`): `<cluster>-head-ingress` to the head
Service's dashboard port, the cluster's annotations copied, `kubernetes.io/ingress.class` made
the ingressClassName; owned by the cluster and deleted with it; an edited one is put back; an
Ingress of that name the cluster does not own is left alone (a Warning, the cluster goes on);
KubeRay's own Ingress is taken over without a write. (No OpenShift Route: not built here.)
"""

from __future__ import annotations

from typing import Any

from ray_operator.app import Operator

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness, StartClusterOperator
from tests.controllers.lookups import events_with_reason, eventually_named, named_or_none


def ingress_cluster(name: str = "web", **annotations: str) -> dict[str, Any]:
    cluster = scalable_cluster(name)
    cluster["spec"]["headGroupSpec"]["enableIngress"] = True
    cluster["spec"]["headGroupSpec"]["ingressOptions"] = {"host": "ray.example.com"}
    if annotations:
        cluster["metadata"]["annotations"] = annotations
    return cluster


async def ingress(harness: Harness, name: str) -> dict[str, Any] | None:
    return await named_or_none(harness, "ingress", name)


async def existing_ingress(harness: Harness, name: str) -> dict[str, Any]:
    return await eventually_named(harness, "ingress", name, what=f"Ingress {name}")


events = events_with_reason


async def test_enabled_ingress_routes_to_the_head_dashboard_and_is_owned(
    harness: Harness, operator: Operator
) -> None:
    annotations = {
        "kubernetes.io/ingress.class": "nginx",
        "nginx.ingress.kubernetes.io/proxy-body-size": "10m",
    }
    await harness.apply(ingress_cluster(**annotations))
    found = await existing_ingress(harness, "web-head-ingress")
    cluster = await harness.cluster("web")
    assert found["spec"]["ingressClassName"] == "nginx"
    assert found["spec"]["rules"] == [
        {
            "host": "ray.example.com",
            "http": {
                "paths": [
                    {
                        "path": "/",
                        "pathType": "Prefix",
                        "backend": {"service": {"name": "web-head-svc", "port": {"number": 8265}}},
                    }
                ]
            },
        }
    ]
    assert found["metadata"]["annotations"] == {
        "nginx.ingress.kubernetes.io/proxy-body-size": "10m"
    }
    assert found["metadata"]["labels"]["ray.io/cluster"] == "web"
    assert found["metadata"]["labels"]["ray.io/identifier"] == "web-head"
    assert found["metadata"]["ownerReferences"][0]["uid"] == cluster["metadata"]["uid"]
    [created] = await events(harness, "CreatedIngress")
    assert created["message"] == f"Created Ingress {harness.namespace}/web-head-ingress"
    await harness.pods_settled("web", head=1, workers=1)


async def test_no_ingress_unless_enabled(harness: Harness, operator: Operator) -> None:
    await harness.apply(scalable_cluster("web"))
    await harness.pods_settled("web", head=1, workers=1)
    assert (await harness.get_json("ingress"))["items"] == []


async def test_an_edited_ingress_is_put_back_and_deleted_with_its_cluster(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(ingress_cluster())
    await existing_ingress(harness, "web-head-ingress")
    await harness.kubectl(
        "patch", "ingress", "web-head-ingress", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/rules/0/host", "value": "evil.example.com"}]',
    )  # fmt: skip

    async def restored() -> bool:
        found = await ingress(harness, "web-head-ingress")
        return found is not None and found["spec"]["rules"][0]["host"] == "ray.example.com"

    await harness.eventually(restored, what="the host put back")
    await harness.kubectl("delete", "raycluster", "web", "--wait=false")

    async def deleted() -> bool:
        found = await ingress(harness, "web-head-ingress")
        return found is None or bool(found["metadata"].get("deletionTimestamp"))

    await harness.eventually(deleted, what="the Ingress deleted with its cluster")


async def test_annotations_added_to_the_cluster_reach_its_ingress(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(ingress_cluster())
    await existing_ingress(harness, "web-head-ingress")
    await harness.kubectl(
        "annotate", "raycluster", "web", "nginx.ingress.kubernetes.io/proxy-body-size=10m"
    )

    async def followed() -> bool:
        found = await ingress(harness, "web-head-ingress")
        annotations = (found or {}).get("metadata", {}).get("annotations") or {}
        return annotations.get("nginx.ingress.kubernetes.io/proxy-body-size") == "10m"

    await harness.eventually(followed, what="the annotation on the Ingress")
    [updated] = await events(harness, "UpdatedIngress")
    assert updated["message"] == f"Updated ingress {harness.namespace}/web-head-ingress"
    assert updated.get("count", 1) == 1  # written once, not once per reconcile


async def test_a_foreign_ingress_of_that_name_is_left_alone_and_the_cluster_goes_on(
    harness: Harness, operator: Operator
) -> None:
    foreign = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "web-head-ingress", "labels": {"ray.io/cluster": "web"}},
        "spec": {"defaultBackend": {"service": {"name": "mine", "port": {"number": 80}}}},
    }
    await harness.apply(foreign)
    before = await existing_ingress(harness, "web-head-ingress")
    await harness.apply(ingress_cluster())
    await harness.pods_settled("web", head=1, workers=1)

    async def warned() -> list[dict[str, Any]]:
        return await events(harness, "FailedToCreateIngress")

    [warning] = await harness.eventually(warned, what="a Warning about the foreign Ingress")
    assert "not this RayCluster; not modifying it" in warning["message"]
    after = await existing_ingress(harness, "web-head-ingress")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_kuberays_ingress_is_taken_over_without_a_write(
    harness: Harness,
    start_cluster_operator: StartClusterOperator,
) -> None:
    await harness.apply(ingress_cluster())
    uid = (await harness.cluster("web"))["metadata"]["uid"]
    # As BuildIngressForHeadService + SetControllerReference made it.
    kuberays = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "web-head-ingress",
            "labels": {
                "ray.io/cluster": "web",
                "ray.io/identifier": "web-head",
                "app.kubernetes.io/name": "kuberay",
                "app.kubernetes.io/created-by": "kuberay-operator",
            },
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": "web",
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "rules": [
                {
                    "host": "ray.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {
                                    "service": {"name": "web-head-svc", "port": {"number": 8265}}
                                },
                            }
                        ]
                    },
                }
            ]
        },
    }
    await harness.apply(kuberays)
    before = await existing_ingress(harness, "web-head-ingress")
    await start_cluster_operator()
    await harness.pods_settled("web", head=1, workers=1)
    after = await existing_ingress(harness, "web-head-ingress")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert await events(harness, "CreatedIngress") == []
    assert await events(harness, "RepairedIngress") == []
