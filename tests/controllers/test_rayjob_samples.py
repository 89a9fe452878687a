"""The RayJob flows of KubeRay's samples that wait for the user, never left half-done:
InteractiveMode (ray-job.interactive-mode.yaml) and a job on an existing cluster
(ray-job.use-existing-raycluster.yaml), against the real API server and a real Ray head.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from ray_operator.dashboard.client import DashboardClient
from ray_operator.spec.dashboard_models import JobSubmission

from tests.controllers.conftest import Harness
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    head_only_cluster_spec,
    ray_head,
    start_operator,
)
from tests.controllers.rayjobs import jobs_with_id, rayjob, wait_for_state

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]

# A few of the controller's 3s looks at a RayJob: long enough for repeated warnings to show.
SEVERAL_LOOKS_SECONDS = 10


async def test_interactive_mode_waits_for_the_users_job_id_and_follows_that_job(
    harness: Harness, start_operator: StartOperator, dashboard: DashboardClient
) -> None:
    await start_operator()
    job = rayjob("chat", submissionMode="InteractiveMode")
    del job["spec"]["entrypoint"]
    await harness.apply(job)
    waiting = await wait_for_state(harness, "chat", "Waiting")
    assert "jobId" not in waiting
    assert waiting["dashboardURL"].startswith(f"{waiting['rayClusterName']}-head-svc.")
    # The user submits to the cluster's dashboard, then tells the RayJob which job is theirs.
    job_id = f"mine-{secrets.token_hex(3)}"
    await dashboard.submit_job(JobSubmission('python -c "print(42)"', job_id))
    await harness.kubectl(
        "patch", "rayjob", "chat", "--type=merge", "-p", f'{{"spec": {{"jobId": "{job_id}"}}}}'
    )
    status = await wait_for_state(harness, "chat", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert status["jobId"] == job_id
    assert len(await jobs_with_id(dashboard, job_id)) == 1


async def test_a_job_for_a_cluster_not_there_yet_warns_once_then_runs_when_it_appears(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator()
    job = rayjob("patient", clusterSelector={"ray.io/cluster": "later"})
    del job["spec"]["rayClusterSpec"]
    await harness.apply(job)
    status = await wait_for_state(harness, "patient", "Initializing")
    assert status["rayClusterName"] == "later"
    await asyncio.sleep(SEVERAL_LOOKS_SECONDS)  # a negative: no second warning in a while
    (warning,) = await events_of(harness, "patient", "RayClusterNotFound")
    assert warning.get("count", 1) == 1
    assert warning["message"] == (
        f"RayCluster {harness.namespace}/later set in the clusterSelector is not found. "
        "It must be created manually"
    )

    await harness.apply(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "later"},
            "spec": head_only_cluster_spec(),
        }
    )
    status = await wait_for_state(harness, "patient", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status


async def events_of(harness: Harness, name: str, reason: str) -> list[dict[str, Any]]:
    listed = await harness.get_json("events", "--field-selector", f"involvedObject.name={name}")
    return [event for event in listed["items"] if event["reason"] == reason]
