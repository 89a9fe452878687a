"""The operator wired in-process (`app.Operator`): readiness, graceful stop, all-stop on failure.

Runs on the real control plane with the test-only `ScriptedController`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import aiohttp
from kubernetes_asyncio.client import ApiClient
from ray_operator.app import Operator
from ray_operator.components import ComponentContext
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime import LEASE, RAY_CLUSTER, Kind, KubeClient, ObjectKey
from ray_operator.settings import Settings
from ray_operator.spec.kinds import WATCHED_KINDS

from tests.runtime.controllers import Script, ScriptedController
from tests.runtime.processes import free_port
from tests.runtime.waiting import eventually

NOWHERE = Kind("example.com", "v1", "widgets", "Widget")
"""A kind no API server serves: its watcher never syncs."""


def settings_for(control_plane: LocalControlPlane, namespace: str, **overrides: Any) -> Settings:
    port = free_port()
    values: dict[str, Any] = {
        "kubeconfig": control_plane.kubeconfig,
        "namespaces": (namespace,),
        "lease_namespace": namespace,
        "identity": "in-process",
        "lease_duration": 4.0,
        "lease_renew_deadline": 3.0,
        "lease_retry_period": 0.5,
        "health_addr": f"127.0.0.1:{port}",
        "metrics_addr": f"127.0.0.1:{port}",
        "log_level": "DEBUG",
    }
    return Settings(**(values | overrides))


@asynccontextmanager
async def operating(operator: Operator) -> AsyncIterator[tuple[asyncio.Event, asyncio.Task[int]]]:
    stop = asyncio.Event()
    task = asyncio.create_task(operator.run(stop), name="operator")
    try:
        yield stop, task
    finally:
        stop.set()
        await asyncio.wait([task], timeout=30)


async def get(settings: Settings, path: str) -> tuple[int, str]:
    """(status, body) of GET `path`; (0, error) while nothing listens yet."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{settings.health_addr}{path}") as response,
        ):
            return response.status, await response.text()
    except aiohttp.ClientConnectionError as error:
        return 0, str(error)


async def create_cluster(client: KubeClient, namespace: str, name: str) -> None:
    await client.create(
        RAY_CLUSTER,
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]
                        }
                    },
                }
            },
        },
    )


def build(
    settings: Settings,
    api: ApiClient,
    controller: ScriptedController | None = None,
    *,
    kinds: Sequence[Kind] = WATCHED_KINDS,
) -> Operator:
    controllers = [lambda context: controller] if controller is not None else []
    return Operator(settings, api=api, controllers=controllers, kinds=kinds)


async def test_readyz_answers_503_until_every_cache_has_synced(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient
) -> None:
    settings = settings_for(control_plane, namespace, leader_elect=False)
    operator = build(settings, api, kinds=[RAY_CLUSTER, NOWHERE])
    async with operating(operator) as (stop, task):

        async def cluster_synced() -> bool:
            status, body = await get(settings, "/readyz")
            return status != 0 and "watch:RayCluster" not in body

        await eventually(cluster_synced)
        assert await get(settings, "/readyz") == (
            503,
            f"caches not synced: watch:Widget:{namespace}\n",
        )
        assert await get(settings, "/healthz") == (200, "ok\n")
        stop.set()
        assert await task == 0


async def test_zero_controllers_run_and_stop_cleanly(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient
) -> None:
    settings = settings_for(control_plane, namespace)
    operator = build(settings, api)
    async with operating(operator) as (stop, task):

        async def ready() -> bool:
            return (await get(settings, "/readyz"))[0] == 200

        await eventually(ready)
        stop.set()
        assert await task == 0


async def test_stop_lets_the_in_flight_reconcile_finish_then_releases_the_lease(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient, client: KubeClient
) -> None:
    gate = asyncio.Event()
    key = ObjectKey("RayCluster", namespace, "slow")
    controller = ScriptedController(scripts={key: Script(gate=gate)})
    settings = settings_for(control_plane, namespace)
    operator = build(settings, api, controller)
    async with operating(operator) as (stop, task):
        await create_cluster(client, namespace, "slow")

        async def in_flight() -> bool:
            return key in controller.running

        await eventually(in_flight)
        stop.set()
        await asyncio.sleep(0.3)
        # Waiting for it, not cancelling it.
        assert not task.done()
        assert key in controller.running
        gate.set()
        assert await task == 0
    assert [called for called, _ in controller.calls] == [key]
    lease = await client.get(LEASE, settings.lease_name, namespace=namespace)
    assert lease["spec"]["holderIdentity"] == ""


