"""The Serve config on each cluster of a RayService, PUT through the cluster's Ray dashboard.

`reconcile_serve` PUTs `serveConfigV2` when `status/rayservice.needs_serve_update` says so (never
PUT, a changed hash, or applications lost), and reports whether all applications run. Which
config each cluster has is remembered as a hash per cluster, in memory. With no record for a
cluster (after our restart, or a cluster KubeRay deployed to before we took over), the config
the cluster reports running is compared with ours (`status/deployed_serve_config`): the same →
recorded, not PUT again; different, or not verifiable → PUT.

An incremental upgrade PUTs each cluster's own config again with a new `target_capacity`
(`set_target_capacity`): the whole config last PUT to each cluster is remembered too, so the
active cluster keeps its old applications; after a restart, the spec's config is used, as
KubeRay does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.spec.dashboard_errors import DashboardError
from ray_operator.spec.kinds import ObjectKey
from ray_operator.status import rayservice as rules
from ray_operator.status.conditions import condition_true
from ray_operator.status.deployed_serve_config import serve_config_deployed

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService

    from ray_operator.controllers.dashboards import DashboardAccess
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.spec.dashboard_models import ServeApplicationStatus, ServeDetails
    from ray_operator.spec.rayservice import SpecReading
    from ray_operator.status.dashboard_reachability import Reachability

logger = logging.getLogger(__name__)


class ServeConfigSubmission:
    """Serve configs PUT to RayServices' clusters, and what each cluster was given; one per
    RayService controller."""

    def __init__(self, *, dashboards: DashboardAccess, events: EventRecorder) -> None:
        self._dashboards = dashboards
        self._events = events
        # RayService key -> {cluster name -> hash of the Serve config last PUT there}.
        self._hashes: dict[ObjectKey, dict[str, str]] = {}
        # RayService key -> {cluster name -> the Serve config last PUT there}.
        self._configs: dict[ObjectKey, dict[str, Mapping[str, Any]]] = {}

    def forget(self, key: ObjectKey) -> None:
        """Drop what is remembered of a RayService's clusters (it is deleted)."""
        self._hashes.pop(key, None)
        self._configs.pop(key, None)

    def forget_cluster(self, rayservice: RayService, cluster_name: str) -> None:
        """Drop the recorded hash of a cluster deleted (a new one of the same name starts over)."""
        self._hashes.get(ObjectKey.of(rayservice), {}).pop(cluster_name, None)

    def _remember_config(
        self, rayservice: RayService, cluster_name: str, config: Mapping[str, Any]
    ) -> None:
        self._configs.setdefault(ObjectKey.of(rayservice), {})[cluster_name] = config

    async def reconcile_serve(
        self,
        rayservice: RayService,
        cluster: RayCluster,
        spec: SpecReading,
        *,
        put: bool = True,
    ) -> tuple[bool, Mapping[str, ServeApplicationStatus] | None, Reachability | None]:
        """PUT the Serve config when needed (and `put`: an incremental upgrade holds it back
        from the cluster it moves away from); whether all apps run, their statuses, and what
        asking the dashboard showed of its reachability (None: not asked)."""
        if not condition_true(cluster, "HeadPodReady"):
            return False, None, None
        key = ObjectKey.of(rayservice)
        name = cluster["metadata"]["name"]
        current = spec.serve_config_hash
        try:
            async with self._dashboards.open(cluster) as ray:
                details = await ray.serve_details()
                apps = details.applications
                recorded = self._serve_config_of(rayservice, name, details=details, spec=spec)
                update, reason = rules.needs_serve_update(recorded, current, apps=apps)
                # No serveConfigV2 means nothing to deploy (KubeRay caches nothing either).
                if update and put and rayservice.get("spec", {}).get("serveConfigV2"):
                    logger.info("updating Serve applications on %s: %s", name, reason)
                    await ray.deploy_serve_applications(spec.serve_config)
                    self._hashes.setdefault(key, {})[name] = current
                    self._remember_config(rayservice, name, spec.serve_config)
                    self._events.record(
                        rayservice,
                        reason="UpdatedServeApplications",
                        message=f"Updated serve applications to the RayCluster "
                        f"{key.namespace}/{name}",
                    )
                    apps = await ray.serve_applications()
        except DashboardError as error:
            found = self._dashboards.reachability(cluster, error)
            # Unreachable: the condition and its Event tell it once. An answer refusing the
            # Serve config is worth a line each time.
            level = logging.INFO if found is None else logging.DEBUG
            logger.log(level, "Serve on RayCluster %s: %s", name, error)
            return False, None, found
        return rules.apps_ready(apps), apps, self._dashboards.reachability(cluster, None)

    def _serve_config_of(
        self, rayservice: RayService, cluster_name: str, *, details: ServeDetails, spec: SpecReading
    ) -> str | None:
        """The hash of the Serve config the cluster has: as remembered, or — with no record —
        the spec's when the cluster reports running exactly that config (then remembered)."""
        key = ObjectKey.of(rayservice)
        recorded = self._hashes.get(key, {}).get(cluster_name)
        if recorded is not None or not rayservice.get("spec", {}).get("serveConfigV2"):
            return recorded
        deployed, reason = serve_config_deployed(spec.serve_config, details)
        if not deployed:
            # Asked every poll until the config is PUT: DEBUG, or it floods the log.
            logger.debug(
                "Serve config on RayCluster %s not known to be current: %s", cluster_name, reason
            )
            return None
        logger.info(
            "RayCluster %s runs the current Serve config already: not PUT again", cluster_name
        )
        self._hashes.setdefault(key, {})[cluster_name] = spec.serve_config_hash
        return spec.serve_config_hash

    async def set_target_capacity(
        self, rayservice: RayService, cluster: RayCluster | None, goal: int, spec: SpecReading
    ) -> bool:
        """PUT the cluster's own Serve config with `target_capacity: goal`; whether it took."""
        if cluster is None:
            return False
        name = cluster["metadata"]["name"]
        namespace = cluster["metadata"]["namespace"]
        known = self._configs.get(ObjectKey.of(rayservice), {}).get(name)
        body = {**(known if known is not None else spec.serve_config), "target_capacity": goal}
        try:
            async with self._dashboards.open(cluster) as ray:
                await ray.deploy_serve_applications(body)
        except DashboardError as error:
            self._events.record(
                rayservice,
                reason="FailedToUpdateTargetCapacity",
                message=f"Failed to update target_capacity of serve applications to the "
                f"RayCluster {namespace}/{name}: {error}",
                type="Warning",
            )
            return False
        self._remember_config(rayservice, name, body)
        logger.info("set target_capacity %d on RayCluster %s", goal, name)
        self._events.record(
            rayservice,
            reason="UpdatedServeTargetCapacity",
            message=f"Updated target_capacity of serve applications to {goal} on the RayCluster "
            f"{namespace}/{name}",
        )
        return True
