"""The Services of a RayService: `<name>-head-svc` and `<name>-serve-svc` pointed at the
cluster that serves, and the `ray.io/serve` label on head Pods that decides which Pods the serve
Service selects.

A Service is created when missing; otherwise only its selector moves (a Service's clusterIP is
immutable, its ports stay valid), told by an `UpdatedService` event. Which cluster the Services
point to is read back from their selectors in the cache: the status takes a cluster as serving
only once both select it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ray_operator.builders import rayservice as build
from ray_operator.builders.services import NoServePortError
from ray_operator.planning.drift import selector_patch
from ray_operator.runtime.errors import AlreadyExists, NotFound
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import POD, SERVICE
from ray_operator.status import rayservice as rules
from ray_operator.status.conditions import condition_true

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster, RayService

    from ray_operator.controllers.dashboards import DashboardAccess
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

JSON = dict[str, Any]


class RayServiceServices:
    """The head and serve Services of RayServices and their head Pods' serve label; one per
    RayService controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        store: StoreView,
        events: EventRecorder,
        dashboards: DashboardAccess,
    ) -> None:
        self._client = client
        self._store = store
        self._events = events
        self._dashboards = dashboards

    async def point_services_at(self, rayservice: RayService, cluster: RayCluster) -> str | None:
        """Create `<name>-head-svc` and `<name>-serve-svc`, or switch their selectors to
        `cluster`; the cluster both select afterwards."""
        try:
            wanted = [
                build.build_head_service_for_service(rayservice, cluster),
                build.build_serve_service_for_service(rayservice, cluster),
            ]
        except NoServePortError as error:
            self._events.record(
                rayservice, reason="InvalidServeService", message=str(error), type="Warning"
            )
            return self.services_point_to(rayservice)
        for service in wanted:
            await self.ensure_service(rayservice, service)
        return str(cluster["metadata"]["name"])

    async def ensure_service(self, rayservice: RayService, service: JSON) -> None:
        """The Service created when missing; otherwise only its selector moved to this one's."""
        namespace, name = rayservice["metadata"]["namespace"], service["metadata"]["name"]
        existing = self._store.get(SERVICE, namespace, name)
        if existing is None:
            try:
                await self._client.create(SERVICE, service, namespace=namespace)
            except AlreadyExists:
                return
            self._events.record(
                rayservice,
                reason="CreatedService",
                message=f"Created the service {namespace}/{name}",
            )
            return
        target = service["spec"]["selector"][names.CLUSTER_LABEL]
        # Only the selector moves: a Service's clusterIP is immutable, its ports stay valid.
        patch = selector_patch(service, existing)
        if patch is None:
            return
        await self._client.patch(SERVICE, name, patch, namespace=namespace)
        logger.info("switched Service %s to RayCluster %s", name, target)
        self._events.record(
            rayservice,
            reason="UpdatedService",
            message=f"Updated the service {namespace}/{name} to RayCluster {target}",
        )

    def services_point_to(self, rayservice: RayService) -> str | None:
        """The cluster both Services select (None when they differ or are missing)."""
        namespace, name = rayservice["metadata"]["namespace"], rayservice["metadata"]["name"]
        head = self._store.get(SERVICE, namespace, f"{name}-{names.HEAD_SERVICE_SUFFIX}")
        serve = self._store.get(SERVICE, namespace, f"{name}-{names.SERVE_SERVICE_SUFFIX}")
        pointed = rules.serving_cluster_of(head)
        return pointed if pointed == rules.serving_cluster_of(serve) else None

    def head_points_to(self, rayservice: RayService) -> str | None:
        """The cluster `<name>-head-svc` selects (None when it is missing)."""
        namespace, name = rayservice["metadata"]["namespace"], rayservice["metadata"]["name"]
        head = self._store.get(SERVICE, namespace, f"{name}-{names.HEAD_SERVICE_SUFFIX}")
        return rules.serving_cluster_of(head)

    async def mark_serving_head_pods(
        self, rayservice: RayService, *clusters: RayCluster | None
    ) -> None:
        """Label each head Pod `ray.io/serve` true/false by its Serve proxy's health, so the serve
        Service includes it only when it can answer (KubeRay's `updateHeadPodServeLabel`)."""
        exclude = bool(rayservice.get("spec", {}).get("excludeHeadPodFromServeSvc"))
        for cluster in clusters:
            if cluster is None:
                continue
            head = _head_pod(
                self._store.list_for_cluster(
                    POD, cluster["metadata"]["namespace"], cluster["metadata"]["name"]
                )
            )
            if head is None or not condition_true(head, "Ready"):
                continue
            healthy: bool | None = False
            if not exclude:
                healthy = await self._dashboards.serve_proxy_healthy(cluster, head)
            if healthy is None:
                continue
            label = "true" if healthy else "false"
            if (head["metadata"].get("labels") or {}).get(names.SERVE_LABEL) == label:
                continue
            try:
                await self._client.patch(
                    POD,
                    head["metadata"]["name"],
                    {"metadata": {"labels": {names.SERVE_LABEL: label}}},
                    namespace=head["metadata"]["namespace"],
                )
            except NotFound:
                continue


def _head_pod(pods: Sequence[Pod]) -> Pod | None:
    heads = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        and not p["metadata"].get("deletionTimestamp")
    ]
    return heads[0] if len(heads) == 1 else None
