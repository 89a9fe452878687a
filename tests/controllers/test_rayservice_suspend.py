"""Specification: `spec.suspend: true` on a RayService, as KubeRay does it.

A serving RayService suspended: `Suspending` is stored first, then its RayClusters and its
Services are deleted (events `DeletedRayCluster`/`DeletedService` "during suspend"), then
`Suspended=True/SuspendComplete`, Ready=False, no cluster named in the status, no serve endpoint.
Nothing comes back while it stays suspended. `suspend: false` resumes it: `Suspended=False/
RayServiceResumed`, a new cluster, Ready again and the app answering.

Against the real API server and the run's real Ray head.
"""

from __future__ import annotations

import json

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
    wait_condition,
    wait_for_answer,
    wait_ready,
)
from tests.ray_head import RayHead

__all__ = ["auth_secret", "dashboard", "ray_head", "start_operator"]  # fixtures, used by name


async def set_suspend(harness: Harness, name: str, value: bool) -> None:
    patch = json.dumps({"spec": {"suspend": value}})
    await harness.kubectl("patch", "rayservice", name, "--type", "merge", "-p", patch)


async def test_suspend_deletes_clusters_and_services_and_resume_serves_again(
    harness: Harness, start_operator: StartOperator, ray_head: RayHead
) -> None:
    await start_operator()
    await harness.apply(rayservice(ray_head, name="pausable"))
    before = await wait_ready(harness, "pausable")
    first_cluster = before["activeServiceStatus"]["rayClusterName"]
    assert (await owned_names(harness, "pausable"))["services"] == [
        "pausable-head-svc",
        "pausable-serve-svc",
    ]

    await set_suspend(harness, "pausable", True)
    status = await wait_condition(harness, "pausable", "Suspended", "True")
    suspended = condition(status, "Suspended")
    assert (suspended["reason"], suspended["message"]) == (
        "SuspendComplete",
        "All owned resources have been deleted.",
    )
    assert (
        condition(status, "Suspending")["status"],
        condition(status, "Suspending")["reason"],
    ) == (
        "False",
        "SuspendComplete",
    )
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SuspendComplete")
    assert condition(status, "UpgradeInProgress")["status"] == "False"
    assert not (status.get("activeServiceStatus") or {}).get("rayClusterName")
    assert not (status.get("pendingServiceStatus") or {}).get("rayClusterName")
    assert "numServeEndpoints" not in status
    assert "serviceStatus" not in status
    assert await owned_names(harness, "pausable") == {"rayclusters": [], "services": []}
    events = await harness.get_json("events", "--field-selector", "involvedObject.name=pausable")
    messages = {e["message"] for e in events["items"]}
    ns = harness.namespace
    assert f"Deleted the RayCluster {ns}/{first_cluster} during suspend" in messages
    assert f"Deleted the Service {ns}/pausable-serve-svc during suspend" in messages
    assert f"Deleted the Service {ns}/pausable-head-svc during suspend" in messages

    await set_suspend(harness, "pausable", False)
    after = await wait_ready(harness, "pausable")
    resumed = condition(after, "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "RayServiceResumed")
    assert after["activeServiceStatus"]["rayClusterName"] != first_cluster
    assert after["observedGeneration"] == 3
    await wait_for_answer(ray_head, "Hello, world! (blue)")


async def test_suspending_an_initializing_rayservice_deletes_its_pending_cluster(
    harness: Harness, start_operator: StartOperator, ray_head: RayHead
) -> None:
    # A dashboard nobody answers: the cluster never serves, it stays pending.
    await start_operator(dashboards={f"{harness.namespace}/*": "http://127.0.0.1:9"})
    manifest = rayservice(ray_head, name="neverready")
    await harness.apply(manifest)

    async def pending_cluster() -> list[str]:
        return (await owned_names(harness, "neverready"))["rayclusters"]

    await harness.eventually(pending_cluster, what="the pending RayCluster")
    manifest["spec"]["suspend"] = True
    await harness.apply(manifest)
    status = await wait_condition(harness, "neverready", "Suspended", "True")
    assert await owned_names(harness, "neverready") == {"rayclusters": [], "services": []}
    assert not (status.get("pendingServiceStatus") or {}).get("rayClusterName")
