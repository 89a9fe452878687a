"""Specification: the `ray.io/initializing-timeout` annotation, as KubeRay does it.

A RayService whose cluster never serves within the timeout gets Ready=False/InitializingTimeout,
a Warning `RayServiceInitializingTimeout`, no cluster named in its status, and its clusters
deleted. It is terminal: a spec change creates no cluster; suspending and resuming starts it over
(the timeout counts again from the resume).

Against the real API server; the dashboard is one nobody answers, so the cluster never serves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import yaml

from tests.controllers.conftest import Harness
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    ray_head,
    start_operator,
)
from tests.controllers.rayservices import (
    condition,
    owned_names,
    rayservice,
    serve_config,
    status_of,
    wait_condition,
)
from tests.ray_head import RayHead

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]  # fixtures, used by name

NOWHERE = "http://127.0.0.1:9"


async def holds(check: Callable[[], Awaitable[bool]], *, during: float, what: str) -> None:
    """`check` stays true for `during` seconds (longer than the controller's 2 s requeue)."""
    deadline = time.monotonic() + during
    while time.monotonic() < deadline:
        assert await check(), what
        await asyncio.sleep(0.2)


async def timed_out(harness: Harness, name: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status = await status_of(harness, name)
        reason = condition(status, "Ready").get("reason")
        return status if reason == "InitializingTimeout" else None

    result: dict[str, Any] = await harness.eventually(check, what=f"{name} InitializingTimeout")
    return result


async def test_a_rayservice_not_ready_in_time_fails_for_good_and_loses_its_clusters(
    harness: Harness, start_operator: StartOperator, ray_head: RayHead
) -> None:
    await start_operator(dashboards={f"{harness.namespace}/*": NOWHERE})
    manifest = rayservice(ray_head, name="slow")
    manifest["metadata"]["annotations"] = {"ray.io/initializing-timeout": "2s"}
    manifest["spec"]["rayClusterDeletionDelaySeconds"] = 0
    await harness.apply(manifest)

    status = await timed_out(harness, "slow")
    ready = condition(status, "Ready")
    assert ready["status"] == "False"
    assert ready["message"].startswith(
        "RayService failed to become ready within the configured timeout of 2s. "
        "Time spent initializing: "
    )
    assert not (status.get("activeServiceStatus") or {}).get("rayClusterName")
    assert not (status.get("pendingServiceStatus") or {}).get("rayClusterName")
    warnings = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=slow,type=Warning"
    )
    timeouts = [e for e in warnings["items"] if e["reason"] == "RayServiceInitializingTimeout"]
    assert len(timeouts) == 1
    assert "(configured timeout: 2s)" in timeouts[0]["message"]

    async def no_cluster() -> bool:
        return not (await owned_names(harness, "slow"))["rayclusters"]

    await harness.eventually(no_cluster, what="the timed-out RayService's clusters deleted")

    # Terminal: a new spec does not start it over.
    manifest["spec"]["serveConfigV2"] = yaml.safe_dump(yaml.safe_load(serve_config(ray_head)))
    manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "1"}
    await harness.apply(manifest)

    async def still_timed_out_without_cluster() -> bool:
        reason = condition(await status_of(harness, "slow"), "Ready").get("reason")
        return reason == "InitializingTimeout" and await no_cluster()

    await holds(still_timed_out_without_cluster, during=5, what="stays timed out, no cluster")


async def test_suspend_and_resume_start_a_timed_out_rayservice_over(
    harness: Harness, start_operator: StartOperator, ray_head: RayHead
) -> None:
    await start_operator(dashboards={f"{harness.namespace}/*": NOWHERE})
    manifest = rayservice(ray_head, name="retry")
    manifest["metadata"]["annotations"] = {"ray.io/initializing-timeout": "2s"}
    manifest["spec"]["rayClusterDeletionDelaySeconds"] = 0
    await harness.apply(manifest)
    await timed_out(harness, "retry")

    manifest["spec"]["suspend"] = True
    await harness.apply(manifest)
    await wait_condition(harness, "retry", "Suspended", "True")
    manifest["spec"]["suspend"] = False
    await harness.apply(manifest)
    resumed = await wait_condition(harness, "retry", "Suspended", "False")
    assert condition(resumed, "Suspended")["reason"] == "RayServiceResumed"

    # Initializing again with a new cluster, then timed out again: the timeout was re-armed.
    status = await timed_out(harness, "retry")
    assert condition(status, "Suspended")["status"] == "False"
    warnings = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=retry,type=Warning"
    )
    timeouts = [e for e in warnings["items"] if e["reason"] == "RayServiceInitializingTimeout"]
    assert sum(int(e.get("count") or 1) for e in timeouts) == 2
