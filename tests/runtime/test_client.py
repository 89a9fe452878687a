"""The API client wrapper against the real API server: verbs, error mapping, metrics, events."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client as kube_client
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime import EVENT, POD, RAY_CLUSTER, SERVICE, KubeClient, PatchType
from ray_operator.runtime.client import REQUEST_CONNECTIONS, load_api_client
from ray_operator.runtime.errors import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    NamespaceTerminating,
    NotFound,
    NotLeader,
    TransportError,
    error_from_status,
)
from ray_operator.runtime.events import EventRecorder
from ray_operator.spec.kinds import CONFIG_MAP

from tests.conftest import Kubectl


def pod_manifest(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"a": "b"}},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
    }


def ray_cluster(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}
                },
            }
        },
    }


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_objects_round_trip_as_plain_dicts(client: KubeClient, namespace: str) -> None:
    created = await client.create(POD, pod_manifest("p", namespace))
    assert isinstance(created, dict)
    assert created["metadata"]["uid"]
    fetched = await client.get(POD, "p", namespace=namespace)
    assert fetched["metadata"]["uid"] == created["metadata"]["uid"]
    listed = await client.list(POD, namespace=namespace, label_selector="a=b")
    assert [item["metadata"]["name"] for item in listed.items] == ["p"]
    assert listed.items[0]["kind"] == "Pod"
    assert listed.resource_version


async def test_a_missing_object_raises_not_found(client: KubeClient, namespace: str) -> None:
    with pytest.raises(NotFound, match=f"get Pod {namespace}/absent"):
        await client.get(POD, "absent", namespace=namespace)


async def test_creating_an_existing_name_raises_already_exists(
    client: KubeClient, namespace: str
) -> None:
    await client.create(POD, pod_manifest("twice", namespace))
    with pytest.raises(AlreadyExists) as raised:
        await client.create(POD, pod_manifest("twice", namespace))
    assert raised.value.status == 409
    assert isinstance(raised.value, Conflict)


async def test_a_write_with_a_stale_resource_version_raises_conflict(
    client: KubeClient, namespace: str
) -> None:
    created = await client.create(POD, pod_manifest("raced", namespace))
    await client.patch(POD, "raced", {"metadata": {"labels": {"x": "1"}}}, namespace=namespace)
    with pytest.raises(Conflict) as raised:
        await client.replace(POD, created)
    assert not isinstance(raised.value, AlreadyExists)


async def test_an_invalid_object_raises_invalid_naming_the_field(
    client: KubeClient, namespace: str
) -> None:
    with pytest.raises(Invalid) as raised:
        await client.create(POD, pod_manifest("Not_A_Valid_Name", namespace))
    assert raised.value.status == 422
    assert any(cause.get("field") == "metadata.name" for cause in raised.value.causes)


async def test_a_create_in_a_terminating_namespace_raises_namespace_terminating(
    client: KubeClient, kubectl: Kubectl, namespace: str
) -> None:
    held = {"metadata": {"name": "held", "finalizers": ["test.ray.io/hold"]}}
    await client.create(CONFIG_MAP, held, namespace=namespace)  # holds the namespace Terminating
    kubectl("delete", "namespace", namespace, "--wait=false")
    try:
        with pytest.raises(NamespaceTerminating, match="because it is being terminated"):
            await client.create(CONFIG_MAP, {"metadata": {"name": "new"}}, namespace=namespace)
    finally:
        patch = {"metadata": {"finalizers": None}}
        await client.patch(CONFIG_MAP, "held", patch, namespace=namespace)


def test_a_forbidden_without_the_namespace_terminating_cause_stays_plain_forbidden() -> None:
    rbac = {"reason": "Forbidden", "message": "configmaps is forbidden: User cannot create"}
    assert type(error_from_status(403, rbac, what="create")) is Forbidden
    other_cause = {**rbac, "details": {"causes": [{"reason": "FieldValueForbidden"}]}}
    assert type(error_from_status(403, other_cause, what="create")) is Forbidden


async def test_merge_strategic_apply_and_status_patches(client: KubeClient, namespace: str) -> None:
    await client.create(POD, pod_manifest("patched", namespace))
    await client.patch(
        POD,
        "patched",
        namespace=namespace,
        patch_type=PatchType.STRATEGIC,
        patch={"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}},
    )
    pod = await client.get(POD, "patched", namespace=namespace)
    assert pod["spec"]["containers"][0]["image"] == "busybox:2"

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "applied", "namespace": namespace},
        "spec": {"ports": [{"port": 80}], "selector": {"a": "b"}},
    }
    applied = await client.apply(SERVICE, service)
    managers = [entry["manager"] for entry in applied["metadata"]["managedFields"]]
    assert managers == ["ray-operator"]

    await client.create(RAY_CLUSTER, ray_cluster("status", namespace))
    updated = await client.patch_status(
        RAY_CLUSTER, "status", {"status": {"state": "ready"}}, namespace=namespace
    )
    assert updated["status"]["state"] == "ready"


async def test_delete_with_another_uid_is_refused(client: KubeClient, namespace: str) -> None:
    await client.create(POD, pod_manifest("guarded", namespace))
    with pytest.raises(Conflict):
        await client.delete(POD, "guarded", namespace=namespace, uid="not-its-uid")
    await client.delete(POD, "guarded", namespace=namespace)
    with pytest.raises(NotFound):
        await client.get(POD, "guarded", namespace=namespace)


async def test_writes_are_refused_locally_without_the_lease(
    client: KubeClient, metrics: Metrics, namespace: str
) -> None:
    def not_leading() -> None:
        raise NotLeader("not leading")

    guarded = client.with_write_guard(not_leading)
    with pytest.raises(NotLeader):
        await guarded.create(POD, pod_manifest("never", namespace))
    assert sample(metrics, "ray_operator_api_requests_total", verb="create", code="201") == 0
    await guarded.list(POD, namespace=namespace)  # reads are not guarded


async def test_requests_are_counted_by_verb_and_code(
    client: KubeClient, metrics: Metrics, namespace: str
) -> None:
    with pytest.raises(NotFound):
        await client.get(POD, "absent", namespace=namespace)
    await client.list(POD, namespace=namespace)
    assert sample(metrics, "ray_operator_api_requests_total", verb="get", code="404") == 1
    assert sample(metrics, "ray_operator_api_requests_total", verb="list", code="200") == 1


async def test_an_unreachable_server_raises_transport_error(metrics: Metrics) -> None:
    configuration = kube_client.Configuration(host="https://127.0.0.1:1")
    async with kube_client.ApiClient(configuration) as api:
        unreachable = KubeClient(api, metrics=metrics, request_timeout=5)
        with pytest.raises(TransportError, match="list Pod"):
            await unreachable.list(POD)
    assert sample(metrics, "ray_operator_api_requests_total", verb="list", code="error") == 1


async def test_repeated_events_are_aggregated_into_one_with_a_count(
    client: KubeClient, metrics: Metrics, namespace: str
) -> None:
    cluster = await client.create(RAY_CLUSTER, ray_cluster("noisy", namespace))
    recorder = EventRecorder(client, metrics=metrics, instance="test")
    for _ in range(3):
        recorder.record(cluster, reason="Retrying", message="head pod failed", type="Warning")
        assert await recorder.flush(within=30)
    recorder.record(cluster, reason="Created", message="head pod created")
    assert await recorder.flush(within=30)
    events = (await client.list(EVENT, namespace=namespace)).items
    by_reason = {event["reason"]: event for event in events}
    assert sorted(by_reason) == ["Created", "Retrying"]
    assert by_reason["Retrying"]["count"] == 3
    assert by_reason["Retrying"]["type"] == "Warning"
    involved = by_reason["Created"]["involvedObject"]
    assert (involved["kind"], involved["name"], involved["uid"]) == (
        "RayCluster",
        "noisy",
        cluster["metadata"]["uid"],
    )


async def test_the_connection_pool_has_room_for_every_watch_beside_the_requests(
    control_plane: LocalControlPlane, namespace: str
) -> None:
    """Each watch holds a connection while it runs: 130 watches (10 namespaces) must still leave
    the requests their share, or every write would wait for a connection forever."""
    api = await load_api_client(control_plane.kubeconfig, watches=130)
    try:
        assert api.rest_client.pool_manager.connector.limit == 130 + REQUEST_CONNECTIONS
        listed = await KubeClient(api, metrics=Metrics()).list(POD, namespace=namespace)
        assert listed.items == []
    finally:
        await api.close()
