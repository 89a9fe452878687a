"""Fixtures for the RayServeGraph controller tests: the artifact server (TLS, bearer auth, ETag)
with the Secrets that let the operator use it, and an operator running the RayServeGraph
controller alone.

The graph operator runs on its own, beside (when a test needs Ray) a second operator with the
RayCluster and RayService controllers (`start_graph_operator.ray_controllers(head)`): a test can
then read the builder ConfigMap the graph operator created and put its module where the real Ray
head imports it before any RayService controller sends Serve the config that imports it.

Test modules import these fixtures by name and list them in `__all__`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from ray_operator.app import Operator
from ray_operator.builders.serve_graph import builder_configmap_name
from ray_operator.controllers.raycluster import RayClusterController
from ray_operator.controllers.rayservegraph import rayservegraph_controller
from ray_operator.controllers.rayservice import rayservice_controller
from ray_operator.dashboard.resolver import StaticResolver
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.client import load_api_client
from ray_operator.runtime.controller import ControllerFactory
from ray_operator.runtime.errors import NotFound
from ray_operator.spec.fetch_types import FetchPolicy
from ray_operator.spec.kinds import CONFIG_MAP, RAY_SERVE_GRAPH, SECRET, Kind
from ray_operator.spec.serve_graph_names import (
    REFRESH_REQUESTED_ANNOTATION,
    SECRET_HOSTS_ANNOTATION,
)

from tests.controllers.conftest import Harness, eventually, operator_settings
from tests.controllers.ray_fixtures import head_only_cluster_spec
from tests.ray_head import RayHead
from tests.servegraph.artifact_server import ArtifactServer

TOKEN = "s3cr3t-registry-token-4f9a1c"
TOKEN_SECRET = "registry-token"
CA_SECRET = "registry-ca"
GRAPH_PATH = "/graphs/pipeline.pb"


@pytest.fixture
def artifacts() -> Iterator[ArtifactServer]:
    """The artifact server on 127.0.0.1, over TLS (its CA goes into `CA_SECRET`)."""
    with ArtifactServer.start(tls=True) as server:
        yield server


def host_of(url: str) -> str:
    """`host:port` of a URL, as a Secret opts in for it."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


async def create_token_secret(
    harness: Harness, *, hosts: str, name: str = TOKEN_SECRET, token: str = TOKEN
) -> None:
    """The bearer token's Secret, opted in for `hosts` (a comma-separated host[:port] list)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "annotations": {SECRET_HOSTS_ANNOTATION: hosts}},
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }
    await harness.client.create(SECRET, secret, namespace=harness.namespace)


@pytest.fixture
async def registry_secrets(harness: Harness, artifacts: ArtifactServer) -> None:
    """The token Secret opted in for the artifact server, and the server's CA."""
    await create_token_secret(harness, hosts=host_of(artifacts.url(GRAPH_PATH)))
    ca = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CA_SECRET},
        "data": {"ca.crt": base64.b64encode(artifacts.ca_pem).decode()},
    }
    await harness.client.create(SECRET, ca, namespace=harness.namespace)


