"""Specification: a RayService's cluster is updated in place, not replaced, where KubeRay does so
(`shouldUpdateCluster`), and a `rayClusterConfig` KubeRay's Go types cannot decode is an invalid
spec.

- Taking over from KubeRay v1.5: its active cluster carries `ray.io/kuberay-version: v1.5.1` and
  a hash from v1.5's algorithm, which ours does not reproduce. The cluster is kept and re-stamped
  (hash, worker group count, version: event `UpdatedRayCluster`); no cluster, Pod or Service is
  created or replaced, and the Serve config already running is not PUT again.
- Appending a worker group to `rayClusterConfig` updates the active cluster in place: the same
  cluster (same uid, same head Pod) gets the group and a worker, no pending cluster is prepared.
- With the webhook off, a quantity the CRD's pattern admits but Go refuses reaches the controller:
  Ready=False/ValidationFailed naming the field, one kind of Warning, no cluster, no retry.

Against the real API server and the run's real Ray head (through the counting proxy for PUTs).
"""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders import rayservice as build
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import POD, RAY_CLUSTER, Kind

from tests.controllers.conftest import Harness, reconcile_errors
from tests.controllers.dashboard_counter import CountingDashboard, counting_dashboard
from tests.controllers.kuberay_rayservice import (
    KubeRayService,
    deploy_as_kuberay_did,
    reconciled_serve_again,
    serve_puts,
)
from tests.controllers.ray_fixtures import (
    RAY_VERSION,
    StartOperator,
    auth_secret,
    dashboard,
    ray_head,
    start_operator,
)
from tests.controllers.rayservices import (
    condition,
    rayservice,
    status_of,
    wait_for_answer,
    wait_ready,
)
from tests.ray_head import RayHead

__all__ = ["auth_secret", "counting_dashboard", "dashboard", "ray_head", "start_operator"]

OLD_VERSION = "v1.5.1"
STALE_HASH = "STALEHASHWRITTENBYKUBERAYV15XXXX"  # 32 base32hex characters, as KubeRay writes
UNDECODABLE_QUANTITY = "1e99999999999999999999"


