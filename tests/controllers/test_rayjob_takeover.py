"""Taking a running RayJob over from KubeRay: it is followed, never submitted or created again.

Each test stages "KubeRay ran here" on the real API server: the Ray job is submitted to the real
Ray head under a known submission id (as KubeRay's submitter or HTTP client did), then the RayJob
is created with KubeRay's finalizer and the status KubeRay writes while a job runs
(`jobDeploymentStatus: Running`, `jobId`, `rayClusterName`, `dashboardURL`, `jobStatus`), its
RayCluster, head Pod (in SidecarMode with its submitter container) and Services (and in
K8sJobMode the submitter Job) as KubeRay creates them — labelled
`app.kubernetes.io/created-by: kuberay-operator`, owned by the real uids (compare
../shared/fixtures/kuberay-created/ray-job.*.yaml). Only then does our operator start, reaching
the head through a counting proxy (dashboard_counter.py), so the tests can prove what it never
asked: no POST to /api/jobs/, no new Pod, cluster, Service or Job, and the status kept.
"""

from __future__ import annotations

import datetime
import secrets
from typing import Any

from ray_operator.builders import rayjob as build
from ray_operator.builders.pods import build_head_pod
from ray_operator.builders.services import build_head_service
from ray_operator.dashboard.client import DashboardClient
from ray_operator.spec.dashboard_models import JobSubmission
from ray_operator.spec.kinds import JOB, POD, RAY_CLUSTER, RAY_JOB, SERVICE
from ray_operator.status import rayjob as rules

from tests.controllers.conftest import Harness, eventually
from tests.controllers.dashboard_counter import CountingDashboard, counting_dashboard
from tests.controllers.kuberay_staging import (
    CREATED_BY,
    KUBERAY,
    KubeRayStaging,
    by_kuberay,
    now_text,
)
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    head_only_cluster_spec,
    ray_head,
    start_operator,
)
from tests.controllers.rayjobs import (
    finish_submitter_job,
    jobs_with_id,
    status_of,
    wait_for_state,
)
from tests.controllers.sidecar_submitter import submitter_exits

__all__ = ["auth_secret", "counting_dashboard", "dashboard", "ray_head", "start_operator"]

FINALIZER = "ray.io/rayjob-finalizer"
JOBS_API = "/api/jobs"


class KubeRayRun(KubeRayStaging):
    """What KubeRay left for one RayJob, staged on the API server; remembers the uids."""

    watched = (RAY_CLUSTER, POD, SERVICE, JOB)

    def __init__(self, harness: Harness, name: str, *, mode: str, entrypoint: str) -> None:
        super().__init__(harness, name)
        self.mode = mode
        self.entrypoint = entrypoint
        self.job_id = f"{name}-{secrets.token_hex(3)}"[:63]
        self.cluster_name = f"{name}-{secrets.token_hex(3)}"[:63]

    async def stage(self, **extra_status: Any) -> None:
        rayjob = await self.create_rayjob()
        cluster = await self.create(
            RAY_CLUSTER,
            build.build_cluster_for_job(rayjob, name=self.cluster_name, submission_id=self.job_id),
        )
        await self.create(POD, by_kuberay(build_head_pod(cluster, suffix="kuber")))
        await self.create(SERVICE, by_kuberay(build_head_service(cluster)))
        # KubeRay's `<rayjob>-head-svc` carries no `created-by` label at all, but its selector
        # requires `created-by=kuberay-operator`.
        job_service = build.build_head_service_for_owner(rayjob, cluster)
        del job_service["metadata"]["labels"][CREATED_BY]
        job_service["spec"]["selector"][CREATED_BY] = KUBERAY
        await self.create(SERVICE, job_service)
        dashboard_url = f"{self.cluster_name}-head-svc.{self.namespace}.svc.cluster.local:8265"
        if self.mode == "K8sJobMode":
            submitter = build.build_submitter_job(
                rayjob, cluster, dashboard_address=dashboard_url, submission_id=self.job_id
            )
            await self.create(JOB, by_kuberay(submitter))
        await self.harness.pods_settled(self.cluster_name, head=1, workers=0)
        self.status = {
            "jobDeploymentStatus": "Running",
            "jobId": self.job_id,
            "rayClusterName": self.cluster_name,
            "dashboardURL": dashboard_url,
            "jobStatus": "RUNNING",
            "startTime": now_text(minus_seconds=60),
            "failed": 0,
            "succeeded": 0,
            "rayJobInfo": {"startTime": now_text(minus_seconds=50)},
            "rayClusterStatus": {"state": "ready", "desiredWorkerReplicas": 0},
            **extra_status,
        }
        await self.harness.client.patch_status(
            RAY_JOB, self.name, {"status": self.status}, namespace=self.namespace
        )

    async def create_rayjob(self) -> dict[str, Any]:
        manifest = {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": self.name, "finalizers": [FINALIZER]},
            "spec": {
                "submissionMode": self.mode,
                "entrypoint": self.entrypoint,
                "rayClusterSpec": head_only_cluster_spec(),
            },
        }
        return await self.create(RAY_JOB, manifest)

    async def assert_head_service_selects_any_operators_head(self) -> None:
        """`<rayjob>-head-svc` no longer requires KubeRay's `created-by`: a head Pod we recreate
        is selected too."""
        service = await self.harness.client.get(
            SERVICE, f"{self.name}-head-svc", namespace=self.namespace
        )
        assert CREATED_BY not in service["spec"]["selector"]
        assert service["spec"]["selector"]["ray.io/cluster"] == self.cluster_name

    def assert_status_kept(self, status: dict[str, Any]) -> None:
        for field in ("jobId", "rayClusterName", "dashboardURL", "startTime"):
            assert status[field] == self.status[field], field


