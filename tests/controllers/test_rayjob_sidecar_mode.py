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
import datetime
import json
import os
import sys
from pathlib import Path
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
from tests.controllers.test_rayjob import jobs_with_id, rayjob, status_of, wait_for_state
from tests.ray_head import RayHead

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]

SUBMITTER = "ray-job-submitter"
# What the controller's own requeue period is (3s): a few of them, for "nothing happens".
QUIET_SECONDS = 8


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def job_status_seen(harness: Harness, name: str, job_status: str) -> dict[str, Any] | None:
    status = await status_of(harness, name)
    return status if status.get("jobStatus") == job_status else None


async def head_pod(harness: Harness, cluster: str) -> dict[str, Any]:
    (pod,) = [
        p
        for p in await harness.pods(cluster)
        if p["metadata"]["labels"]["ray.io/node-type"] == "head"
    ]
    return pod


async def submitter_exits(harness: Harness, pod: dict[str, Any], *, code: int) -> None:
    """Write what the kubelet writes when the submitter container ends with `code`."""
    now = now_text()
    statuses = []
    for container in pod["status"]["containerStatuses"]:
        if container["name"] == SUBMITTER:
            container = {
                **container,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
        statuses.append(container)
    patch = json.dumps({"status": {"containerStatuses": statuses}})
    await harness.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "--subresource=status",
        "--type=merge",
        "-p",
        patch,
    )


async def run_sidecar_command(
    pod: dict[str, Any], ray_head: RayHead, *, exit_code: int = 0
) -> bytes:
    """The submitter container's own command, run here against the real head; it must end
    with `exit_code` (`ray job submit` follows the job: 0 when it succeeded, 1 when it failed)."""
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == SUBMITTER]
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    script = container["args"][0]
    for local in ("http://127.0.0.1:8265", "http://localhost:8265"):
        assert local in script
        script = script.replace(local, ray_head.dashboard_url)
    env = {e["name"]: e.get("value", "") for e in container["env"] if "valueFrom" not in e}
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-ce",
        script,
        env={
            **env,
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/tmp"),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": ray_head.token,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == exit_code, output.decode()[-2000:]
    return output


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