class KubeRayV15Service(KubeRayService):
    """What KubeRay v1.5.1 left: as `KubeRayService`, with its version and its hash."""

    async def create(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        annotations = obj["metadata"].setdefault("annotations", {})
        if kind == RAY_CLUSTER:
            annotations[build.CLUSTER_HASH_ANNOTATION] = STALE_HASH
            annotations[names.KUBERAY_VERSION_ANNOTATION] = OLD_VERSION
        if kind == POD:
            annotations[names.KUBERAY_VERSION_ANNOTATION] = OLD_VERSION
        return await super().create(kind, obj)


async def cluster_annotations(harness: Harness, name: str) -> dict[str, str]:
    cluster = await harness.client.get(RAY_CLUSTER, name, namespace=harness.namespace)
    return dict(cluster["metadata"].get("annotations") or {})


async def event_messages(harness: Harness, reason: str) -> list[str]:
    listed = await harness.get_json("events", "--field-selector", f"reason={reason}")
    return [item["message"] for item in listed["items"]]


async def test_taking_over_from_kuberay_v1_5_restamps_the_active_cluster_and_recreates_nothing(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
    dashboard: Any,
    counting_dashboard: CountingDashboard,
) -> None:
    run = KubeRayV15Service(harness, ray_head, "from-v15")
    service = await run.stage()
    assert build.cluster_config_hash(service) != STALE_HASH
    await deploy_as_kuberay_did(dashboard, service)
    await wait_for_answer(ray_head, f"Hello, world! ({run.color})")

    await start_operator(dashboards={f"{harness.namespace}/*": counting_dashboard.url})

    async def restamped() -> dict[str, str] | None:
        annotations = await cluster_annotations(harness, run.cluster_name)
        ours = annotations.get(names.KUBERAY_VERSION_ANNOTATION) == names.KUBERAY_VERSION
        return annotations if ours else None

    annotations = await harness.eventually(restamped, what="the active cluster re-stamped")
    assert annotations[build.CLUSTER_HASH_ANNOTATION] == build.cluster_config_hash(service)
    assert annotations[build.NUM_WORKER_GROUPS_ANNOTATION] == "0"
    await reconciled_serve_again(counting_dashboard, times=3)

    assert await event_messages(harness, "UpdatedRayCluster") == [
        f"Updated the active RayCluster {harness.namespace}/{run.cluster_name}"
    ]
    assert serve_puts(counting_dashboard) == 0, counting_dashboard.requests
    status = await status_of(harness, run.name)
    assert status["activeServiceStatus"]["rayClusterName"] == run.cluster_name
    assert not (status.get("pendingServiceStatus") or {}).get("rayClusterName"), status
    assert condition(status, "Ready")["status"] == "True"
    await run.assert_nothing_created_or_replaced()
    await wait_for_answer(ray_head, f"Hello, world! ({run.color})")


def worker_group(name: str) -> dict[str, Any]:
    container = {
        "name": "ray-worker",
        "image": f"rayproject/ray:{RAY_VERSION}",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "groupName": name,
        "replicas": 1,
        "minReplicas": 0,
        "maxReplicas": 1,
        "rayStartParams": {},
        "template": {"spec": {"containers": [container]}},
    }


async def test_appending_a_worker_group_updates_the_active_cluster_in_place(
    harness: Harness, start_operator: StartOperator, ray_head: RayHead
) -> None:
    await start_operator()
    manifest = rayservice(ray_head, name="growing")
    await harness.apply(manifest)
    active = (await wait_ready(harness, "growing"))["activeServiceStatus"]["rayClusterName"]
    before = await harness.cluster(active)
    (head,) = await harness.pods(active)

    grown = copy.deepcopy(manifest)
    grown["spec"]["rayClusterConfig"]["workerGroupSpecs"] = [worker_group("added")]
    await harness.apply(grown)
    pods = await harness.pods_settled(active, head=1, workers=1)

    after = await harness.cluster(active)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert [g["groupName"] for g in after["spec"]["workerGroupSpecs"]] == ["added"]
    annotations = after["metadata"]["annotations"]
    assert annotations[build.NUM_WORKER_GROUPS_ANNOTATION] == "1"
    applied = await harness.get_json("rayservice/growing")
    assert annotations[build.CLUSTER_HASH_ANNOTATION] == build.cluster_config_hash(applied)
    assert head["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}
    clusters = (await harness.get_json("rayclusters"))["items"]
    assert [c["metadata"]["name"] for c in clusters] == [active]
    status = await status_of(harness, "growing")
    assert status["activeServiceStatus"]["rayClusterName"] == active
    assert not (status.get("pendingServiceStatus") or {}).get("rayClusterName"), status
    assert condition(status, "Ready")["status"] == "True"
    assert await event_messages(harness, "UpdatedRayCluster") == [
        f"Updated the active RayCluster {harness.namespace}/{active}"
    ]


async def test_a_cluster_config_go_cannot_decode_is_an_invalid_spec_without_a_cluster(
    harness: Harness, start_operator: StartOperator, ray_head: RayHead
) -> None:
    manifest = rayservice(ray_head, name="undecodable")
    pod_spec = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": UNDECODABLE_QUANTITY}}]
    await harness.apply(manifest)  # no webhook here: the CRD's Quantity pattern admits it
    replica = await start_operator()

    async def validation_failed() -> dict[str, Any] | None:
        ready = condition(await status_of(harness, "undecodable"), "Ready")
        return ready if ready.get("reason") == "ValidationFailed" else None

    ready = await harness.eventually(validation_failed, what="Ready=False/ValidationFailed")
    field = "spec.rayClusterConfig.headGroupSpec.template.spec.volumes[0].emptyDir.sizeLimit"
    assert ready["status"] == "False"
    assert ready["message"].startswith(f'{field}: Invalid value: "{UNDECODABLE_QUANTITY}"')
    assert "KubeRay's Go types cannot decode it" in ready["message"]
    warnings = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=undecodable,type=Warning"
    )
    assert {e["reason"] for e in warnings["items"]} == {"InvalidRayServiceSpec"}
    assert (await harness.get_json("rayclusters"))["items"] == []
    assert reconcile_errors(replica, "RayService") == {}
