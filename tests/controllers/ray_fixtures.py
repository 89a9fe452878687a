"""Fixtures for the RayJob and RayService controller tests: a real Ray head and operators whose
dashboard resolver points the test's RayClusters at it.

KWOK makes the RayClusters' Pods Running and Ready, but no container runs: the Ray that answers
is the run's one real head on 127.0.0.1 (tests/ray_head.py). The operator reaches it through a
`StaticResolver` (`<namespace>/<cluster glob>` → URL), exactly as an operator outside the cluster
would be configured, and authenticates with the head's token, which the test stores in the Secret
named by the clusters' `authOptions.secretName`.

Test modules import these fixtures by name (pytest finds imported fixtures) and list them in
`__all__` so linters see them used.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
from ray_operator.app import Operator
from ray_operator.controllers.dashboards import SECRET
from ray_operator.controllers.raycluster import RayClusterController
from ray_operator.controllers.rayjob import rayjob_controller
from ray_operator.controllers.rayservice import rayservice_controller
from ray_operator.dashboard.client import DashboardClient, DashboardEndpoint, DashboardOptions
from ray_operator.dashboard.resolver import StaticResolver
from ray_operator.features import parse_feature_gates
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.client import load_api_client
from ray_operator.validation.limits import ClusterLimits

from tests.controllers.conftest import Harness, operator_settings
from tests.ray_head import RayHead
from tests.ray_head import ray_head as ray_head  # the shared fixture, imported by name

AUTH_SECRET = "ray-auth"
RAY_VERSION = "2.60.0"
StartOperator = Callable[..., Awaitable[Operator]]


@pytest.fixture
async def dashboard(ray_head: RayHead) -> AsyncIterator[DashboardClient]:
    """The test's own client of the real head, to check what the operator did there."""
    endpoint = DashboardEndpoint(ray_head.dashboard_url, token=ray_head.token)
    async with DashboardClient(endpoint, options=DashboardOptions(request_timeout=10)) as client:
        yield client


@pytest.fixture
async def auth_secret(harness: Harness, ray_head: RayHead) -> str:
    """The Secret with the head's token that the test clusters name in `authOptions`."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": AUTH_SECRET, "namespace": harness.namespace},
        "data": {"auth_token": base64.b64encode(ray_head.token.encode()).decode()},
    }
    await harness.client.create(SECRET, secret, namespace=harness.namespace)
    return AUTH_SECRET


@pytest.fixture
async def start_operator(
    control_plane: LocalControlPlane, namespace: str, ray_head: RayHead, auth_secret: str
) -> AsyncIterator[StartOperator]:
    """Starts operators (RayCluster + RayJob + RayService controllers) on this namespace.

    `await start_operator()` maps every cluster of the namespace to the real head;
    `await start_operator(dashboards={"<ns>/<glob>": url, ...})` maps explicitly (first match
    wins, exact names before globs); `feature_gates="Gate=true"` is the operator's
    `--feature-gates`. Operators still running at the end are stopped.
    """
    running: list[tuple[asyncio.Event, asyncio.Task[int]]] = []

    async def start(
        *,
        dashboards: Mapping[str, str] | None = None,
        options: DashboardOptions | None = None,
        feature_gates: str = "",
    ) -> Operator:
        table = dict(dashboards or {})
        table.setdefault(f"{namespace}/*", ray_head.dashboard_url)
        resolver = StaticResolver(table, serve_proxies={f"{namespace}/*": ray_head.serve_url})
        api = await load_api_client(control_plane.kubeconfig)
        limits = ClusterLimits(feature_gates=parse_feature_gates(feature_gates))
        replica = Operator(
            dataclasses.replace(
                operator_settings(control_plane.kubeconfig, namespace),
                feature_gates=limits.feature_gates,
            ),
            api=api,
            controllers=[
                functools.partial(RayClusterController, limits=limits),
                rayjob_controller(resolver=resolver, options=options, limits=limits),
                rayservice_controller(resolver=resolver, options=options, limits=limits),
            ],
        )
        stop = asyncio.Event()
        task = asyncio.create_task(replica.run(stop), name=f"operator-{len(running)}")
        running.append((stop, task))
        replica.stop_event = stop  # type: ignore[attr-defined]
        replica.task = task  # type: ignore[attr-defined]
        return replica

    try:
        yield start
    finally:
        for stop, _ in running:
            stop.set()
        for _, task in running:
            if not task.done():
                await asyncio.wait_for(task, timeout=30)


async def stop_operator(replica: Operator) -> None:
    """Stop one operator started by `start_operator` (SIGTERM-like: in-flight work finishes)."""
    replica.stop_event.set()  # type: ignore[attr-defined]
    assert await asyncio.wait_for(replica.task, timeout=30) == 0  # type: ignore[attr-defined]


def head_only_cluster_spec(*, serve: bool = False) -> dict[str, Any]:
    """A small RayCluster spec with token auth (the head's Secret) and no workers."""
    ports = [
        {"name": "gcs-server", "containerPort": 6379},
        {"name": "dashboard", "containerPort": 8265},
        {"name": "client", "containerPort": 10001},
    ]
    if serve:
        ports.append({"name": "serve", "containerPort": 8000})
    container = {
        "name": "ray-head",
        "image": f"rayproject/ray:{RAY_VERSION}",
        "ports": ports,
        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
    }
    return {
        "rayVersion": RAY_VERSION,
        "authOptions": {"mode": "token", "secretName": AUTH_SECRET},
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}},
    }
