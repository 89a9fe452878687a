"""The operator as `ray-operator run --batch-scheduler=...` wires it (the `start_operator` fixture),
and a RayCluster of KubeRay's samples' shape to schedule. Test modules import the fixture by name
and list it in `__all__`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from ray_operator.app import Operator
from ray_operator.cli import controllers_for
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.client import load_api_client

from tests.controllers.conftest import Harness, operator_settings
from tests.ray_clusters import ray_cluster

StartOperator = Callable[[str], Awaitable[Operator]]


@pytest.fixture
async def start_operator(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> AsyncIterator[StartOperator]:
    """`await start_operator("volcano")`: the operator's controllers as `ray-operator run
    --batch-scheduler=volcano` wires them (empty: no scheduler)."""
    running: list[tuple[asyncio.Event, asyncio.Task[int]]] = []

    async def start(scheduler: str) -> Operator:
        settings = dataclasses.replace(
            operator_settings(control_plane.kubeconfig, namespace), batch_scheduler=scheduler
        )
        api = await load_api_client(control_plane.kubeconfig)
        replica = Operator(settings, api=api, controllers=controllers_for(settings))
        stop = asyncio.Event()
        running.append((stop, asyncio.create_task(replica.run(stop), name="batch-operator")))
        return replica

    try:
        yield start
    finally:
        for stop, _ in running:
            stop.set()
        for _, task in running:
            assert await asyncio.wait_for(task, timeout=30) == 0


def cluster(
    name: str, *, labels: dict[str, str] | None = None, replicas: int = 2
) -> dict[str, Any]:
    """Head of 1 CPU / 2Gi, `replicas` workers of 1 CPU / 1Gi (KubeRay's samples' shape)."""
    return ray_cluster(
        name,
        labels=labels,
        replicas=replicas,
        min_replicas=replicas,
        group="worker",
        head_limits={"cpu": "1", "memory": "2Gi"},
        worker_limits={"cpu": "1", "memory": "1Gi"},
    )
