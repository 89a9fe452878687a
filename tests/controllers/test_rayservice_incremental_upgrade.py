"""`NewClusterWithIncrementalUpgrade` against the real API server with the Gateway API CRDs
installed (tests/fixtures/gateway-api, v1.4.1) and a real Ray head.

No Gateway controller runs here: the test plays one, reporting the Gateway Accepted and
Programmed and the HTTPRoute accepted with its references resolved; then the operator moves the
Serve capacities (PUT to the real head) and the route's weights until the new cluster is
promoted. One real head stands in for both clusters (see test_rayservice.py).

This module has its own control plane (no garbage collector), with the Gateway API CRDs; the
session plane never has them, which test_rayservice_incremental_upgrade_without_gateway_api.py
relies on.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ray_operator.app import Operator
from ray_operator.controllers.incremental_upgrade_routing import GATEWAY, HTTP_ROUTE
from ray_operator.dashboard.client import DashboardClient
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.conftest import REPO_ROOT, Kubectl, running_control_plane
from tests.controllers.conftest import Harness
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    head_only_cluster_spec,
    ray_head,
    start_operator,
)
from tests.controllers.rayservices import serve_config, status_of, wait_ready
from tests.ray_head import RayHead

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]  # fixtures, used by name

GATEWAY_API_CRDS = REPO_ROOT / "tests" / "fixtures" / "gateway-api"


@pytest.fixture(scope="module")
def control_plane() -> Iterator[LocalControlPlane]:
    """This module's own plane (no garbage collector) with the Gateway API CRDs."""
    with running_control_plane(controller_manager=False) as plane:
        kubectl = Kubectl(plane.kubeconfig)
        for crd in sorted(GATEWAY_API_CRDS.glob("*.yaml")):
            kubectl("apply", "--server-side", "-f", str(crd))
        kubectl(
            "wait",
            "--for=condition=Established",
            "crd/gateways.gateway.networking.k8s.io",
            "crd/httproutes.gateway.networking.k8s.io",
            "--timeout=60s",
        )
        yield plane


@pytest.fixture
async def incremental_operator(start_operator: StartOperator) -> Operator:
    """The operator with its default gates (RayServiceIncrementalUpgrade on, as in KubeRay),
    every cluster of the namespace mapped to the real head."""
    return await start_operator()


def incremental_rayservice(head: RayHead, name: str = "fruit") -> dict[str, Any]:
    cluster = head_only_cluster_spec(serve=True)
    cluster["enableInTreeAutoscaling"] = True
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name},
        "spec": {
            "serveConfigV2": serve_config(head),
            "rayClusterDeletionDelaySeconds": 1,
            "upgradeStrategy": {
                "type": "NewClusterWithIncrementalUpgrade",
                "clusterUpgradeOptions": {
                    "gatewayClassName": "test-gateway-class",
                    "maxSurgePercent": 50,
                    "stepSizePercent": 50,
                    "intervalSeconds": 1,
                },
            },
            "rayClusterConfig": cluster,
        },
    }


async def play_gateway_controller(harness: Harness, name: str) -> None:
    """What a Gateway controller would report: the Gateway Accepted and Programmed, the route
    Accepted by it with its references resolved."""
    namespace = harness.namespace
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": kind,
            "message": "",
            "lastTransitionTime": "2026-11-26T00:00:00Z",
            "observedGeneration": 1,
        }
        for kind in ("Accepted", "Programmed")
    ]
    await harness.client.patch(
        GATEWAY,
        f"{name}-gateway",
        {"status": {"conditions": conditions}},
        namespace=namespace,
        subresource="status",
    )
    parent = {
        "parentRef": {"name": f"{name}-gateway", "namespace": namespace},
        "controllerName": "example.com/test-gateway",
        "conditions": [
            {**conditions[0]},
            {**conditions[0], "type": "ResolvedRefs", "reason": "ResolvedRefs"},
        ],
    }
    await harness.client.patch(
        HTTP_ROUTE,
        f"{name}-httproute",
        {"status": {"parents": [parent]}},
        namespace=namespace,
        subresource="status",
    )


async def wait_active(harness: Harness, name: str) -> dict[str, Any]:
    """The status once Ready with an active cluster (Ready comes first: the pending cluster's
    endpoints count, as in KubeRay)."""
    await wait_ready(harness, name)

    async def promoted() -> dict[str, Any] | None:
        status = await status_of(harness, name)
        return status if status.get("activeServiceStatus", {}).get("rayClusterName") else None

    result: dict[str, Any] = await harness.eventually(promoted, what=f"{name} promoted")
    return result


def backends(route: dict[str, Any]) -> dict[str, int]:
    return {ref["name"]: ref.get("weight", 1) for ref in route["spec"]["rules"][0]["backendRefs"]}


