"""A serving RayService as KubeRay left it (its RayCluster, head Pod and Services staged on the API
server, Serve deployed on the real head), and the dashboard calls a takeover test counts."""

from __future__ import annotations

import secrets
from typing import Any

from ray_operator.builders import rayservice as build
from ray_operator.builders.pods import build_head_pod
from ray_operator.builders.services import build_head_service
from ray_operator.dashboard.client import DashboardClient
from ray_operator.spec.kinds import POD, RAY_CLUSTER, RAY_SERVICE, SERVICE

from tests.controllers.conftest import Harness, eventually
from tests.controllers.dashboard_counter import CountingDashboard
from tests.controllers.kuberay_staging import KubeRayStaging, by_kuberay, now_text
from tests.controllers.rayservices import rayservice
from tests.ray_head import RayHead

SERVE_API = "/api/serve/applications/"
FINALIZER = "ray.io/rayservice-finalizer"


def serve_gets(counter: CountingDashboard) -> int:
    return counter.count("GET", SERVE_API)


def serve_puts(counter: CountingDashboard) -> int:
    return counter.count("PUT", SERVE_API)


async def reconciled_serve_again(counter: CountingDashboard, *, times: int) -> None:
    """Until the operator read the Serve applications `times` more times (a reconcile each)."""
    target = serve_gets(counter) + times

    async def seen() -> bool:
        return serve_gets(counter) >= target

    await eventually(seen, within=60, what=f"{times} more GETs of {SERVE_API}")


def unique_color() -> str:
    """A colour no earlier test deployed: the run's one Ray head keeps the last test's config,
    which this operator would rightly find deployed and not PUT."""
    return f"blue-{secrets.token_hex(3)}"


class KubeRayService(KubeRayStaging):
    """What KubeRay left for one serving RayService, staged on the API server."""

    def __init__(self, harness: Harness, head: RayHead, name: str) -> None:
        super().__init__(harness, name)
        self.head = head
        self.color = unique_color()
        self.cluster_name = f"{name}-{secrets.token_hex(3)[:5]}"

    async def stage(self) -> dict[str, Any]:
        manifest = rayservice(self.head, name=self.name, color=self.color)
        manifest["metadata"]["finalizers"] = [FINALIZER]
        service = await self.create(RAY_SERVICE, manifest)
        cluster = await self.create(
            RAY_CLUSTER, build.build_cluster_for_service(service, name=self.cluster_name)
        )
        await self.harness.client.patch_status(
            RAY_CLUSTER, self.cluster_name, {"status": cluster_status()}, namespace=self.namespace
        )
        head_pod = by_kuberay(build_head_pod(cluster, suffix="kuber"))
        head_pod["metadata"]["labels"]["ray.io/serve"] = "true"
        await self.create(POD, head_pod)
        await self.create(SERVICE, by_kuberay(build_head_service(cluster)))
        await self.create(
            SERVICE, by_kuberay(build.build_head_service_for_service(service, cluster))
        )
        await self.create(
            SERVICE, by_kuberay(build.build_serve_service_for_service(service, cluster))
        )
        await self.harness.pods_settled(self.cluster_name, head=1, workers=0)
        self.status = serving_status(
            self.cluster_name, generation=service["metadata"]["generation"]
        )
        await self.harness.client.patch_status(
            RAY_SERVICE, self.name, {"status": self.status}, namespace=self.namespace
        )
        return service


def cluster_status() -> dict[str, Any]:
    """A RayCluster's status as KubeRay writes it once the head is ready."""
    moment = now_text()
    return {
        "state": "ready",
        "desiredWorkerReplicas": 0,
        "readyWorkerReplicas": 0,
        "availableWorkerReplicas": 0,
        "conditions": [
            {
                "type": "HeadPodReady",
                "status": "True",
                "reason": "HeadPodRunningAndReady",
                "message": "",
                "lastTransitionTime": moment,
            },
            {
                "type": "RayClusterProvisioned",
                "status": "True",
                "reason": "AllPodRunningAndReadyFirstTime",
                "message": "All Ray Pods are ready for the first time",
                "lastTransitionTime": moment,
            },
        ],
    }


def serving_status(cluster_name: str, *, generation: int) -> dict[str, Any]:
    """A RayService's status as KubeRay writes it while its active cluster serves."""
    moment = now_text()

    def condition_of(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": moment,
            "observedGeneration": generation,
        }

    return {
        "activeServiceStatus": {
            "rayClusterName": cluster_name,
            "applicationStatuses": {
                "greeter": {
                    "status": "RUNNING",
                    "serveDeploymentStatuses": {"Greeter": {"status": "HEALTHY"}},
                }
            },
        },
        "pendingServiceStatus": {},
        "numServeEndpoints": 1,
        "observedGeneration": generation,
        "serviceStatus": "Running",
        "conditions": [
            condition_of(
                "Ready",
                "True",
                "NonZeroServeEndpoints",
                "Number of serve endpoints is greater than 0",
            ),
            condition_of(
                "UpgradeInProgress",
                "False",
                "NoPendingCluster",
                "Active Ray cluster exists and no pending Ray cluster",
            ),
        ],
    }


async def deploy_as_kuberay_did(dashboard: DashboardClient, service: dict[str, Any]) -> None:
    """KubeRay PUT `serveConfigV2`, parsed, to the cluster; wait until the app runs."""
    await dashboard.deploy_serve_applications(build.serve_config(service))

    async def running() -> bool:
        apps = await dashboard.serve_applications()
        return "greeter" in apps and apps["greeter"].running

    await eventually(running, within=90, what="the greeter app RUNNING on the head")
