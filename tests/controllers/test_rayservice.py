"""The RayService controller against the real API server (KWOK kubelet) and a real Ray head.

One real Ray head stands in for every RayCluster of the test namespace: the operator's dashboard
resolver maps all of them (the active one and, during an upgrade, the pending one) to it, and the
head's Serve proxy on 127.0.0.1 answers the HTTP requests. So "zero downtime" here shows what
the operator controls: it never tears Serve down, keeps `Ready` true and the serve Service on a
cluster whose applications run while the pending cluster comes up, switches the Services, and
deletes the old cluster only afterwards. It cannot show two Ray clusters serving side by side.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
from typing import Any

import aiohttp
from ray_operator.builders import rayservice as build
from ray_operator.runtime.errors import TransportError
from ray_operator.spec.dashboard_models import ServeApplicationStatus, ServeDeploymentStatus
from ray_operator.spec.kinds import RAY_SERVICE
from ray_operator.status import rayservice as rules
from ray_operator.status.conditions import set_condition

from tests.controllers.conftest import Harness, eventually
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    head_only_cluster_spec,
    ray_head,
    start_operator,
)
from tests.controllers.rayservices import (
    answer,
    condition,
    rayservice,
    serve_config,
    status_of,
    wait_for_answer,
    wait_ready,
)
from tests.ray_head import RayHead

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]  # fixtures, used by name

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


# --- against the real Ray head ---------------------------------------------------------------


async def test_rayservice_becomes_ready_and_its_app_answers(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
) -> None:
    await start_operator()
    await harness.apply(rayservice(ray_head))
    status = await wait_ready(harness, "greeter")
    assert status["serviceStatus"] == "Running"
    assert status["numServeEndpoints"] == 1
    assert condition(status, "Ready")["reason"] == "NonZeroServeEndpoints"
    assert condition(status, "UpgradeInProgress")["status"] == "False"
    active = status["activeServiceStatus"]
    assert active["applicationStatuses"]["greeter"]["status"] == "RUNNING"
    assert (
        (active["applicationStatuses"]["greeter"]["serveDeploymentStatuses"]["Greeter"]["status"])
        == "HEALTHY"
    )
    assert status["observedGeneration"] == 1
    cluster = active["rayClusterName"]
    serve_svc = await harness.get_json("service/greeter-serve-svc")
    assert serve_svc["spec"]["selector"] == {"ray.io/cluster": cluster, "ray.io/serve": "true"}
    assert [p["port"] for p in serve_svc["spec"]["ports"]] == [8000]
    head_svc = await harness.get_json("service/greeter-head-svc")
    assert head_svc["spec"]["selector"]["ray.io/cluster"] == cluster
    await wait_for_answer(ray_head, "Hello, world! (blue)")


async def test_serve_config_edit_updates_in_place_without_a_new_cluster(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
) -> None:
    await start_operator()
    manifest = rayservice(ray_head)
    await harness.apply(manifest)
    first = await wait_ready(harness, "greeter")
    await wait_for_answer(ray_head, "Hello, world! (blue)")
    manifest["spec"]["serveConfigV2"] = serve_config(ray_head, greeting="Howdy", color="red")
    await harness.apply(manifest)
    await wait_for_answer(ray_head, "Howdy, world! (red)")
    status = await status_of(harness, "greeter")
    assert (
        status["activeServiceStatus"]["rayClusterName"]
        == (first["activeServiceStatus"]["rayClusterName"])
    )
    assert not status.get("pendingServiceStatus")
    clusters = (await harness.get_json("rayclusters"))["items"]
    assert [c["metadata"]["name"] for c in clusters] == [
        first["activeServiceStatus"]["rayClusterName"]
    ]


async def test_cluster_config_edit_upgrades_through_a_pending_cluster_without_downtime(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
) -> None:
    await start_operator()
    manifest = rayservice(ray_head)
    await harness.apply(manifest)
    old = (await wait_ready(harness, "greeter"))["activeServiceStatus"]["rayClusterName"]
    await wait_for_answer(ray_head, "Hello, world! (blue)")

    failures: list[str] = []
    answered = 0
    not_ready: list[dict[str, Any]] = []
    upgrade_seen: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async def send_requests() -> None:
        nonlocal answered
        while not stop.is_set():
            try:
                body = await answer(ray_head)
                answered += 1
                if body != "Hello, world! (blue)":
                    failures.append(body)
            except (aiohttp.ClientError, TimeoutError) as error:
                failures.append(repr(error))
            await asyncio.sleep(0.1)

    def observe(status: dict[str, Any]) -> None:
        if condition(status, "Ready").get("status") != "True":
            not_ready.append(status)
        if condition(status, "UpgradeInProgress").get("status") == "True":
            upgrade_seen.append(status)

    async def watch_status() -> None:
        # Every version the operator writes, through a watch: with the Serve config already
        # running on the (shared) head, the pending phase can be shorter than any poll interval.
        listed = await harness.client.list(RAY_SERVICE, namespace=harness.namespace)
        for item in listed.items:
            if item["metadata"]["name"] == "greeter":
                observe(dict(item.get("status") or {}))
        version = listed.resource_version
        while True:
            try:
                async for event in harness.client.watch(
                    RAY_SERVICE, namespace=harness.namespace, resource_version=version
                ):
                    version = event.object["metadata"].get("resourceVersion", version)
                    if event.object["metadata"].get("name") == "greeter":
                        observe(dict(event.object.get("status") or {}))
            except TransportError:
                await asyncio.sleep(0.2)

    traffic = asyncio.create_task(send_requests(), name="serve-traffic")
    watcher = asyncio.create_task(watch_status(), name="status-watch")
    try:
        container = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"][
            "containers"
        ][0]
        container["resources"]["limits"]["memory"] = "3Gi"
        await harness.apply(manifest)

        async def switched() -> str | None:
            status = await status_of(harness, "greeter")
            active = status.get("activeServiceStatus", {}).get("rayClusterName")
            done = active != old and not status.get("pendingServiceStatus")
            return active if done else None

        new = await eventually(switched, within=120, what="the pending cluster promoted")

        async def old_deleted() -> bool:
            names = [
                c["metadata"]["name"] for c in (await harness.get_json("rayclusters"))["items"]
            ]
            return names == [new]

        await eventually(old_deleted, within=60, what="the old cluster deleted")
    finally:
        stop.set()
        await traffic
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert upgrade_seen, "UpgradeInProgress never became True"
    assert upgrade_seen[0]["pendingServiceStatus"]["rayClusterName"] == new
    assert condition(upgrade_seen[0], "UpgradeInProgress")["reason"] == (
        "BothActivePendingClustersExist"
    )
    assert not not_ready, f"Ready dropped during the upgrade: {not_ready[0]}"
    assert answered > 10
    assert not failures, failures[:5]
    for service in ("greeter-serve-svc", "greeter-head-svc"):
        selector = (await harness.get_json(f"service/{service}"))["spec"]["selector"]
        assert selector["ray.io/cluster"] == new
    status = await status_of(harness, "greeter")
    assert condition(status, "UpgradeInProgress")["reason"] == "NoPendingCluster"


async def test_deleting_a_rayservice_deletes_its_clusters_and_services(
    harness: Harness, start_operator: StartOperator, ray_head: RayHead
) -> None:
    await start_operator()
    await harness.apply(rayservice(ray_head, name="shortlived"))
    await wait_ready(harness, "shortlived")
    finalizers = (await harness.get_json("rayservice/shortlived"))["metadata"]["finalizers"]
    assert finalizers == ["ray.io/rayservice-finalizer"]
    await harness.kubectl("delete", "rayservice", "shortlived", "--wait=false")

    async def all_gone() -> bool:
        services = (await harness.get_json("services"))["items"]
        rayservices = (await harness.get_json("rayservices"))["items"]
        clusters = (await harness.get_json("rayclusters"))["items"]
        ours = [s for s in services if s["metadata"]["name"].startswith("shortlived-")]
        return not rayservices and not clusters and not ours

    await eventually(all_gone, within=60, what="RayService, its clusters and Services gone")


# --- pure rules ------------------------------------------------------------------------------


def app(status: str) -> ServeApplicationStatus:
    return ServeApplicationStatus(status, deployments={"D": ServeDeploymentStatus("HEALTHY")})


def test_serve_config_is_put_when_never_put_changed_or_lost() -> None:
    apps = {"a": app("RUNNING")}
    assert rules.needs_serve_update(None, "h1", apps=apps)[0]
    assert rules.needs_serve_update("h1", "h1", apps={})[0]
    assert rules.needs_serve_update("h1", "h2", apps=apps)[0]
    assert not rules.needs_serve_update("h1", "h1", apps=apps)[0]


def test_serve_config_hash_ignores_yaml_formatting() -> None:
    one = {"spec": {"serveConfigV2": "applications: [{name: a, import_path: m:app}]"}}
    two = {"spec": {"serveConfigV2": "applications:\n  - import_path: m:app\n    name: a\n"}}
    three = {"spec": {"serveConfigV2": "applications: [{name: b, import_path: m:app}]"}}
    assert build.serve_config_hash(one) == build.serve_config_hash(two)
    assert build.serve_config_hash(one) != build.serve_config_hash(three)


def test_a_new_cluster_is_needed_only_when_the_cluster_config_changed() -> None:
    service = {
        "metadata": {"name": "s", "namespace": "ns", "uid": "u"},
        "kind": "RayService",
        "spec": {"rayClusterConfig": head_only_cluster_spec()},
    }
    goal = build.cluster_config_hash(service)
    cluster = build.build_cluster_for_service(service, name="s-abcde")
    assert not rules.needs_new_cluster(service, goal_hash=goal, active=cluster, pending=None)
    assert rules.needs_new_cluster(service, goal_hash=goal, active=None, pending=None)
    changed = copy.deepcopy(service)
    changed["spec"]["rayClusterConfig"]["rayVersion"] = "2.0.0"
    other = build.cluster_config_hash(changed)
    assert rules.needs_new_cluster(changed, goal_hash=other, active=cluster, pending=None)
    no_upgrades = {**changed, "spec": {**changed["spec"], "upgradeStrategy": {"type": "None"}}}
    assert not rules.needs_new_cluster(no_upgrades, goal_hash=other, active=cluster, pending=None)


def test_replica_counts_do_not_change_the_cluster_hash() -> None:
    spec = head_only_cluster_spec()
    spec["workerGroupSpecs"] = [
        {
            "groupName": "w",
            "replicas": 1,
            "minReplicas": 0,
            "maxReplicas": 5,
            "rayStartParams": {},
            "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}},
        }
    ]
    one = {"spec": {"rayClusterConfig": spec}}
    scaled = {
        "spec": {
            "rayClusterConfig": {
                **spec,
                "workerGroupSpecs": [{**spec["workerGroupSpecs"][0], "replicas": 4}],
            }
        }
    }
    assert build.cluster_config_hash(one) == build.cluster_config_hash(scaled)


def test_status_promotes_the_pending_cluster_once_the_services_point_at_it() -> None:
    old = {
        "activeServiceStatus": {"rayClusterName": "s-old"},
        "pendingServiceStatus": {"rayClusterName": "s-new"},
    }
    observed = rules.Observed(
        generation=2,
        active=None,
        pending=None,
        active_apps=None,
        pending_apps={"a": app("RUNNING")},
        services_point_to="s-new",
        serve_endpoints=1,
        new_pending_name=None,
    )
    new = rules.compute_status(old, observed, now=NOW)
    assert new["activeServiceStatus"]["rayClusterName"] == "s-new"
    assert new["activeServiceStatus"]["applicationStatuses"]["a"]["status"] == "RUNNING"
    assert new["pendingServiceStatus"] == {}
    assert new["serviceStatus"] == "Running"
    ready = next(c for c in new["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "NonZeroServeEndpoints")
    upgrade = next(c for c in new["conditions"] if c["type"] == "UpgradeInProgress")
    assert (upgrade["status"], upgrade["reason"]) == ("False", "NoPendingCluster")


def test_ready_drops_when_serve_endpoints_drop_to_zero() -> None:
    ready = set_condition(
        [],
        "Ready",
        status="True",
        reason="NonZeroServeEndpoints",
        message="",
        now=NOW,
        generation=1,
    )
    old = {"conditions": ready, "activeServiceStatus": {"rayClusterName": "s-a"}}
    observed = rules.Observed(
        generation=1,
        active=None,
        pending=None,
        active_apps=None,
        pending_apps=None,
        services_point_to="s-a",
        serve_endpoints=0,
        new_pending_name=None,
    )
    new = rules.compute_status(old, observed, now=NOW)
    condition_ready = next(c for c in new["conditions"] if c["type"] == "Ready")
    assert (condition_ready["status"], condition_ready["reason"]) == ("False", "ZeroServeEndpoints")
    assert "serviceStatus" not in new


def test_serve_service_selects_healthy_proxies_of_the_serving_cluster() -> None:
    service = {
        "metadata": {"name": "s", "namespace": "ns", "uid": "u"},
        "kind": "RayService",
        "spec": {"rayClusterConfig": head_only_cluster_spec(serve=True)},
    }
    cluster = build.build_cluster_for_service(service, name="s-abcde")
    built = build.build_serve_service_for_service(service, cluster)
    assert built["metadata"]["name"] == "s-serve-svc"
    assert built["spec"]["selector"] == {"ray.io/cluster": "s-abcde", "ray.io/serve": "true"}
    assert built["metadata"]["labels"]["app.kubernetes.io/created-by"] == "ray-operator"