async def submit_as_kuberay_did(dashboard: DashboardClient, run: KubeRayRun) -> None:
    await dashboard.submit_job(JobSubmission(run.entrypoint, run.job_id))


def printing_after(seconds: int) -> tuple[str, str]:
    marker = f"taken-over-{secrets.token_hex(4)}"
    return marker, f"python -c \"import time; time.sleep({seconds}); print('{marker}')\""


async def test_http_mode_job_kuberay_submitted_is_followed_to_complete_not_resubmitted(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
    counting_dashboard: CountingDashboard,
) -> None:
    marker, entrypoint = printing_after(4)
    run = KubeRayRun(harness, "http-taken", mode="HTTPMode", entrypoint=entrypoint)
    await run.stage()
    await submit_as_kuberay_did(dashboard, run)
    await start_operator(dashboards={f"{harness.namespace}/*": counting_dashboard.url})

    status = await wait_for_state(harness, run.name, "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert status["jobStatus"] == "SUCCEEDED"
    assert status["succeeded"] == 1
    run.assert_status_kept(status)
    assert counting_dashboard.count("GET", f"{JOBS_API}/{run.job_id}") >= 1
    assert counting_dashboard.count("POST", JOBS_API) == 0, counting_dashboard.requests
    assert len(await jobs_with_id(dashboard, run.job_id)) == 1
    assert len([job for job in await dashboard.list_jobs() if marker in job.entrypoint]) == 1
    await run.assert_nothing_created_or_replaced()
    await run.assert_head_service_selects_any_operators_head()


async def test_k8s_job_mode_job_kuberay_submitted_is_followed_with_kuberays_submitter(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
    counting_dashboard: CountingDashboard,
) -> None:
    marker, entrypoint = printing_after(2)
    run = KubeRayRun(harness, "k8s-taken", mode="K8sJobMode", entrypoint=entrypoint)
    await run.stage()
    await submit_as_kuberay_did(dashboard, run)
    await start_operator(dashboards={f"{harness.namespace}/*": counting_dashboard.url})

    async def ray_job_succeeded() -> bool:
        (job,) = await jobs_with_id(dashboard, run.job_id)
        return job.status == "SUCCEEDED"

    await eventually(ray_job_succeeded, within=60, what="the Ray job SUCCEEDED on the head")
    # A terminal Ray job counts only once KubeRay's submitter finished (its logs are complete):
    # two more looks at the finished job, and the RayJob is still Running.
    looks = counting_dashboard.count("GET", f"{JOBS_API}/{run.job_id}")

    async def looked_twice_more() -> bool:
        return counting_dashboard.count("GET", f"{JOBS_API}/{run.job_id}") >= looks + 2

    await eventually(looked_twice_more, within=20, what="the operator looking at the ended job")
    running = (await harness.get_json(f"rayjob/{run.name}"))["status"]
    assert running["jobDeploymentStatus"] == "Running"
    assert running["jobStatus"] == "SUCCEEDED"
    await finish_submitter_job(harness, run.name)

    status = await wait_for_state(harness, run.name, "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert status["jobStatus"] == "SUCCEEDED"
    run.assert_status_kept(status)
    assert counting_dashboard.count("POST", JOBS_API) == 0, counting_dashboard.requests
    assert len(await jobs_with_id(dashboard, run.job_id)) == 1
    assert len([job for job in await dashboard.list_jobs() if marker in job.entrypoint]) == 1
    await run.assert_nothing_created_or_replaced()
    job = await harness.get_json(f"job/{run.name}")
    assert job["metadata"]["labels"][CREATED_BY] == KUBERAY


async def test_sidecar_mode_job_kuberay_submitted_is_followed_through_its_head_pod(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
    counting_dashboard: CountingDashboard,
) -> None:
    marker, entrypoint = printing_after(1)
    run = KubeRayRun(harness, "sidecar-taken", mode="SidecarMode", entrypoint=entrypoint)
    await run.stage()
    await submit_as_kuberay_did(dashboard, run)
    await start_operator(dashboards={f"{harness.namespace}/*": counting_dashboard.url})

    async def succeeded_seen() -> dict[str, Any] | None:
        status = await status_of(harness, run.name)
        return status if status.get("jobStatus") == "SUCCEEDED" else None

    running = await eventually(succeeded_seen, within=60, what="the ended Ray job seen")
    assert running["jobDeploymentStatus"] == "Running"  # until KubeRay's sidecar has ended
    (pod,) = await harness.pods(run.cluster_name)
    await submitter_exits(harness, pod, code=0)

    status = await wait_for_state(harness, run.name, "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    run.assert_status_kept(status)
    assert counting_dashboard.count("POST", JOBS_API) == 0, counting_dashboard.requests
    assert len([job for job in await dashboard.list_jobs() if marker in job.entrypoint]) == 1
    await run.assert_nothing_created_or_replaced()


async def test_http_mode_job_the_head_does_not_know_is_submitted_once_under_its_id(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
    counting_dashboard: CountingDashboard,
) -> None:
    # KubeRay's answer to a 404 for the stored id (the head lost it, or the submit never got
    # there): submit under that same id (`reconcileHTTPModeJobNotFound`). So do we, once.
    marker, entrypoint = printing_after(0)
    run = KubeRayRun(harness, "http-lost", mode="HTTPMode", entrypoint=entrypoint)
    await run.stage()
    await start_operator(dashboards={f"{harness.namespace}/*": counting_dashboard.url})

    status = await wait_for_state(harness, run.name, "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    run.assert_status_kept(status)
    assert counting_dashboard.count("POST", JOBS_API) == 1, counting_dashboard.requests
    assert len(await jobs_with_id(dashboard, run.job_id)) == 1
    assert len([job for job in await dashboard.list_jobs() if marker in job.entrypoint]) == 1
    await run.assert_nothing_created_or_replaced()


async def test_a_status_check_failure_kuberay_recorded_long_ago_does_not_fail_a_live_job(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
) -> None:
    # The fixtures' RayJobs carry `jobStatusCheckFailureStartTime` from KubeRay's last failed
    # look. Counted from then, it would fail the RayJob at once after a pause longer than 300s;
    # counted from our start at the earliest, our first look (answered) clears it.
    _, entrypoint = printing_after(1)
    run = KubeRayRun(harness, "stale-check", mode="HTTPMode", entrypoint=entrypoint)
    await run.stage(jobStatusCheckFailureStartTime=now_text(minus_seconds=3600))
    await submit_as_kuberay_did(dashboard, run)
    await start_operator()

    status = await wait_for_state(harness, run.name, "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert "jobStatusCheckFailureStartTime" not in status


def test_a_status_check_failure_recorded_before_we_started_counts_from_our_start() -> None:
    started = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
    status = {
        "jobDeploymentStatus": "Running",
        "jobStatusCheckFailureStartTime": "2026-01-01T09:00:00Z",
    }
    timeout = datetime.timedelta(seconds=rules.STATUS_CHECK_TIMEOUT_SECONDS)
    assert rules.status_check_timed_out(status, now=started, not_before=None) is not None
    just_before = started + timeout - datetime.timedelta(seconds=1)
    assert rules.status_check_timed_out(status, now=just_before, not_before=started) is None
    failed = rules.status_check_timed_out(status, now=started + timeout, not_before=started)
    assert failed is not None
    assert failed["reason"] == "JobStatusCheckTimeoutExceeded"
