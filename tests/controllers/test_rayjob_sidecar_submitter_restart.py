"""Specification, on real API servers: KubeRay's SidecarSubmitterRestart gate.

With the gate on, a SidecarMode RayJob's head Pod keeps its submitter's own
`restartPolicy: OnFailure` (on an API server with container restart rules: here kube-apiserver
1.34 with its ContainerRestartRules gate, the default from Kubernetes 1.35); a restarted
submitter follows the job it already submitted instead of submitting it again, and the RayJob
fails only once the submitter has restarted twice. An API server without container restart
rules silently drops the field, so the operator refuses to start with the gate on there, naming
the gate (KubeRay refuses below Kubernetes 1.35).

KWOK runs no container: the test runs the submitter's own command against the real Ray head
and writes the restarts into the Pod status as the kubelet would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from ray_operator.app import _main as run_operator
from ray_operator.dashboard.client import DashboardClient
from ray_operator.features import parse_feature_gates
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.capabilities import unmet_gate_prerequisites
from ray_operator.runtime.client import KubeClient, load_api_client

from tests.conftest import running_control_plane
from tests.controllers.conftest import Harness, operator_settings
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    ray_head,
    start_operator,
)
from tests.controllers.rayjobs import jobs_with_id, rayjob, status_of, wait_for_state
from tests.controllers.sidecar_submitter import (
    QUIET_SECONDS,
    SUBMITTER,
    head_pod,
    now_text,
    run_sidecar_command,
)
from tests.ray_head import RayHead

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]

GATE_ON = "SidecarSubmitterRestart=true"
SLEEPS = 'python -c "import time; time.sleep(60)"'


@pytest.fixture(scope="module")
def control_plane() -> Iterator[LocalControlPlane]:
    """This module's plane: an API server with container restart rules."""
    with running_control_plane(
        controller_manager=False, apiserver_feature_gates=("ContainerRestartRules=true",)
    ) as plane:
        yield plane


async def submitter_restarted(harness: Harness, cluster: str, *, count: int) -> None:
    """What the kubelet writes once the submitter has failed and restarted `count` times."""
    now = now_text()
    ended = {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}
    await write_submitter_status(
        harness,
        cluster,
        restartCount=count,
        lastState={"terminated": ended},
        state={"running": {"startedAt": now}},
    )


async def submitter_succeeded(harness: Harness, cluster: str) -> None:
    now = now_text()
    ended = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    await write_submitter_status(harness, cluster, ready=False, state={"terminated": ended})


async def write_submitter_status(harness: Harness, cluster: str, **fields: Any) -> None:
    """Merge `fields` into the head Pod's submitter container status, as the kubelet would."""
    pod = await head_pod(harness, cluster)
    statuses = [
        {**container, **fields} if container["name"] == SUBMITTER else container
        for container in pod["status"]["containerStatuses"]
    ]
    patch = json.dumps({"status": {"containerStatuses": statuses}})
    name = pod["metadata"]["name"]
    await harness.kubectl("patch", "pod", name, "--subresource=status", "--type=merge", "-p", patch)


async def test_this_api_server_passes_the_operators_start_check(
    control_plane: LocalControlPlane, namespace: str
) -> None:
    client = KubeClient(await load_api_client(control_plane.kubeconfig), metrics=Metrics())
    try:
        gates = parse_feature_gates(GATE_ON)
        assert await unmet_gate_prerequisites(client, gates, namespaces=(namespace,)) == []
    finally:
        await client.close()


async def test_gate_on_the_head_pod_keeps_the_submitters_own_restart_policy(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator(feature_gates=GATE_ON)
    await harness.apply(rayjob("restartable", SLEEPS, submissionMode="SidecarMode"))
    status = await wait_for_state(harness, "restartable", "Running")
    pod = await head_pod(harness, status["rayClusterName"])
    assert pod["spec"]["restartPolicy"] == "Never"
    policies = {c["name"]: c.get("restartPolicy") for c in pod["spec"]["containers"]}
    assert policies == {"ray-head": None, SUBMITTER: "OnFailure"}


async def test_a_restarted_submitter_follows_the_job_instead_of_submitting_it_again(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
    dashboard: DashboardClient,
) -> None:
    await start_operator(feature_gates=GATE_ON)
    await harness.apply(rayjob("follows", submissionMode="SidecarMode"))
    status = await wait_for_state(harness, "follows", "Running")
    cluster = status["rayClusterName"]
    pod = await head_pod(harness, cluster)
    await run_sidecar_command(pod, ray_head)
    # Say its log stream broke: the kubelet restarts it, and it runs its command once more.
    await submitter_restarted(harness, cluster, count=1)
    output = await run_sidecar_command(pod, ray_head)
    assert b"'CPU': 2.0" in output  # the logs of the job submitted the first time
    assert len(await jobs_with_id(dashboard, status["jobId"])) == 1
    assert (await status_of(harness, "follows"))["jobDeploymentStatus"] == "Running"
    await submitter_succeeded(harness, cluster)

    status = await wait_for_state(harness, "follows", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status


async def test_a_submitter_restarted_twice_fails_the_rayjob(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator(feature_gates=GATE_ON)
    await harness.apply(rayjob("gives-up", SLEEPS, submissionMode="SidecarMode"))
    status = await wait_for_state(harness, "gives-up", "Running")
    await submitter_restarted(harness, status["rayClusterName"], count=1)
    await asyncio.sleep(QUIET_SECONDS)  # a negative: one restart is no failure
    assert (await status_of(harness, "gives-up"))["jobDeploymentStatus"] == "Running"
    await submitter_restarted(harness, status["rayClusterName"], count=2)

    status = await wait_for_state(harness, "gives-up", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Failed"
    assert status["reason"] == "SubmissionFailed"
    assert status["message"] == (
        f"Ray head pod submitter container {SUBMITTER} terminated after exceeding the maximum "
        "restart count"
    )


async def test_without_container_restart_rules_the_operator_refuses_to_start_with_the_gate(
    control_plane_without_gc: LocalControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    # The default test plane: kube-apiserver 1.34 without ContainerRestartRules drops the field.
    settings = dataclasses.replace(
        operator_settings(control_plane_without_gc.kubeconfig, "default"),
        namespaces=(),
        feature_gates=parse_feature_gates(GATE_ON),
    )
    with caplog.at_level(logging.ERROR):
        assert (
            await asyncio.wait_for(run_operator(settings, controllers=[], components=[]), 60) == 1
        )
    assert (
        "--feature-gates=SidecarSubmitterRestart=true needs an API server with container restart "
        "rules (Kubernetes 1.35+, or 1.34 with its ContainerRestartRules gate): it drops a "
        "container's restartPolicy; turn the gate off or upgrade the API server (and the kubelets)"
    ) in caplog.text
