"""A running operator (in-process, watching one test namespace) and a harness to drive it.

Each test gets its own namespace and its own operator replica (no leader election), so tests
cannot see each other's objects. The harness talks to the real API server with kubectl and with
a watch that remembers every Pod ever created, to count creates exactly.

Every test here runs on the control plane WITHOUT a garbage collector (`control_plane` below):
what the operator creates is gone after a deletion only if the operator deleted it, as it
promises; and the Jobs, Deployments and Pods a test stages are written by nobody but the test
and the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_operator.app import Operator, served_kinds, watched_kinds
from ray_operator.controllers.raycluster import RayClusterController
from ray_operator.features import FeatureGates
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.runtime.controller import ControllerFactory
from ray_operator.runtime.errors import TransportError
from ray_operator.settings import Settings
from ray_operator.spec.kinds import POD
from ray_operator.validation.limits import ClusterLimits

from tests.operator_runs import operator_running


async def eventually(
    check: Callable[[], Awaitable[Any]],
    *,
    within: float = 60.0,
    what: str = "condition",
    interval: float = 0.2,
) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} not reached within {within}s; last: {last!r}")


class Harness:
    """Drives one namespace of the real control plane while the operator runs."""

    def __init__(self, kubeconfig: Path, namespace: str, client: KubeClient) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.client = client
        self.created_pods: dict[str, str] = {}  # uid -> name, every Pod ever created here
        self._pod_watch: asyncio.Task[None] | None = None

    async def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        process = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(self.kubeconfig),
            "-n",
            self.namespace,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate(input_text.encode() if input_text else None)
        if check and process.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {err.decode().strip()}")
        return out.decode()

    async def apply(self, manifest: str | dict[str, Any]) -> None:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        await self.kubectl("apply", "--server-side", "-f", "-", input_text=text)

    async def get_json(self, *what: str) -> Any:
        return json.loads(await self.kubectl("get", *what, "-o", "json"))

    async def get_json_if_exists(self, *what: str) -> Any | None:
        """`get_json`, or None while the object does not exist (yet)."""
        out = await self.kubectl("get", *what, "--ignore-not-found", "-o", "json")
        return json.loads(out) if out.strip() else None

    async def pods(self, cluster: str) -> list[dict[str, Any]]:
        """Pods of `cluster` that are not being deleted."""
        listed = await self.get_json("pods", "-l", f"ray.io/cluster={cluster}")
        return [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]

    async def cluster(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.get_json(f"raycluster/{name}")
        return result

    async def eventually(
        self, check: Callable[[], Awaitable[Any]], *, within: float = 60.0, what: str = "condition"
    ) -> Any:
        """Poll `check` until it returns something truthy; fail with the last value."""
        return await eventually(check, within=within, what=what)

    async def pods_settled(
        self, cluster: str, *, head: int, workers: int, within: float = 60.0
    ) -> list[dict[str, Any]]:
        """Wait until exactly this many live Pods exist, all Running and Ready, none terminating."""

        # Wrapped in a tuple: an empty Pod list is a valid answer, but falsy.
        async def check() -> tuple[list[dict[str, Any]]] | None:
            listed = (await self.get_json("pods", "-l", f"ray.io/cluster={cluster}"))["items"]
            if any(p["metadata"].get("deletionTimestamp") for p in listed):
                return None
            heads = [p for p in listed if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
            if len(heads) != head or len(listed) - len(heads) != workers:
                return None
            return (listed,) if all(_ready(p) for p in listed) else None

        result: tuple[list[dict[str, Any]]] = await self.eventually(
            check, within=within, what=f"{head} head + {workers} worker Pods of {cluster}"
        )
        return result[0]

    async def start_counting_pod_creates(self) -> None:
        listed = await self.client.list(POD, namespace=self.namespace)
        for pod in listed.items:
            self.created_pods[pod["metadata"]["uid"]] = pod["metadata"]["name"]
        self._pod_watch = asyncio.create_task(
            self._watch_pods(listed.resource_version), name="test-pod-creates"
        )

    async def _watch_pods(self, resource_version: str) -> None:
        while True:
            try:
                async for event in self.client.watch(
                    POD, namespace=self.namespace, resource_version=resource_version
                ):
                    metadata = event.object.get("metadata") or {}
                    resource_version = metadata.get("resourceVersion", resource_version)
                    if event.type == "ADDED":
                        self.created_pods[metadata["uid"]] = metadata["name"]
            except TransportError:
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        if self._pod_watch is not None:
            self._pod_watch.cancel()
            await asyncio.gather(self._pod_watch, return_exceptions=True)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return pod.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def operator_settings(kubeconfig: Path, namespace: str) -> Settings:
    return Settings(
        kubeconfig=kubeconfig,
        namespaces=(namespace,),
        leader_elect=False,
        health_addr="127.0.0.1:0",
        metrics_addr="127.0.0.1:0",
        max_concurrent_reconciles=4,
    )


@pytest.fixture(scope="session")
def control_plane(control_plane_without_gc: LocalControlPlane) -> LocalControlPlane:
    """This package's plane: no garbage collector (see the module docstring)."""
    return control_plane_without_gc