async def test_a_first_cluster_serves_through_its_own_serve_service_behind_a_gateway(
    harness: Harness, incremental_operator: Operator, ray_head: RayHead
) -> None:
    await harness.apply(incremental_rayservice(ray_head))
    status = await wait_active(harness, "fruit")
    active = status["activeServiceStatus"]
    cluster = active["rayClusterName"]
    assert active["targetCapacity"] == 100
    gateway = await harness.get_json("gateway/fruit-gateway")
    assert gateway["spec"]["gatewayClassName"] == "test-gateway-class"
    assert (
        gateway["spec"]["listeners"][0] | {"name": "http", "protocol": "HTTP", "port": 80}
        == (gateway["spec"]["listeners"][0])
    )
    assert gateway["metadata"]["ownerReferences"][0]["kind"] == "RayService"

    async def routed() -> dict[str, Any] | None:
        # The route follows the Gateway by a reconcile: it may not exist yet.
        route: dict[str, Any] | None = await harness.get_json_if_exists("httproute/fruit-httproute")
        return route if route and backends(route) == {f"{cluster}-serve-svc": 100} else None

    route = await harness.eventually(routed, what="the route to the first cluster")
    assert route["spec"]["parentRefs"][0]["name"] == "fruit-gateway"
    service = await harness.get_json(f"service/{cluster}-serve-svc")
    assert service["metadata"]["ownerReferences"][0]["name"] == cluster
    assert service["spec"]["selector"] == {"ray.io/cluster": cluster, "ray.io/serve": "true"}
    head = await harness.get_json("service/fruit-head-svc")
    assert head["spec"]["selector"]["ray.io/cluster"] == cluster
    # KubeRay creates no `<name>-serve-svc` in this mode: the route names each cluster's own.
    assert "fruit-serve-svc" not in await harness.kubectl("get", "services", "-o", "name")
    assert (await status_of(harness, "fruit"))["activeServiceStatus"]["trafficRoutedPercent"] == 100


