"""A RayJob or RayService whose dashboard cannot be reached says so: the `DashboardReachable`
condition names the URL and the cause, one Warning Event per change of cause (not per poll),
polling backs off, and the condition turns True once the dashboard answers again."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from ray_operator.dashboard.client import DashboardOptions

from tests.controllers.conftest import Harness, eventually
from tests.controllers.dashboard_counter import CountingDashboard, counting_dashboard
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    head_only_cluster_spec,
    ray_head,
    start_operator,
)
from tests.controllers.rayjobs import rayjob, wait_for_state
from tests.silent_server import silent_server

__all__ = ["auth_secret", "counting_dashboard", "ray_head", "start_operator"]


def closed_port_url() -> str:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
async def silent_dashboard() -> AsyncIterator[str]:
    """A loopback server that accepts connections and never answers."""
    async with silent_server() as url:
        yield url


@pytest.fixture
async def answering_with() -> AsyncIterator[Any]:
    """`await answering_with(status)`: the URL of a loopback server answering every request so."""
    runners: list[web.AppRunner] = []

    async def start(status: int) -> str:
        async def answer(_request: web.Request) -> web.Response:
            return web.Response(status=status, text="no")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        yield start
    finally:
        for runner in runners:
            await runner.cleanup()


async def dashboard_condition(harness: Harness, kind: str, name: str) -> dict[str, Any] | None:
    obj = await harness.get_json(f"{kind}/{name}")
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "DashboardReachable"), None)


async def wait_for_reachability(
    harness: Harness, kind: str, name: str, status: str, within: float = 60
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        condition = await dashboard_condition(harness, kind, name)
        return condition if condition and condition["status"] == status else None

    found: dict[str, Any] = await eventually(
        check, within=within, what=f"{kind} {name} DashboardReachable={status}"
    )
    return found


async def dashboard_events(harness: Harness, name: str) -> dict[str, int]:
    """reason -> count of the Dashboard* Events recorded for the object `name`."""
    listed = await harness.get_json("events")
    counts: dict[str, int] = {}
    for event in listed["items"]:
        if event["involvedObject"]["name"] == name and event["reason"].startswith("Dashboard"):
            counts[event["reason"]] = counts.get(event["reason"], 0) + int(event.get("count", 1))
    return counts


def rayjob_waiting_on(name: str) -> dict[str, Any]:
    return rayjob(name, 'python -c "print(1)"')


@pytest.mark.parametrize(
    ("dashboard", "cause"),
    [
        ("dns", "DNSFailure"),
        ("closed-port", "ConnectionRefused"),
        ("silent", "Timeout"),
        ("503", "ServerError"),
        ("401", "Unauthorized"),
    ],
)
async def test_an_unreachable_dashboard_gives_the_rayjob_a_condition_naming_url_and_cause(
    harness: Harness,
    start_operator: StartOperator,
    silent_dashboard: str,
    answering_with: Any,
    dashboard: str,
    cause: str,
) -> None:
    url = {
        "dns": "http://ray-head.nowhere.invalid:8265",
        "closed-port": closed_port_url(),
        "silent": silent_dashboard,
        "503": await answering_with(503) if dashboard == "503" else "",
        "401": await answering_with(401) if dashboard == "401" else "",
    }[dashboard]
    await start_operator(
        dashboards={f"{harness.namespace}/*": url},
        options=DashboardOptions(request_timeout=1.0, connect_timeout=1.0),
    )
    await harness.apply(rayjob_waiting_on("lost"))
    condition = await wait_for_reachability(harness, "rayjob", "lost", "False")
    assert condition["reason"] == cause
    assert url in condition["message"]
    status = (await harness.get_json("rayjob/lost"))["status"]
    assert status["jobDeploymentStatus"] == "Running"
    assert status.get("jobStatusCheckFailureStartTime")


async def rayjob_behind_a_failing_dashboard(
    harness: Harness, start_operator: StartOperator, dashboard: CountingDashboard, name: str
) -> None:
    """A RayJob whose dashboard answers 503, once the operator has said so."""
    dashboard.failing_with = 503
    await start_operator(dashboards={f"{harness.namespace}/*": dashboard.url})
    await harness.apply(rayjob_waiting_on(name))
    await wait_for_reachability(harness, "rayjob", name, "False")


async def test_the_warning_event_is_not_repeated_per_poll_and_polling_backs_off(
    harness: Harness,
    start_operator: StartOperator,
    counting_dashboard: CountingDashboard,
) -> None:
    await rayjob_behind_a_failing_dashboard(harness, start_operator, counting_dashboard, "flaky")
    first = len(counting_dashboard.requests)
    await asyncio.sleep(24)
    # The RayJob polls every 3 s: eight requests in 24 s. Backing off (a cool-down of 1, 2, 4,
    # 8, 16 s after each failure, never less than the poll) asks at about 3, 6, 10 and 18 s.
    asked = len(counting_dashboard.requests) - first
    assert asked <= 5, counting_dashboard.requests
    assert await dashboard_events(harness, "flaky") == {"DashboardUnreachable": 1}


async def test_the_condition_turns_true_with_one_normal_event_when_the_dashboard_answers_again(
    harness: Harness,
    start_operator: StartOperator,
    counting_dashboard: CountingDashboard,
) -> None:
    await rayjob_behind_a_failing_dashboard(harness, start_operator, counting_dashboard, "back")
    counting_dashboard.failing_with = None
    condition = await wait_for_reachability(harness, "rayjob", "back", "True", within=90)
    assert condition["reason"] == "DashboardAnswered"
    await wait_for_state(harness, "back", "Complete")
    assert await dashboard_events(harness, "back") == {
        "DashboardUnreachable": 1,
        "DashboardReachable": 1,
    }


async def test_a_rayservice_whose_dashboard_refuses_gets_the_condition_once(
    harness: Harness, start_operator: StartOperator
) -> None:
    url = closed_port_url()
    await start_operator(dashboards={f"{harness.namespace}/*": url})
    await harness.apply(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": {"name": "quiet"},
            "spec": {
                "serveConfigV2": "applications: []\n",
                "rayClusterConfig": head_only_cluster_spec(serve=True),
            },
        }
    )
    condition = await wait_for_reachability(harness, "rayservice", "quiet", "False")
    assert condition["reason"] == "ConnectionRefused"
    assert url in condition["message"]
    await asyncio.sleep(6)
    assert await dashboard_events(harness, "quiet") == {"DashboardUnreachable": 1}
