"""What the local Ray agent shares with the operator's controllers and dashboard resolver.

`LocalRayRegistry` holds the local clusters by `(namespace, cluster name)` (written by the agent
once a head starts, read by `LocalRayResolver` when a controller asks for a dashboard or Serve
URL) and `created`, the Pods and Jobs the operator created (written by the controllers' client,
wrapped by `recording_creations`, read by the agent before it runs anything).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ray_operator.dashboard.resolver import DashboardResolver
from ray_operator.localray.plan import SERVE_PROXY_PORT
from ray_operator.localray.scope import CreatedObjects

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

    from ray_operator.runtime.controller import Controller, ControllerContext, ControllerFactory


@dataclass(frozen=True, slots=True)
class LocalCluster:
    """Where a local cluster's head listens."""

    address: str
    gcs_port: int
    dashboard_port: int
    head_uid: str

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.address}:{self.dashboard_port}"

    @property
    def serve_url(self) -> str:
        return f"http://{self.address}:{SERVE_PROXY_PORT}"


class LocalRayRegistry:
    """What the agent and the controllers share: local clusters by `(namespace, cluster name)`
    (written by the agent, read by the dashboard resolver) and `created`, the Pods and Jobs the
    operator created (written by the controllers' client, read by the agent)."""

    def __init__(self, created: CreatedObjects | None = None) -> None:
        self._clusters: dict[tuple[str, str], LocalCluster] = {}
        self.created = created if created is not None else CreatedObjects()

    def get(self, namespace: str, name: str) -> LocalCluster | None:
        return self._clusters.get((namespace, name))

    def put(self, namespace: str, name: str, cluster: LocalCluster) -> None:
        self._clusters[(namespace, name)] = cluster

    def remove(self, namespace: str, name: str, *, head_uid: str) -> None:
        if (found := self._clusters.get((namespace, name))) and found.head_uid == head_uid:
            del self._clusters[(namespace, name)]


class LocalRayResolver:
    """The dashboard and Serve proxy of a local cluster, else whatever `fallback` says."""

    def __init__(self, registry: LocalRayRegistry, *, fallback: DashboardResolver) -> None:
        self._registry = registry
        self._fallback = fallback

    def dashboard_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        found = self._find(cluster)
        return found.dashboard_url if found else self._fallback.dashboard_url(cluster, head_pod)

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        found = self._find(cluster)
        return found.serve_url if found else self._fallback.serve_proxy_url(cluster, head_pod)

    def _find(self, cluster: RayCluster) -> LocalCluster | None:
        metadata = cluster.get("metadata") or {}
        return self._registry.get(metadata.get("namespace", ""), metadata.get("name", ""))


def recording_creations(
    factory: ControllerFactory, *, registry: LocalRayRegistry
) -> ControllerFactory:
    """`factory` whose controller's client tells `registry.created` of each object it creates."""

    def build(context: ControllerContext) -> Controller:
        client = context.client.with_create_observer(registry.created.record)
        return factory(dataclasses.replace(context, client=client))

    return build
