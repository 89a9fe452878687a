"""`DashboardClient` against a real Ray head: Jobs and Serve APIs, auth, errors, limits.

The only stand-ins are for failures Ray cannot be asked to produce: a closed port and a
loopback server that accepts connections and never answers.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from ray_operator.dashboard.client import (
    DashboardClient,
    DashboardEndpoint,
    DashboardOptions,
    check_serve_proxy,
)
from ray_operator.spec.dashboard_errors import (
    DashboardBadResponse,
    DashboardTimeout,
    DashboardUnauthorized,
    DashboardUnavailable,
    JobNotFound,
    SubmissionIdInUse,
)
from ray_operator.spec.dashboard_models import JobInfo, JobSubmission

from tests.ray_head import RayHead, free_port

PRINT_RESOURCES = 'python -c "import ray; ray.init(); print(ray.cluster_resources())"'


@pytest.fixture
async def ray(ray_head: RayHead) -> AsyncIterator[DashboardClient]:
    async with DashboardClient(
        DashboardEndpoint(ray_head.dashboard_url, token=ray_head.token)
    ) as client:
        yield client


async def wait_for_terminal(
    ray: DashboardClient, submission_id: str, within: float = 60
) -> JobInfo:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        info = await ray.get_job(submission_id)
        if info.terminal:
            return info
        await asyncio.sleep(0.3)
    raise AssertionError(f"job {submission_id} did not end within {within}s")


def new_id(prefix: str = "test") -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


async def test_version_answers_with_the_token(ray: DashboardClient) -> None:
    version = await ray.version()
    assert version["ray_version"].startswith("2.")


async def test_a_missing_token_is_refused_as_unauthorized(ray_head: RayHead) -> None:
    async with DashboardClient(DashboardEndpoint(ray_head.dashboard_url)) as anonymous:
        with pytest.raises(DashboardUnauthorized):
            await anonymous.list_jobs()


async def test_the_token_never_appears_in_errors_or_repr(ray_head: RayHead) -> None:
    endpoint = DashboardEndpoint(ray_head.dashboard_url, token="wrong-" + ray_head.token)
    assert ray_head.token not in repr(endpoint)
    async with DashboardClient(endpoint) as wrong:
        with pytest.raises(DashboardUnauthorized) as caught:
            await wrong.list_jobs()
    assert ray_head.token not in str(caught.value)


async def test_submitted_job_succeeds_with_its_logs_and_is_listed(ray: DashboardClient) -> None:
    submission_id = new_id()
    returned = await ray.submit_job(
        JobSubmission(PRINT_RESOURCES, submission_id, metadata={"owner": "test"})
    )
    assert returned == submission_id
    info = await wait_for_terminal(ray, submission_id)
    assert info.status == "SUCCEEDED", info.message
    assert info.entrypoint == PRINT_RESOURCES
    assert info.start_time_ms > 0
    assert info.end_time_ms >= info.start_time_ms
    assert "'CPU': 2.0" in await ray.job_logs(submission_id)
    assert submission_id in {job.submission_id for job in await ray.list_jobs()}


async def test_failing_job_reports_rays_message(ray: DashboardClient) -> None:
    submission_id = new_id()
    await ray.submit_job(JobSubmission('python -c "raise SystemExit(3)"', submission_id))
    info = await wait_for_terminal(ray, submission_id)
    assert info.status == "FAILED"
    assert "exit code 3" in info.message


async def test_a_second_submit_with_the_same_id_is_refused(ray: DashboardClient) -> None:
    submission_id = new_id()
    await ray.submit_job(JobSubmission("true", submission_id))
    with pytest.raises(SubmissionIdInUse):
        await ray.submit_job(JobSubmission("true", submission_id))
    same = [job for job in await ray.list_jobs() if job.submission_id == submission_id]
    assert len(same) == 1


async def test_unknown_job_is_job_not_found(ray: DashboardClient) -> None:
    with pytest.raises(JobNotFound):
        await ray.get_job(new_id("nobody"))


async def test_stop_then_delete_a_running_job(ray: DashboardClient) -> None:
    submission_id = new_id()
    await ray.submit_job(JobSubmission('python -c "import time; time.sleep(60)"', submission_id))
    assert await ray.stop_job(submission_id)
    info = await wait_for_terminal(ray, submission_id)
    assert info.status == "STOPPED"
    assert await ray.delete_job(submission_id)
    with pytest.raises(JobNotFound):
        await ray.get_job(submission_id)


async def test_an_answer_larger_than_the_limit_is_refused(ray_head: RayHead) -> None:
    small = DashboardOptions(max_response_bytes=64)
    async with DashboardClient(
        DashboardEndpoint(ray_head.dashboard_url, token=ray_head.token), options=small
    ) as ray:
        with pytest.raises(DashboardBadResponse, match="exceeds 64"):
            await ray.version()


async def test_a_closed_port_is_unavailable_at_once() -> None:
    started = time.monotonic()
    async with DashboardClient(DashboardEndpoint(f"http://127.0.0.1:{free_port()}")) as ray:
        with pytest.raises(DashboardUnavailable):
            await ray.version()
    assert time.monotonic() - started < 2


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback socket that accepts connections and never answers (a hung dashboard)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


async def test_a_dashboard_that_never_answers_times_out_within_the_limit(
    silent_server: str,
) -> None:
    options = DashboardOptions(request_timeout=1.0)
    started = time.monotonic()
    async with DashboardClient(DashboardEndpoint(silent_server), options=options) as ray:
        with pytest.raises(DashboardTimeout):
            await ray.list_jobs()
    assert time.monotonic() - started < 2


async def test_serve_applications_deploy_answer_and_go_away(
    ray: DashboardClient,
    ray_head: RayHead,
) -> None:
    config = {
        "http_options": {"host": "127.0.0.1", "port": ray_head.serve_port},
        "applications": [
            {
                "name": "greeter",
                "import_path": "greeter:app",
                "route_prefix": "/",
                "deployments": [
                    {"name": "Greeter", "user_config": {"greeting": "Hi", "color": "blue"}}
                ],
            }
        ],
    }
    await ray.deploy_serve_applications(config)
    deadline = time.monotonic() + 90
    apps = await ray.serve_applications()
    while time.monotonic() < deadline and not (apps.get("greeter") and apps["greeter"].running):
        await asyncio.sleep(0.5)
        apps = await ray.serve_applications()
    assert apps["greeter"].running, apps
    assert apps["greeter"].deployments["Greeter"].status == "HEALTHY"
    assert await check_serve_proxy(ray_head.serve_url)
    async with aiohttp.ClientSession() as http, http.get(ray_head.serve_url + "/") as answer:
        assert await answer.text() == "Hi, world! (blue)"
    await ray.delete_serve_applications()
    for _ in range(120):
        if not await ray.serve_applications():
            break
        await asyncio.sleep(0.5)
    assert await ray.serve_applications() == {}