async def test_an_upgrade_moves_capacity_and_traffic_step_by_step_then_promotes(
    harness: Harness,
    incremental_operator: Operator,
    ray_head: RayHead,
    dashboard: DashboardClient,
) -> None:
    manifest = incremental_rayservice(ray_head)
    await harness.apply(manifest)
    old = (await wait_active(harness, "fruit"))["activeServiceStatus"]["rayClusterName"]
    changed = copy.deepcopy(manifest)
    changed["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = "0"
    await harness.apply(changed)

    async def pending_named() -> str | None:
        name = (
            (await status_of(harness, "fruit"))
            .get("pendingServiceStatus", {})
            .get("rayClusterName")
        )
        return str(name) if name else None

    new = await harness.eventually(pending_named, what="a pending cluster")
    cluster = await harness.eventually(lambda: _cluster(harness, new), what="the new cluster")
    assert cluster["metadata"]["name"] == new
    # Nothing moves until the Gateway and the route are reported ready.
    await harness.eventually(
        lambda: _has_backend(harness, f"{new}-serve-svc"), what="the new cluster in the route"
    )
    pending = (await status_of(harness, "fruit"))["pendingServiceStatus"]
    assert pending["targetCapacity"] == 0
    await play_gateway_controller(harness, "fruit")

    seen: list[dict[str, int]] = []

    async def record_weights() -> None:
        while True:
            route = await harness.client.get(
                HTTP_ROUTE, "fruit-httproute", namespace=harness.namespace
            )
            if not seen or seen[-1] != backends(route):
                seen.append(backends(route))
            await asyncio.sleep(0.05)

    async def promoted() -> dict[str, Any] | None:
        status = await status_of(harness, "fruit")
        return status if status["activeServiceStatus"].get("rayClusterName") == new else None

    recorder = asyncio.create_task(record_weights())
    try:
        status = await harness.eventually(promoted, within=120, what="the new cluster promoted")
    finally:
        recorder.cancel()
    assert status["activeServiceStatus"]["targetCapacity"] == 100
    assert status["activeServiceStatus"]["trafficRoutedPercent"] == 100
    assert "lastTrafficMigratedTime" in status["activeServiceStatus"]
    # The weights passed through the half-way step.
    assert {f"{old}-serve-svc": 50, f"{new}-serve-svc": 50} in seen
    assert seen[-1].get(f"{new}-serve-svc") == 100
    # Each cluster's target_capacity was PUT step by step (one head plays both clusters here,
    # so it holds whichever was PUT last: the old cluster's 0).
    events = await harness.get_json("events")
    capacity_steps = {
        event["message"].split(" to ")[1]
        for event in events["items"]
        if event["reason"] == "UpdatedServeTargetCapacity"
    }
    ns = harness.namespace
    assert capacity_steps == {
        f"50 on the RayCluster {ns}/{new}",
        f"50 on the RayCluster {ns}/{old}",
        f"100 on the RayCluster {ns}/{new}",
        f"0 on the RayCluster {ns}/{old}",
    }
    assert (await dashboard.serve_details()).target_capacity == 0
    # The run's head is shared: leave it at full capacity for the tests that follow.
    await dashboard.deploy_serve_applications(yaml.safe_load(serve_config(ray_head)))


async def test_a_spec_changed_back_mid_upgrade_returns_the_traffic_and_drops_the_new_cluster(
    harness: Harness, incremental_operator: Operator, ray_head: RayHead
) -> None:
    manifest = incremental_rayservice(ray_head)
    options = manifest["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]
    options.update(maxSurgePercent=25, stepSizePercent=25, intervalSeconds=4)
    await harness.apply(manifest)
    old = (await wait_active(harness, "fruit"))["activeServiceStatus"]["rayClusterName"]
    changed = copy.deepcopy(manifest)
    changed["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = "0"
    await harness.apply(changed)
    await harness.eventually(
        lambda: _exists(harness, "httproute/fruit-httproute"), what="the route"
    )

    async def both_routed() -> bool:
        route = await harness.get_json("httproute/fruit-httproute")
        return len(backends(route)) == 2

    await harness.eventually(both_routed, what="the new cluster in the route")
    await play_gateway_controller(harness, "fruit")

    async def some_traffic_moved() -> dict[str, Any] | None:
        status = await status_of(harness, "fruit")
        moved = status.get("pendingServiceStatus", {}).get("trafficRoutedPercent") or 0
        return status if moved > 0 else None

    status = await harness.eventually(some_traffic_moved, within=60, what="traffic moving")
    new = status["pendingServiceStatus"]["rayClusterName"]
    # Back to the old cluster's spec.
    back = '{"spec":{"rayClusterConfig":{"headGroupSpec":{"rayStartParams":{"num-cpus":null}}}}}'
    await harness.kubectl("patch", "rayservice", "fruit", "--type=merge", "-p", back)

    async def rolling_back() -> bool:
        status = await status_of(harness, "fruit")
        return any(
            c["type"] == "RollbackInProgress" and c["status"] == "True"
            for c in status.get("conditions") or []
        )

    await harness.eventually(rolling_back, what="RollbackInProgress")

    async def rolled_back() -> dict[str, Any] | None:
        status = await status_of(harness, "fruit")
        done = not status.get("pendingServiceStatus", {}).get("rayClusterName")
        return status if done else None

    status = await harness.eventually(rolled_back, within=90, what="the rollback complete")
    assert status["activeServiceStatus"]["rayClusterName"] == old
    assert status["activeServiceStatus"]["targetCapacity"] == 100
    assert status["activeServiceStatus"]["trafficRoutedPercent"] == 100
    assert not any(c["type"] == "RollbackInProgress" for c in status["conditions"])
    upgrading = next(c for c in status["conditions"] if c["type"] == "UpgradeInProgress")
    assert upgrading["status"] == "False"

    async def new_cluster_gone() -> bool:
        return await _cluster(harness, new) is None

    await harness.eventually(new_cluster_gone, what="the new cluster deleted")
    route = await harness.get_json("httproute/fruit-httproute")
    assert backends(route) == {f"{old}-serve-svc": 100}


async def test_suspending_deletes_the_gateway_and_the_route(
    harness: Harness, incremental_operator: Operator, ray_head: RayHead
) -> None:
    manifest = incremental_rayservice(ray_head)
    await harness.apply(manifest)
    await wait_active(harness, "fruit")
    await harness.eventually(
        lambda: _exists(harness, "httproute/fruit-httproute"), what="the route"
    )
    await harness.kubectl(
        "patch", "rayservice", "fruit", "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )

    async def routing_gone() -> bool:
        return not await _exists(harness, "gateway/fruit-gateway") and not await _exists(
            harness, "httproute/fruit-httproute"
        )

    await harness.eventually(routing_gone, what="the Gateway and the route deleted")
    reasons = (await harness.kubectl("get", "events", "-o", "jsonpath={.items[*].reason}")).split()
    assert {"DeletedGateway", "DeletedHTTPRoute"} <= set(reasons)


async def _exists(harness: Harness, what: str) -> bool:
    out = await harness.kubectl("get", what, "--ignore-not-found", "-o", "name")
    return bool(out.strip())


async def _cluster(harness: Harness, name: str) -> dict[str, Any] | None:
    listed = await harness.get_json("rayclusters")
    return next((c for c in listed["items"] if c["metadata"]["name"] == name), None)


async def _has_backend(harness: Harness, service: str) -> bool:
    route = await harness.get_json("httproute/fruit-httproute")
    return service in backends(route)