@pytest.fixture
async def harness(control_plane: LocalControlPlane, namespace: str) -> AsyncIterator[Harness]:
    client = KubeClient(await load_api_client(control_plane.kubeconfig), metrics=Metrics())
    test_harness = Harness(control_plane.kubeconfig, namespace, client)
    await test_harness.start_counting_pod_creates()
    try:
        yield test_harness
    finally:
        await test_harness.stop()
        await client.close()


@pytest.fixture
async def operator(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> AsyncIterator[Operator]:
    """The operator with the RayCluster controller, reconciling this test's namespace."""
    async with running_operator(control_plane.kubeconfig, namespace, [RayClusterController]) as (
        replica
    ):
        yield replica


@contextlib.asynccontextmanager
async def running_operator(
    kubeconfig: Path, namespace: str, controllers: Sequence[ControllerFactory]
) -> AsyncIterator[Operator]:
    """An operator with these controllers on `namespace`, stopped (cleanly) afterwards."""
    replica = Operator(
        operator_settings(kubeconfig, namespace),
        api=await load_api_client(kubeconfig),
        controllers=list(controllers),
    )
    async with operator_running(replica, name="operator-under-test"):
        yield replica


def reconcile_errors(replica: Operator, kind: str) -> dict[str, float]:
    """Reconciles of `kind` that raised, by error type (each one a retry with backoff)."""
    return {
        sample.labels["error"]: sample.value
        for metric in replica.metrics.reconcile_errors_total.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("kind") == kind
    }


StartClusterOperator = Callable[..., Awaitable[Operator]]


@pytest.fixture
async def start_cluster_operator(
    control_plane: LocalControlPlane, namespace: str
) -> AsyncIterator[StartClusterOperator]:
    """`await start_cluster_operator(redis_cleanup=False)`: keyword arguments go to the
    RayClusterController; see `cluster_operators` for `feature_gates`."""
    async with cluster_operators(control_plane.kubeconfig, namespace) as start:
        yield start


@contextlib.asynccontextmanager
async def cluster_operators(
    kubeconfig: Path, namespace: str
) -> AsyncIterator[StartClusterOperator]:
    """A starter of operators with the RayCluster controller, started as `ray-operator run`
    starts (the optional kinds the API server does not serve, or forbids, left out); those still
    running at the end are stopped. `feature_gates=` is the `--feature-gates` flag: what the
    operator caches and, unless `limits=` says otherwise, what its validation allows."""
    running: list[tuple[asyncio.Event, asyncio.Task[int], Any]] = []

    async def start(
        *, feature_gates: FeatureGates | None = None, **controller_options: Any
    ) -> Operator:
        api = await load_api_client(kubeconfig)
        settings = operator_settings(kubeconfig, namespace)
        if feature_gates is not None:
            settings = dataclasses.replace(settings, feature_gates=feature_gates)
            controller_options.setdefault("limits", ClusterLimits(feature_gates=feature_gates))
        kinds = await served_kinds(
            KubeClient(api, metrics=Metrics()),
            watched_kinds(settings),
            namespaces=settings.namespaces,
        )
        replica = Operator(
            settings,
            api=api,
            controllers=[functools.partial(RayClusterController, **controller_options)],
            kinds=kinds,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(replica.run(stop), name="cluster-operator-under-test")
        running.append((stop, task, api))
        return replica

    try:
        yield start
    finally:
        for stop, _, _ in running:
            stop.set()
        for _, task, api in running:
            assert await asyncio.wait_for(task, timeout=30) == 0
            await api.close()