class StartGraphOperator:
    """`await start_graph_operator(policy=...)` starts an operator running only the RayServeGraph
    controller on this namespace (loopback fetches allowed by default);
    `await start_graph_operator.stop(replica)` stops one as SIGTERM would (in-flight work
    finishes). Those still running at the end are stopped."""

    def __init__(self, control_plane: LocalControlPlane, namespace: str) -> None:
        self._control_plane = control_plane
        self._namespace = namespace
        self._running: dict[int, tuple[asyncio.Event, asyncio.Task[int], Any]] = {}

    async def __call__(self, *, policy: FetchPolicy | None = None) -> Operator:
        controller = rayservegraph_controller(policy=policy or FetchPolicy(allow_loopback=True))
        return await self._start([controller])

    async def ray_controllers(self, head: RayHead) -> Operator:
        """Another operator with the RayCluster and RayService controllers, every cluster of the
        namespace reached at the real head (as `ray_fixtures.start_operator` does)."""
        table = {f"{self._namespace}/*": head.dashboard_url}
        resolver = StaticResolver(table, serve_proxies={f"{self._namespace}/*": head.serve_url})
        return await self._start([RayClusterController, rayservice_controller(resolver=resolver)])

    async def _start(self, controllers: list[ControllerFactory]) -> Operator:
        api = await load_api_client(self._control_plane.kubeconfig)
        replica = Operator(
            operator_settings(self._control_plane.kubeconfig, self._namespace),
            api=api,
            controllers=controllers,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(replica.run(stop), name=f"graph-operator-{len(self._running)}")
        self._running[id(replica)] = (stop, task, api)
        return replica

    async def stop(self, replica: Operator) -> None:
        stop, task, api = self._running.pop(id(replica))
        stop.set()
        try:
            assert await asyncio.wait_for(task, timeout=30) == 0
        finally:
            await api.close()

    async def stop_all(self) -> None:
        for stop, _, _ in self._running.values():
            stop.set()
        running, self._running = list(self._running.values()), {}
        for _, task, api in running:
            try:
                assert await asyncio.wait_for(task, timeout=30) == 0
            finally:
                await api.close()


@pytest.fixture
async def start_graph_operator(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> AsyncIterator[StartGraphOperator]:
    """See `StartGraphOperator`."""
    operators = StartGraphOperator(control_plane, namespace)
    try:
        yield operators
    finally:
        await operators.stop_all()


def rayservegraph(
    name: str,
    url: str,
    *,
    poll: str = "0s",
    http_options: dict[str, Any] | None = None,
    token: bool = True,
) -> dict[str, Any]:
    """A RayServeGraph fetching `url` with the registry token and CA, on a head-only cluster."""
    source: dict[str, Any] = {
        "url": url,
        "caBundleSecretRef": {"name": CA_SECRET, "key": "ca.crt"},
        "pollInterval": poll,
        "timeoutSeconds": 5,
    }
    if token:
        source["tokenSecretRef"] = {"name": TOKEN_SECRET, "key": "token"}
    spec: dict[str, Any] = {
        "source": source,
        "rayClusterSpec": head_only_cluster_spec(serve=True),
        "rayClusterDeletionDelaySeconds": 1,
    }
    if http_options is not None:
        spec["serveHttpOptions"] = http_options
    return {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": name},
        "spec": spec,
    }


async def graph_status(harness: Harness, name: str) -> dict[str, Any]:
    obj = await harness.client.get(RAY_SERVE_GRAPH, name, namespace=harness.namespace)
    return dict(obj.get("status") or {})


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or () if c["type"] == kind), {})


async def wait_for_condition(
    harness: Harness,
    name: str,
    kind: str,
    *,
    status: str = "True",
    reason: str | None = None,
    within: float = 60,
) -> dict[str, Any]:
    """The RayServeGraph's status once condition `kind` has `status` (and `reason`)."""

    async def check() -> dict[str, Any] | None:
        current = await graph_status(harness, name)
        found = condition(current, kind)
        if found.get("status") != status or (reason is not None and found.get("reason") != reason):
            return None
        return current

    result: dict[str, Any] = await eventually(
        check, within=within, what=f"{name}: {kind}={status} {reason or ''}"
    )
    return result


async def wait_for_object(harness: Harness, kind: Kind, name: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        try:
            return await harness.client.get(kind, name, namespace=harness.namespace)
        except NotFound:
            return None

    result: dict[str, Any] = await eventually(check, within=60, what=f"{kind} {name}")
    return result


async def wait_until_gone(harness: Harness, kind: Kind, name: str) -> None:
    async def gone() -> bool:
        try:
            await harness.client.get(kind, name, namespace=harness.namespace)
        except NotFound:
            return True
        return False

    await eventually(gone, within=60, what=f"{kind} {name} deleted")


async def request_refresh(harness: Harness, name: str) -> str:
    """What the event endpoint does for an authenticated refresh: stamp the annotation."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await harness.client.patch(
        RAY_SERVE_GRAPH,
        name,
        {"metadata": {"annotations": {REFRESH_REQUESTED_ANNOTATION: stamp}}},
        namespace=harness.namespace,
    )
    return stamp


async def builder_configmap(harness: Harness, graph: str) -> dict[str, Any]:
    return await wait_for_object(harness, CONFIG_MAP, builder_configmap_name(graph))


async def events_about(harness: Harness, name: str) -> list[dict[str, Any]]:
    listed = await harness.get_json(
        "events",
        "--field-selector",
        f"involvedObject.kind=RayServeGraph,involvedObject.name={name}",
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


def queue_idle(replica: Operator) -> bool:
    """No reconcile running or waiting to run (delayed requeues are not counted)."""
    return replica.queue.in_flight == 0 and len(replica.queue) == 0