async def test_a_reconcile_outlasting_the_shutdown_timeout_is_cancelled(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient, client: KubeClient
) -> None:
    key = ObjectKey("RayCluster", namespace, "stuck")
    controller = ScriptedController(scripts={key: Script(gate=asyncio.Event())})
    settings = settings_for(control_plane, namespace, shutdown_timeout=0.5)
    operator = build(settings, api, controller)
    async with operating(operator) as (stop, task):
        await create_cluster(client, namespace, "stuck")

        async def in_flight() -> bool:
            return key in controller.running

        await eventually(in_flight)
        stopped_at = time.monotonic()
        stop.set()
        assert await task == 0
        assert time.monotonic() - stopped_at < 3.0
        assert key not in controller.running  # cancelled, its finally ran


async def test_when_a_root_task_fails_everything_stops_with_exit_code_1(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient
) -> None:
    settings = settings_for(control_plane, namespace)
    host, port = settings.health_addr.split(":")
    blocker = await asyncio.start_server(lambda reader, writer: None, host, int(port))
    try:
        operator = build(settings, api)
        stop = asyncio.Event()
        # The server root task cannot bind its port, ends, and takes everything down.
        exit_code = await asyncio.wait_for(operator.run(stop), timeout=30)
    finally:
        blocker.close()
        await blocker.wait_closed()
    assert exit_code == 1


async def test_cluster_gauges_follow_the_cache(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient, client: KubeClient
) -> None:
    settings = settings_for(control_plane, namespace, leader_elect=False)
    operator = build(settings, api)
    async with operating(operator):
        await create_cluster(client, namespace, "measured")
        await client.patch_status(
            RAY_CLUSTER,
            "measured",
            namespace=namespace,
            patch={
                "status": {
                    "conditions": [
                        {
                            "type": "RayClusterProvisioned",
                            "status": "True",
                            "reason": "AllPodRunning",
                            "message": "",
                            "lastTransitionTime": "2099-01-01T00:00:42Z",
                        }
                    ]
                }
            },
        )

        async def provisioned() -> bool:
            return 'condition="true"' in (await get(settings, "/metrics"))[1]

        await eventually(provisioned)
        _, body = await get(settings, "/metrics")
    samples = [line for line in body.splitlines() if "measured" in line]
    assert any(
        line.startswith("ray_operator_cluster_info{") and 'owner_kind="None"' in line
        for line in samples
    ), samples
    assert any(
        line.startswith("ray_operator_cluster_provisioned_duration_seconds{") for line in samples
    ), samples


class Sidecar:
    """A test component: runs until cancelled, or ends on request."""

    def __init__(self, context: ComponentContext, *, ends: bool = False) -> None:
        self.context = context
        self.ends = ends
        self.started = asyncio.Event()
        self.cancelled = False

    async def run(self) -> NoReturn:
        self.started.set()
        try:
            if self.ends:
                raise RuntimeError("the sidecar gave up")
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def test_components_run_on_every_replica_and_stop_with_the_operator(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient
) -> None:
    sidecars: list[Sidecar] = []

    def sidecar(context: ComponentContext) -> Sidecar:
        sidecars.append(Sidecar(context))
        return sidecars[-1]

    settings = settings_for(control_plane, namespace)
    operator = Operator(settings, api=api, components=[sidecar])
    async with operating(operator) as (stop, task):
        await asyncio.wait_for(sidecars[0].started.wait(), timeout=10)
        assert sidecars[0].context.settings is settings
        stop.set()
        assert await task == 0
    assert sidecars[0].cancelled


async def test_a_component_that_ends_stops_the_operator_with_exit_code_1(
    control_plane: LocalControlPlane, namespace: str, api: ApiClient
) -> None:
    settings = settings_for(control_plane, namespace)
    operator = Operator(settings, api=api, components=[lambda context: Sidecar(context, ends=True)])
    assert await asyncio.wait_for(operator.run(asyncio.Event()), timeout=30) == 1
