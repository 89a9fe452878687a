"""Ray's KubeRay node provider against the operator: no terminate request is ever lost.

Issue 12, finding 11: the operator cleared `workersToDelete` with a JSON patch that tested only
the group name, so a list the autoscaler wrote in between was wiped — its workers were never
deleted, and the shrunk `replicas` made the operator delete workers the autoscaler had not
chosen. Ray's own provider (the `ray` package, a separate process, mTLS with the admin
certificate) drives the operator: once step by step, with the operator's RayCluster cache held
back by a proxy right after it saw the first request (the lagging cache that opens the race),
and once in a tight loop of random terminates. The workers removed must be exactly those chosen.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ray_operator.app import Operator
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.controllers import lossy_proxy
from tests.controllers.clusters import reconcile_count, scalable_cluster, worker_names
from tests.controllers.conftest import Harness
from tests.controllers.lossy_proxy import LossyProxy

# The step-by-step test's operator reaches the API server through a proxy that can hold a watch.
proxy = lossy_proxy.proxy
operator_behind_proxy = lossy_proxy.operator_behind_proxy

REPO_ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 30


def ray_environment(control_plane: LocalControlPlane) -> dict[str, str]:
    pki = control_plane.directory / "pki"
    return {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT_HTTPS": str(control_plane.ports.apiserver),
        "RAY_KUBERAY_CLIENT_CERT_PATH": str(pki / "admin.crt"),
        "RAY_KUBERAY_CLIENT_KEY_PATH": str(pki / "admin.key"),
        "RAY_KUBERAY_CA_CERT_PATH": str(pki / "ca.crt"),
    }


async def run_ray_autoscaler(
    control_plane: LocalControlPlane, namespace: str, *, rounds: int, seed: int
) -> list[str]:
    """The workers Ray's provider asked to terminate, in order."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.controllers.ray_autoscaler_driver",
        namespace,
        "scaling",
        "small",
        str(rounds),
        str(seed),
        cwd=REPO_ROOT,
        env=ray_environment(control_plane),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode == 0, err.decode()[-3000:]
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert lines[-1] == {"rounds": rounds}, err.decode()[-3000:]
    return [line["terminate"] for line in lines if "terminate" in line]


class RayAutoscalerSteps:
    """Ray's provider in a process that performs one autoscaler update per `terminate` call."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    async def terminate(self, worker: str) -> dict[str, Any]:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(f"terminate {worker}\n".encode())
        await self._process.stdin.drain()
        line = await asyncio.wait_for(self._process.stdout.readline(), timeout=60)
        assert line, "the autoscaler process died"
        answer: dict[str, Any] = json.loads(line)
        return answer


@asynccontextmanager
async def ray_autoscaler_steps(
    control_plane: LocalControlPlane, namespace: str
) -> AsyncIterator[RayAutoscalerSteps]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.controllers.ray_autoscaler_driver",
        namespace,
        "scaling",
        "small",
        "steps",
        cwd=REPO_ROOT,
        env=ray_environment(control_plane),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield RayAutoscalerSteps(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        await asyncio.wait_for(process.wait(), timeout=30)


async def test_a_list_the_autoscaler_wrote_after_the_operators_cache_read_is_never_cleared(
    control_plane: LocalControlPlane,
    harness: Harness,
    proxy: LossyProxy,
    operator_behind_proxy: Operator,
) -> None:
    operator = operator_behind_proxy
    await harness.apply(scalable_cluster(replicas=6))
    pods = await harness.pods_settled("scaling", head=1, workers=6)
    first, second = sorted(worker_names(pods))[:2]

    async def workers_to_delete() -> list[str]:
        group = (await harness.cluster("scaling"))["spec"]["workerGroupSpecs"][0]
        listed: list[str] = (group.get("scaleStrategy") or {}).get("workersToDelete") or []
        return listed

    # The operator's RayCluster cache stops right after the event that lists `first`.
    proxy.hold_watch_events_after("rayclusters", first)
    async with ray_autoscaler_steps(control_plane, harness.namespace) as autoscaler:
        assert await autoscaler.terminate(first) == {"safe": True, "terminated": first}

        async def first_deleted_and_cleared() -> bool:
            gone = first not in worker_names(await harness.pods("scaling"))
            return gone and await workers_to_delete() == []

        await harness.eventually(first_deleted_and_cleared, what=f"{first} deleted, list cleared")
        # Ray's autoscaler sees the list handled and asks for the next worker.
        assert await autoscaler.terminate(second) == {"safe": True, "terminated": second}
    assert await workers_to_delete() == [second]

    # Any Pod event makes the operator reconcile from its stale copy, which still lists `first`.
    reconciles = reconcile_count(operator)
    await harness.kubectl("label", "pod", second, "poked=yes")

    async def reconciled() -> bool:
        return reconcile_count(operator) > reconciles

    await harness.eventually(reconciled, what="a reconcile on the stale cache")
    assert await workers_to_delete() == [second], "the autoscaler's request was wiped"

    proxy.release_watch_events("rayclusters")
    live = await harness.pods_settled("scaling", head=1, workers=4)
    assert worker_names(live) == worker_names(pods) - {first, second}
    assert len(harness.created_pods) == 1 + 6


async def test_ray_autoscaler_terminates_exactly_the_workers_it_chose(
    control_plane: LocalControlPlane, harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=6))
    await harness.pods_settled("scaling", head=1, workers=6)

    chosen = await run_ray_autoscaler(control_plane, harness.namespace, rounds=ROUNDS, seed=12)

    replicas = (await harness.cluster("scaling"))["spec"]["workerGroupSpecs"][0]["replicas"]
    live = await harness.pods_settled("scaling", head=1, workers=replicas)
    live_names = {p["metadata"]["name"] for p in live}
    ever = set(harness.created_pods.values())
    removed = {name for name in ever - live_names if "-worker-" in name}
    assert set(chosen) - removed == set(), "terminate requests lost"
    assert removed - set(chosen) == set(), "workers deleted that the autoscaler did not choose"
    assert len(chosen) == ROUNDS
