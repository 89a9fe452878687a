"""A Serve config already deployed is not PUT again: after our restart, or taking over from KubeRay.

Which Serve config was PUT to which cluster is remembered in memory; with no record, the
operator compares what the cluster reports running (`GET /api/serve/applications/`) with what it
would PUT. These tests run against the real API server and the run's real Ray head, reached
through a counting proxy (dashboard_counter.py), so they can say exactly how many PUTs were made:

- deploy with one operator, stop it, start a fresh one (nothing remembered): 0 PUTs; change the
  config: exactly 1 PUT;
- stage "KubeRay ran here" — a RayService with the status KubeRay writes once it serves, its
  RayCluster, head Pod and Services as KubeRay creates them (labelled
  `app.kubernetes.io/created-by: kuberay-operator`, owned by the real uids; compare
  ../shared/fixtures/kuberay-created/ray-service.*.yaml), the config deployed on the head — then
  start our operator: it keeps the active cluster, PUTs nothing and creates nothing.

The staged cluster's hash annotation is computed by our own `cluster_config_hash`, so these
tests do not depend on that hash matching KubeRay's (tests/builders cover that).
"""

from __future__ import annotations

from ray_operator.dashboard.client import DashboardClient

from tests.controllers.conftest import Harness
from tests.controllers.dashboard_counter import CountingDashboard, counting_dashboard
from tests.controllers.kuberay_rayservice import (
    KubeRayService,
    deploy_as_kuberay_did,
    reconciled_serve_again,
    serve_puts,
    unique_color,
)
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    dashboard,
    ray_head,
    start_operator,
    stop_operator,
)
from tests.controllers.rayservices import (
    condition,
    rayservice,
    serve_config,
    status_of,
    wait_for_answer,
    wait_ready,
)
from tests.ray_head import RayHead

__all__ = ["auth_secret", "counting_dashboard", "dashboard", "ray_head", "start_operator"]


# --- our own restart -------------------------------------------------------------------------


async def test_a_restarted_operator_puts_an_unchanged_serve_config_zero_times_a_changed_once(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
    counting_dashboard: CountingDashboard,
) -> None:
    through_proxy = {f"{harness.namespace}/*": counting_dashboard.url}
    first = await start_operator(dashboards=through_proxy)
    color = unique_color()
    manifest = rayservice(ray_head, color=color)
    await harness.apply(manifest)
    active = (await wait_ready(harness, "greeter"))["activeServiceStatus"]["rayClusterName"]
    await wait_for_answer(ray_head, f"Hello, world! ({color})")
    assert serve_puts(counting_dashboard) >= 1
    await stop_operator(first)

    puts = serve_puts(counting_dashboard)
    await start_operator(dashboards=through_proxy)
    await reconciled_serve_again(counting_dashboard, times=3)
    assert serve_puts(counting_dashboard) == puts, counting_dashboard.requests[-10:]
    await wait_for_answer(ray_head, f"Hello, world! ({color})")

    manifest["spec"]["serveConfigV2"] = serve_config(ray_head, greeting="Howdy", color="red")
    await harness.apply(manifest)
    await wait_for_answer(ray_head, "Howdy, world! (red)")
    await reconciled_serve_again(counting_dashboard, times=3)
    assert serve_puts(counting_dashboard) == puts + 1, counting_dashboard.requests[-10:]
    status = await status_of(harness, "greeter")
    assert status["activeServiceStatus"]["rayClusterName"] == active
    assert condition(status, "Ready")["status"] == "True"


# --- taking over from KubeRay ----------------------------------------------------------------


async def test_taking_over_a_serving_rayservice_keeps_its_cluster_and_puts_nothing(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
    dashboard: DashboardClient,
    counting_dashboard: CountingDashboard,
) -> None:
    run = KubeRayService(harness, ray_head, "taken")
    service = await run.stage()
    await deploy_as_kuberay_did(dashboard, service)
    await wait_for_answer(ray_head, f"Hello, world! ({run.color})")

    await start_operator(dashboards={f"{harness.namespace}/*": counting_dashboard.url})
    await reconciled_serve_again(counting_dashboard, times=3)

    assert serve_puts(counting_dashboard) == 0, counting_dashboard.requests
    status = await status_of(harness, run.name)
    assert status["activeServiceStatus"]["rayClusterName"] == run.cluster_name
    assert not (status.get("pendingServiceStatus") or {}).get("rayClusterName"), status
    assert condition(status, "Ready")["status"] == "True"
    assert status["activeServiceStatus"]["applicationStatuses"]["greeter"]["status"] == "RUNNING"
    await run.assert_nothing_created_or_replaced()
    await wait_for_answer(ray_head, f"Hello, world! ({run.color})")
