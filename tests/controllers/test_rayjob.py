"""The RayJob controller against the real API server (KWOK kubelet) and a real Ray head.

KWOK runs no container, so each RayJob's RayCluster is only Pods on paper; the operator's
dashboard resolver maps the test namespace's clusters to the run's one real Ray head on
127.0.0.1, which runs the jobs for real (see ray_fixtures.py).
"""

from __future__ import annotations

import asyncio
import datetime
import secrets
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ray_operator.builders import rayjob as build
from ray_operator.dashboard.client import DashboardClient, DashboardOptions
from ray_operator.spec.dashboard_models import JobInfo, JobSubmission
from ray_operator.status import rayjob as rules

from tests.controllers.conftest import Harness, eventually
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    head_only_cluster_spec,
    ray_head,
    start_operator,
    stop_operator,
)
from tests.controllers.rayjobs import (
    PRINT_RESOURCES,
    finish_submitter_job,
    jobs_with_id,
    rayjob,
    status_of,
    wait_for_state,
)

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]  # fixtures, used by name

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


# --- against the real Ray head ---------------------------------------------------------------


async def test_http_mode_job_runs_to_complete_and_its_cluster_is_shut_down(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
) -> None:
    await start_operator()
    await harness.apply(rayjob("hello", shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=0))
    status = await wait_for_state(harness, "hello", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert status["jobStatus"] == "SUCCEEDED"
    assert status["succeeded"] == 1
    assert status["failed"] == 0
    assert status["jobId"].startswith("hello-")
    assert len(status["jobId"]) == len("hello-") + 5
    cluster = status["rayClusterName"]
    assert cluster.startswith("hello-")
    assert len(cluster) == len("hello-") + 5
    assert status["dashboardURL"] == (
        f"{cluster}-head-svc.{harness.namespace}.svc.cluster.local:8265"
    )
    assert status["startTime"] <= status["endTime"]
    assert status["rayJobInfo"]["startTime"] <= status["rayJobInfo"]["endTime"]
    assert "'CPU': 2.0" in await dashboard.job_logs(status["jobId"])
    service = await harness.get_json("service/hello-head-svc")
    assert service["spec"]["selector"]["ray.io/cluster"] == cluster

    async def cluster_gone() -> bool:
        listed = await harness.get_json("rayclusters")
        return not listed["items"]

    await eventually(cluster_gone, what="the RayJob's cluster deleted after the TTL")


async def test_failing_entrypoint_fails_with_rays_message(
    harness: Harness,
    start_operator: StartOperator,
) -> None:
    await start_operator()
    await harness.apply(rayjob("broken", 'python -c "raise SystemExit(7)"'))
    status = await wait_for_state(harness, "broken", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Failed"
    assert status["jobStatus"] == "FAILED"
    assert status["reason"] == "AppFailed"
    assert "exit code 7" in status["message"]
    assert status["failed"] == 1
    assert status["succeeded"] == 0


async def test_operator_restarted_right_after_submission_submits_exactly_once(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
) -> None:
    marker = f"once-{secrets.token_hex(4)}"
    entrypoint = f"python -c \"import time; time.sleep(4); print('{marker}')\""
    first = await start_operator()
    await harness.apply(rayjob("once", entrypoint))
    status = await wait_for_state(harness, "once", "Running")

    async def submitted() -> list[JobInfo]:
        return await jobs_with_id(dashboard, status["jobId"])

    await eventually(submitted, what="the submission on the dashboard")
    await stop_operator(first)
    await start_operator()
    status = await wait_for_state(harness, "once", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert len(await jobs_with_id(dashboard, status["jobId"])) == 1
    same_entrypoint = [job for job in await dashboard.list_jobs() if marker in job.entrypoint]
    assert len(same_entrypoint) == 1


async def test_a_submission_the_dashboard_already_has_is_not_repeated(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
) -> None:
    # The window a crash can hit: the submit reached Ray, the status write did not. The RayJob
    # is Running with its id stored (as the New step wrote it); the job is already on the head.
    marker = f"early-{secrets.token_hex(4)}"
    entrypoint = f"python -c \"print('{marker}')\""
    job_id = f"early-{secrets.token_hex(3)}"
    await harness.apply(rayjob("early", entrypoint, jobId=job_id))
    await dashboard.submit_job(JobSubmission(entrypoint, job_id))
    await start_operator()
    status = await wait_for_state(harness, "early", "Complete", "Failed")
    assert status["jobId"] == job_id
    assert status["jobDeploymentStatus"] == "Complete"
    assert len([job for job in await dashboard.list_jobs() if marker in job.entrypoint]) == 1


@pytest.fixture
def silent_dashboard() -> Iterator[str]:
    """A loopback port that accepts connections and never answers: a hung dashboard."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


async def test_hung_dashboards_do_not_delay_another_rayjob(
    harness: Harness,
    start_operator: StartOperator,
    silent_dashboard: str,
) -> None:
    # Five RayJobs whose dashboards hang (more than the operator's 4 workers) and one whose
    # dashboard is the real head: the healthy one must reach Running as fast as alone.
    namespace = harness.namespace
    await start_operator(
        dashboards={f"{namespace}/hung-*": silent_dashboard},
        options=DashboardOptions(request_timeout=2.0),
    )
    for index in range(5):
        await harness.apply(rayjob(f"hung-{index}", 'python -c "import time; time.sleep(30)"'))
    for index in range(5):
        await wait_for_state(harness, f"hung-{index}", "Running")
    started = time.monotonic()
    await harness.apply(rayjob("healthy", 'python -c "print(1)"'))
    await wait_for_state(harness, "healthy", "Complete")
    elapsed = time.monotonic() - started
    hung = [await status_of(harness, f"hung-{index}") for index in range(5)]
    assert all(s.get("jobStatusCheckFailureStartTime") for s in hung), hung
    assert all(s["jobDeploymentStatus"] == "Running" for s in hung)
    # Alone, the healthy RayJob takes ~5-10s here (cluster ready, submit, a 1s job).
    assert elapsed < 25, f"healthy RayJob took {elapsed:.1f}s next to five hung dashboards"


async def test_deleting_a_running_rayjob_stops_its_ray_job_and_deletes_what_it_owns(
    harness: Harness,
    start_operator: StartOperator,
    dashboard: DashboardClient,
) -> None:
    await start_operator()
    await harness.apply(rayjob("doomed", 'python -c "import time; time.sleep(120)"'))
    status = await wait_for_state(harness, "doomed", "Running")
    await harness.get_json("service/doomed-head-svc")  # exists while the RayJob runs

    async def running() -> bool:
        jobs = await jobs_with_id(dashboard, status["jobId"])
        return bool(jobs) and jobs[0].status == "RUNNING"

    await eventually(running, what="the Ray job running")
    await harness.kubectl("delete", "rayjob", "doomed", "--wait=false")

    async def gone() -> bool:
        listed = await harness.get_json("rayjobs")
        clusters = await harness.get_json("rayclusters")
        services = await harness.get_json("services")
        return not listed["items"] and not clusters["items"] and not services["items"]

    # No garbage collector runs here (tests/controllers/conftest.py): only the operator deletes.
    await eventually(gone, what="RayJob, its RayCluster and its head Service gone")

    async def stopped() -> bool:
        # Ray stops a job asynchronously: the stop request returns before the driver is gone.
        jobs = await jobs_with_id(dashboard, status["jobId"])
        return jobs[0].status == "STOPPED"

    await eventually(stopped, within=30, what="the Ray job stopped")


async def test_backoff_limit_retries_on_a_new_cluster_each_time(
    harness: Harness,
    start_operator: StartOperator,
) -> None:
    await start_operator()
    await harness.apply(rayjob("flaky", 'python -c "raise SystemExit(1)"', backoffLimit=1))
    clusters_seen: set[str] = set()

    async def finally_failed() -> dict[str, Any] | None:
        status = await status_of(harness, "flaky")
        if status.get("rayClusterName"):
            clusters_seen.add(status["rayClusterName"])
        done = status.get("jobDeploymentStatus") == "Failed" and status.get("failed") == 2
        return status if done else None

    status = await eventually(finally_failed, within=120, what="two failed attempts")
    assert status["reason"] == "AppFailed"
    assert len(clusters_seen) == 2, clusters_seen


async def test_active_deadline_fails_a_job_that_runs_too_long(
    harness: Harness,
    start_operator: StartOperator,
) -> None:
    await start_operator()
    await harness.apply(
        rayjob("slow", 'python -c "import time; time.sleep(120)"', activeDeadlineSeconds=8)
    )
    status = await wait_for_state(harness, "slow", "Failed")
    assert status["reason"] == "DeadlineExceeded"


async def test_suspend_releases_the_cluster_and_resume_starts_over(
    harness: Harness,
    start_operator: StartOperator,
) -> None:
    await start_operator()
    # KubeRay (and our webhook rules) allow suspending only a RayJob that gives its cluster back.
    await harness.apply(
        rayjob("nap", 'python -c "import time; time.sleep(120)"', shutdownAfterJobFinishes=True)
    )
    first = await wait_for_state(harness, "nap", "Running")
    await harness.kubectl(
        "patch", "rayjob", "nap", "--type=merge", "-p", '{"spec": {"suspend": true}}'
    )
    suspended = await wait_for_state(harness, "nap", "Suspended")
    assert "rayClusterName" not in suspended
    assert "jobId" not in suspended
    assert not (await harness.get_json("rayclusters"))["items"]
    await harness.kubectl(
        "patch", "rayjob", "nap", "--type=merge", "-p", '{"spec": {"suspend": false}}'
    )
    again = await wait_for_state(harness, "nap", "Running")
    assert again["rayClusterName"] != first["rayClusterName"]
    assert again["jobId"] != first["jobId"]


async def test_k8s_job_mode_runs_the_submitter_command_kuberay_builds(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: Any,
) -> None:
    # No Job controller runs in the test control plane: the test plays it, running the
    # submitter's own shell command against the real head, then recording the Job's outcome.
    await start_operator()
    await harness.apply(rayjob("submitter", submissionMode="K8sJobMode"))
    status = await wait_for_state(harness, "submitter", "Running")
    job = await harness.get_json("job/submitter")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    assert job["metadata"]["labels"]["app.kubernetes.io/created-by"] == "ray-operator"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RAY_JOB_SUBMISSION_ID"] == status["jobId"]
    script = container["args"][0].replace(
        f"http://{status['dashboardURL']}", ray_head.dashboard_url
    )
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-ce",
        script,
        env={
            "PATH": f"{ray_head_bin()}:/usr/bin:/bin",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": ray_head.token,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, output.decode()[-2000:]
    assert b"'CPU': 2.0" in output
    await finish_submitter_job(harness, "submitter")
    status = await wait_for_state(harness, "submitter", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status


def ray_head_bin() -> str:
    import sys
    from pathlib import Path

    return str(Path(sys.executable).parent)


async def test_cluster_selector_runs_on_the_users_cluster_and_leaves_it_alone(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator()
    await harness.apply(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "shared"},
            "spec": head_only_cluster_spec(),
        }
    )
    job = rayjob("guest", clusterSelector={"ray.io/cluster": "shared"})
    del job["spec"]["rayClusterSpec"]
    await harness.apply(job)
    status = await wait_for_state(harness, "guest", "Complete", "Failed")
    assert status["jobDeploymentStatus"] == "Complete", status
    assert status["rayClusterName"] == "shared"
    clusters = [c["metadata"]["name"] for c in (await harness.get_json("rayclusters"))["items"]]
    assert clusters == ["shared"]


async def test_an_invalid_spec_fails_validation_with_the_field_named(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator()
    job = rayjob("invalid", backoffLimit=-1)
    del job["spec"]["rayClusterSpec"]
    await harness.apply(job)
    status = await wait_for_state(harness, "invalid", "ValidationFailed")
    assert status["reason"] == "ValidationFailed"
    assert "spec.rayClusterSpec: Required value" in status["message"]
    assert "spec.backoffLimit: Invalid value: -1" in status["message"]
    events = await harness.get_json("events", "--field-selector", "involvedObject.name=invalid")
    assert any(e["reason"] == "InvalidRayJobSpec" for e in events["items"])
    assert not (await harness.get_json("rayclusters"))["items"]


# --- pure rules ------------------------------------------------------------------------------


def minimal_job(**spec: Any) -> dict[str, Any]:
    job = rayjob("unit", **spec)
    job["metadata"].update(namespace="ns", uid="uid-1")
    return job


def test_new_rayjob_gets_its_submission_id_and_cluster_name_before_anything_else() -> None:
    status = rules.initialized(
        minimal_job(), {}, now=NOW, cluster_name="unit-abcde", submission_id="unit-fghjk"
    )
    assert status == {
        "jobId": "unit-fghjk",
        "rayClusterName": "unit-abcde",
        "jobDeploymentStatus": "Initializing",
        "startTime": "2026-01-01T12:00:00Z",
    }


def test_spec_job_id_and_cluster_selector_win_over_generated_names() -> None:
    job = minimal_job(jobId="mine", clusterSelector={"ray.io/cluster": "shared"})
    status = rules.initialized(job, {}, now=NOW, cluster_name="x", submission_id="y")
    assert status["jobId"] == "mine"
    assert status["rayClusterName"] == "shared"


def test_a_terminal_ray_job_completes_only_once_the_submitter_finished() -> None:
    info = JobInfo(submission_id="id", status="SUCCEEDED", message="done")
    job = minimal_job(submissionMode="K8sJobMode")
    running = {"jobDeploymentStatus": "Running"}
    assert rules.state(rules.with_job_info(job, running, info=info, submitter_finished=False)) == (
        "Running"
    )
    assert rules.state(rules.with_job_info(job, running, info=info, submitter_finished=True)) == (
        "Complete"
    )


def test_a_ray_job_still_running_30s_after_its_submitter_ended_fails() -> None:
    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
    ended = "2026-01-01T12:00:00Z"
    later = NOW + datetime.timedelta(seconds=29)
    assert rules.submitter_finished_too_long_ago(running, finished_at=ended, now=later) is None
    failed = rules.submitter_finished_too_long_ago(
        running, finished_at=ended, now=NOW + datetime.timedelta(seconds=30)
    )
    assert failed is not None
    assert failed["jobStatus"] == "FAILED"
    assert failed["reason"] == "JobDeploymentStatusTransitionGracePeriodExceeded"


def test_failed_attempts_retry_until_the_backoff_limit() -> None:
    job = minimal_job(backoffLimit=1)
    first = rules.counted(job, {"jobDeploymentStatus": "Failed", "reason": "AppFailed"})
    assert first["failed"] == 1
    assert rules.state(first) == "Retrying"
    second = rules.counted(
        job, {**rules.released(first), "jobDeploymentStatus": "Failed", "reason": "AppFailed"}
    )
    assert second["failed"] == 2
    assert rules.state(second) == "Failed"


def test_deadline_failures_are_never_retried() -> None:
    job = minimal_job(backoffLimit=3)
    failed = rules.counted(job, {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"})
    assert rules.state(failed) == "Failed"


def test_active_deadline_counts_from_the_start_time() -> None:
    job = minimal_job(activeDeadlineSeconds=10)
    status = {"jobDeploymentStatus": "Running", "startTime": "2026-01-01T12:00:00Z"}
    assert (
        rules.active_deadline_passed(job, status, now=NOW + datetime.timedelta(seconds=9)) is None
    )
    failed = rules.active_deadline_passed(job, status, now=NOW + datetime.timedelta(seconds=10))
    assert failed is not None
    assert failed["reason"] == "DeadlineExceeded"


def test_shutdown_is_due_ttl_seconds_after_the_end() -> None:
    job = minimal_job(shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=30)
    due = rules.shutdown_due_at(job, {"endTime": "2026-01-01T12:00:00Z"})
    assert due == NOW + datetime.timedelta(seconds=30)
    assert rules.shutdown_due_at(minimal_job(), {"endTime": "2026-01-01T12:00:00Z"}) is None


def test_submitter_command_checks_status_before_submitting_once() -> None:
    job = minimal_job(
        submissionMode="K8sJobMode",
        runtimeEnvYAML="env_vars: {A: b}",
        metadata={"team": "x"},
        entrypointNumCpus=1,
    )
    words = build.job_submit_command(
        job, dashboard_address="svc.ns.svc.cluster.local:8265", submission_id="unit-abcde"
    )
    line = " ".join(words)
    assert "if ! ray job status --address http://svc.ns.svc.cluster.local:8265 unit-abcde" in line
    assert "--no-wait" in words
    assert words.count("--submission-id") == 1
    assert '--runtime-env-json "{\\"env_vars\\":{\\"A\\":\\"b\\"}}"' in line
    assert "--entrypoint-num-cpus 1.000000" in line
    assert line.endswith(
        "ray job logs --address http://svc.ns.svc.cluster.local:8265 --follow unit-abcde"
    )
    assert line.index("ray job submit") < line.index("-- " + PRINT_RESOURCES)


def test_submitter_job_runs_with_the_head_image_and_the_auth_token() -> None:
    job = minimal_job(submissionMode="K8sJobMode")
    cluster = {"metadata": {"name": "unit-abcde"}, "spec": head_only_cluster_spec()}
    built = build.build_submitter_job(
        job, cluster, dashboard_address="a:8265", submission_id="unit-fghjk"
    )
    assert built["metadata"]["name"] == "unit"
    assert built["spec"]["backoffLimit"] == 2
    container = built["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "rayproject/ray:2.60.0"
    env = {e["name"]: e for e in container["env"]}
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "ray-auth",
        "key": "auth_token",
    }
    assert built["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_http_mode_submission_of_resources_nested_beyond_decoding_is_an_invalid_spec() -> None:
    job = minimal_job(entrypointResources="[" * 5000 + "]" * 5000)
    with pytest.raises(build.InvalidRuntimeEnvError, match=r"^spec\.entrypointResources "):
        build.job_submission(job, submission_id="s")


def test_http_mode_submission_carries_runtime_env_and_resources() -> None:
    job = minimal_job(runtimeEnvYAML="working_dir: /tmp\n", entrypointResources='{"r": 1}')
    submission = build.job_submission(job, submission_id="s")
    assert submission.to_json() == {
        "entrypoint": PRINT_RESOURCES,
        "submission_id": "s",
        "runtime_env": {"working_dir": "/tmp"},
        "entrypoint_resources": {"r": 1},
    }
