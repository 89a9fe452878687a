"""A RayJob manifest for the controller tests (a head-only cluster, run in HTTPMode unless told),
and what they read back: its status, the wait for a deployment state, the Ray jobs of one submission
id."""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.dashboard.client import DashboardClient
from ray_operator.spec.dashboard_models import JobInfo

from tests.controllers.conftest import Harness, eventually
from tests.controllers.ray_fixtures import head_only_cluster_spec

PRINT_RESOURCES = 'python -c "import ray; ray.init(); print(ray.cluster_resources())"'


def rayjob(name: str, entrypoint: str = PRINT_RESOURCES, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "submissionMode": "HTTPMode",
            "entrypoint": entrypoint,
            "rayClusterSpec": head_only_cluster_spec(),
            **spec,
        },
    }


async def status_of(harness: Harness, name: str) -> dict[str, Any]:
    obj = await harness.get_json(f"rayjob/{name}")
    return dict(obj.get("status") or {})


async def wait_for_state(
    harness: Harness, name: str, *states: str, within: float = 90
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status = await status_of(harness, name)
        return status if status.get("jobDeploymentStatus") in states else None

    result: dict[str, Any] = await eventually(
        check, within=within, what=f"RayJob {name} in {states}"
    )
    return result


async def jobs_with_id(dashboard: DashboardClient, submission_id: str) -> list[JobInfo]:
    return [job for job in await dashboard.list_jobs() if job.submission_id == submission_id]


async def finish_submitter_job(harness: Harness, name: str) -> None:
    """Play the Job controller (none runs here): the submitter's Pod exited 0."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await harness.kubectl(
        "patch",
        "job",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        f'{{"status": {{"startTime": "{now}", "completionTime": "{now}", '
        '"succeeded": 1, "conditions": [{"type": "SuccessCriteriaMet", '
        f'"status": "True", "lastTransitionTime": "{now}"}}, {{"type": "Complete", '
        f'"status": "True", "lastTransitionTime": "{now}"}}]}}}}',
    )
