"""SidecarMode against the real API server (KWOK kubelet) and a real Ray head.

KubeRay's SidecarMode: the RayJob's cluster gets the submitter as a second container of its head
Pod (`ray-job-submitter`, `restartPolicy: Never`, annotation
`ray.io/disable-provisioned-head-restart`), which runs `ray job submit` against the dashboard of
its own Pod and exits with the job's outcome; the controller reads that exit code from the head
Pod's container statuses and the job's status from the dashboard. KWOK runs no container, so
the test plays the sidecar: it runs the container's own command against the real head, then
writes the container's termination into the Pod status as the kubelet would.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray_operator.dashboard.client import DashboardClient

from tests.controllers.conftest import Harness, eventually
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
    run_sidecar_command,
    submitter_exits,
)
from tests.ray_head import RayHead

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]


async def job_status_seen(harness: Harness, name: str, job_status: str) -> dict[str, Any] | None:
    status = await status_of(harness, name)
    return status if status.get("jobStatus") == job_status else None


async def test_sidecar_mode_submits_from_the_head_pod_and_completes(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
    dashboard: DashboardClient,
) -> None:
    await start_operator()
    await harness.apply(rayjob("sidecar", submissionMode="SidecarMode"))
    status = await wait_for_state(harness, "sidecar", "Running")
    cluster = await harness.cluster(status["rayClusterName"])
    assert cluster["metadata"]["annotations"]["ray.io/disable-provisioned-head-restart"] == "true"
    assert cluster["metadata"]["labels"]["ray.io/job-submission-mode"] == "SidecarMode"
    pod = await head_pod(harness, status["rayClusterName"])
    assert [c["name"] for c in pod["spec"]["containers"]] == ["ray-head", SUBMITTER]
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == SUBMITTER]
    env = {e["name"]: e for e in container["env"]}
    assert env["RAY_JOB_SUBMISSION_ID"]["value"] == status["jobId"]
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "ray-auth"

    output = await run_sidecar_command(pod, ray_head)
    assert b"'CPU': 2.0" in output
    (job,) = await jobs_with_id(dashboard, status["jobId"])
    assert job.status == "SUCCEEDED"
    # The operator sees the job ended, but the submitter (its logs) has not: still Running.
    seen = await eventually(
        lambda: job_status_seen(harness, "sidecar", "SUCCEEDED"), what="SUCCEEDED seen"
    )
    assert seen["jobDeploymentStatus"] == "Running"
    await submitter_exits(harness, pod, code=0)

    status = await wait_for_state(harness, "sidecar", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert status["jobStatus"] == "SUCCEEDED"
    assert len(await jobs_with_id(dashboard, status["jobId"])) == 1
    assert not (await harness.get_json("jobs"))["items"]


async def test_a_job_failing_in_sidecar_mode_fails_the_rayjob_with_rays_message(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
) -> None:
    await start_operator()
    await harness.apply(
        rayjob("sidecar-app", 'python -c "raise SystemExit(3)"', submissionMode="SidecarMode")
    )
    status = await wait_for_state(harness, "sidecar-app", "Running")
    pod = await head_pod(harness, status["rayClusterName"])
    await run_sidecar_command(pod, ray_head, exit_code=1)
    await eventually(lambda: job_status_seen(harness, "sidecar-app", "FAILED"), what="FAILED seen")
    await submitter_exits(harness, pod, code=1)

    status = await wait_for_state(harness, "sidecar-app", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Failed"
    assert status["jobStatus"] == "FAILED"
    assert status["reason"] == "AppFailed"
    assert "exit code 3" in status["message"]


async def test_a_sidecar_that_fails_before_submitting_fails_the_rayjob(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator()
    await harness.apply(rayjob("sidecar-broken", submissionMode="SidecarMode"))
    status = await wait_for_state(harness, "sidecar-broken", "Running")
    pod = await head_pod(harness, status["rayClusterName"])
    await submitter_exits(harness, pod, code=1)

    status = await wait_for_state(harness, "sidecar-broken", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Failed"
    assert status["reason"] == "SubmissionFailed"
    assert status["message"] == (
        f"Ray head pod container {SUBMITTER} terminated with exit code 1: Error"
    )


async def test_a_lost_head_pod_fails_the_rayjob_and_is_not_recreated(
    harness: Harness, start_operator: StartOperator
) -> None:
    # A new head would run the submitter again under a used submission id: KubeRay fails the
    # RayJob instead, and its RayCluster (annotated) does not replace a provisioned head.
    await start_operator()
    await harness.apply(
        rayjob(
            "sidecar-lost", 'python -c "import time; time.sleep(60)"', submissionMode="SidecarMode"
        )
    )
    status = await wait_for_state(harness, "sidecar-lost", "Running")
    pod = await head_pod(harness, status["rayClusterName"])
    pods_before = dict(harness.created_pods)
    await harness.kubectl("delete", "pod", pod["metadata"]["name"], "--grace-period=0", "--force")

    status = await wait_for_state(harness, "sidecar-lost", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Failed"
    assert status["reason"] == "AppFailed"
    assert status["message"] == "Ray head pod not found."
    await asyncio.sleep(QUIET_SECONDS)  # a negative: nothing may happen in a few requeues
    assert harness.created_pods == pods_before
    assert not await harness.pods(status["rayClusterName"])
