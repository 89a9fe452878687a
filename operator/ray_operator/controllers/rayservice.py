"""The RayService controller: a Serve deployment on a RayCluster, upgraded without downtime.

`reconcile` reads like KubeRay's: clean up replaced clusters, handle deletion (finalizer
`ray.io/rayservice-finalizer`), validate, find the active and pending clusters (creating the
pending one once its name is in the status), mark head Pods whose Serve proxy is healthy, PUT
the Serve config where needed (pending cluster first; the active one only when no upgrade is
under way), point `<name>-head-svc` and `<name>-serve-svc` at the cluster that is ready (the
pending one as soon as all its apps are RUNNING), then compute the status (`status/rayservice`).

Zero-downtime upgrade: a changed `rayClusterConfig` (its hash differs from the cluster's
annotation) names a pending cluster in the status; the next reconcile creates it; once its
applications run, the Services switch to it, the status promotes it to active, and the old
cluster is deleted after `rayClusterDeletionDelaySeconds` (60 by default). A changed
`serveConfigV2` alone is PUT to the running cluster in place: which config each cluster has is
remembered as a hash per cluster (in memory; after a restart the config is simply PUT again,
which Serve treats as a no-op when nothing changed).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ray_operator import labels as names
from ray_operator.builders import rayservice as build
from ray_operator.builders.naming import random_suffix
from ray_operator.builders.services import NoServePortError
from ray_operator.controllers.dashboards import DashboardAccess
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.dashboard.client import DashboardOptions
from ray_operator.dashboard.errors import DashboardError
from ray_operator.dashboard.models import ServeApplicationStatus
from ray_operator.dashboard.resolver import DashboardResolver
from ray_operator.defaults import DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS, default_rayservice
from ray_operator.runtime.client import PatchType
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    cluster_key_from_label,
    own_key,
    owner_keys,
)
from ray_operator.runtime.errors import AlreadyExists, Conflict, NotFound
from ray_operator.runtime.kinds import POD, RAY_CLUSTER, RAY_SERVICE, SERVICE, Kind, ObjectKey
from ray_operator.status import rayservice as rules
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayservice import validate_rayservice

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

FINALIZER = "ray.io/rayservice-finalizer"
# KubeRay's ServiceDefaultRequeueDuration.
REQUEUE_SECONDS = 2.0


class RayServiceController:
    """Reconciles RayServices; their clusters, Services and the clusters' Pods map back."""

    kind = RAY_SERVICE

    def __init__(
        self,
        context: ControllerContext,
        *,
        dashboards: DashboardAccess | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        suffix: Callable[[], str] = random_suffix,
        limits: ClusterLimits = DEFAULT_LIMITS,
    ) -> None:
        self._limits = limits  # the webhook's bounds (--max-pods-per-cluster), re-checked here
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._dashboards = dashboards or DashboardAccess(context.client)
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._monotonic = monotonic
        self._suffix = suffix
        # RayService key -> {cluster name -> hash of the Serve config last PUT there}.
        self._serve_configs: dict[ObjectKey, dict[str, str]] = {}
        # Replaced cluster uid -> when it may be deleted (monotonic seconds).
        self._deletion_due: dict[str, float] = {}

    def keys_for(self, kind: Kind, obj: Object) -> Iterable[ObjectKey]:
        if kind in (RAY_CLUSTER, SERVICE):
            return owner_keys(obj, owner=RAY_SERVICE)
        if kind == POD:
            return self._service_of_pod(obj)
        return own_key(kind, obj, of=RAY_SERVICE)

    async def reconcile(self, key: ObjectKey) -> Result:
        cached = self._store.get(RAY_SERVICE, key.namespace, key.name)
        if cached is None:
            self._serve_configs.pop(key, None)
            return Result()
        # The webhook's defaults, applied here too, so an install without webhooks behaves the same.
        rayservice = default_rayservice(cached)
        if (rayservice.get("spec") or {}).get("managedBy") not in names.OWN_MANAGED_BY:
            return Result()
        status: JSON = dict(rayservice.get("status") or {})
        waiting_for_deletion = await self.delete_replaced_clusters(rayservice, status)
        if rayservice["metadata"].get("deletionTimestamp"):
            return await self.finalize(rayservice, clusters_left=waiting_for_deletion)
        if await self.ensure_finalizer(rayservice):
            return Result(requeue_after=REQUEUE_SECONDS)
        problem = self.spec_problem(rayservice)
        if problem is not None:
            return await self.report_invalid_spec(rayservice, status, problem)
        active, pending = await self.active_and_pending_clusters(rayservice, status)
        await self.mark_serving_head_pods(rayservice, active, pending)
        goal_hash = build.cluster_config_hash(rayservice)
        active_ready, pending_ready = False, False
        active_apps: Mapping[str, ServeApplicationStatus] | None = None
        pending_apps: Mapping[str, ServeApplicationStatus] | None = None
        if pending is not None:
            pending_ready, pending_apps = await self.reconcile_serve(rayservice, pending)
        elif active is not None and not rules.needs_new_cluster(
            rayservice, goal_hash=goal_hash, active=active, pending=None
        ):
            active_ready, active_apps = await self.reconcile_serve(rayservice, active)
        serving = pending if pending_ready else active if active_ready else None
        services_point_to = self._services_point_to(rayservice)
        if serving is not None:
            services_point_to = await self.point_services_at(rayservice, serving)
        pending_serving = pending is not None and services_point_to == pending["metadata"]["name"]
        new_pending_name = None
        if rules.needs_new_cluster(
            rayservice,
            goal_hash=goal_hash,
            active=active,
            pending=pending,
            pending_serving=pending_serving,
        ):
            new_pending_name = f"{key.name}-{self._suffix()}"
            logger.info("preparing a new RayCluster %s", new_pending_name)
        observed = rules.Observed(
            generation=int(rayservice["metadata"].get("generation") or 0),
            active=active,
            pending=pending,
            active_apps=active_apps,
            pending_apps=pending_apps,
            services_point_to=services_point_to,
            serve_endpoints=rules.count_serve_endpoints(
                self._store.list(POD, namespace=key.namespace), cluster=services_point_to
            ),
            new_pending_name=new_pending_name,
        )
        new = rules.compute_status(status, observed, now=self._now())
        await self.write_status(rayservice, status, new)
        return Result(requeue_after=REQUEUE_SECONDS)

    # --- clusters ------------------------------------------------------------------------------

    async def active_and_pending_clusters(
        self,
        rayservice: Object,
        status: Object,
    ) -> tuple[Object | None, Object | None]:
        """The clusters named in the status; the pending one is created when missing (and
        returned as created, so this reconcile does not take it for absent and name another)."""
        active = self._owned_cluster(rayservice, _cluster_name(status, "activeServiceStatus"))
        pending_name = _cluster_name(status, "pendingServiceStatus")
        pending = self._owned_cluster(rayservice, pending_name)
        if pending_name and pending is None:
            pending = await self.create_cluster(rayservice, pending_name)
        return active, pending

    async def create_cluster(self, rayservice: Object, name: str) -> Object:
        namespace = rayservice["metadata"]["namespace"]
        cluster = build.build_cluster_for_service(rayservice, name=name)
        try:
            created: Object = await self._client.create(RAY_CLUSTER, cluster, namespace=namespace)
        except AlreadyExists:
            return cluster  # Ours, created by an earlier reconcile and not cached yet.
        logger.info("created RayCluster %s", name)
        await self._events.record(
            rayservice,
            reason="CreatedRayCluster",
            message=f"Created the RayCluster {namespace}/{name}",
        )
        return created

    async def delete_replaced_clusters(self, rayservice: Object, status: Object) -> bool:
        """Delete owned clusters that are neither active nor pending, after the deletion delay
        (at once when the RayService is being deleted). True while some remain."""
        keep = set()
        deleting = bool(rayservice["metadata"].get("deletionTimestamp"))
        if not deleting:
            keep = {
                _cluster_name(status, "activeServiceStatus"),
                _cluster_name(status, "pendingServiceStatus"),
            }
        spec = rayservice.get("spec") or {}
        delay = float(
            spec.get("rayClusterDeletionDelaySeconds", DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS)
        )
        remaining = False
        for cluster in self._store.list_owned_by(RAY_CLUSTER, rayservice["metadata"]["uid"]):
            metadata = cluster["metadata"]
            if metadata["name"] in keep or metadata.get("deletionTimestamp"):
                remaining = remaining or metadata["name"] not in keep
                continue
            remaining = True
            due = self._deletion_due.setdefault(
                metadata["uid"], self._monotonic() + (0 if deleting else delay)
            )
            if self._monotonic() < due:
                continue
            await self._delete(RAY_CLUSTER, cluster)
            self._deletion_due.pop(metadata["uid"], None)
            self._forget_serve_config(rayservice, metadata["name"])
            logger.info("deleted replaced RayCluster %s", metadata["name"])
            await self._events.record(
                rayservice,
                reason="DeletedRayCluster",
                message=f"Deleted the RayCluster {metadata['name']}",
            )
        return remaining

    # --- Serve ---------------------------------------------------------------------------------

    async def reconcile_serve(
        self,
        rayservice: Object,
        cluster: Object,
    ) -> tuple[bool, Mapping[str, ServeApplicationStatus] | None]:
        """PUT the Serve config when needed; whether all apps run, and their statuses."""
        if not _head_pod_ready(cluster):
            return False, None
        key = ObjectKey.of(rayservice)
        name = cluster["metadata"]["name"]
        current = build.serve_config_hash(rayservice)
        try:
            async with self._dashboards.open(cluster) as ray:
                apps = await ray.serve_applications()
                update, reason = rules.needs_serve_update(
                    self._serve_configs.get(key, {}).get(name), current, apps=apps
                )
                # No serveConfigV2 means nothing to deploy (KubeRay caches nothing either).
                if update and (rayservice.get("spec") or {}).get("serveConfigV2"):
                    logger.info("updating Serve applications on %s: %s", name, reason)
                    await ray.deploy_serve_applications(build.serve_config(rayservice))
                    self._serve_configs.setdefault(key, {})[name] = current
                    await self._events.record(
                        rayservice,
                        reason="UpdatedServeApplications",
                        message=f"Updated serve applications to the RayCluster "
                        f"{key.namespace}/{name}",
                    )
                    apps = await ray.serve_applications()
        except DashboardError as error:
            logger.info("Serve on RayCluster %s: %s", name, error)
            return False, None
        return rules.apps_ready(apps), apps

    async def mark_serving_head_pods(self, rayservice: Object, *clusters: Object | None) -> None:
        """Label each head Pod `ray.io/serve` true/false by its Serve proxy's health, so the serve
        Service includes it only when it can answer (KubeRay's `updateHeadPodServeLabel`)."""
        exclude = bool((rayservice.get("spec") or {}).get("excludeHeadPodFromServeSvc"))
        for cluster in clusters:
            if cluster is None:
                continue
            head = _head_pod(
                self._store.list_for_cluster(
                    POD, cluster["metadata"]["namespace"], cluster["metadata"]["name"]
                )
            )
            if head is None or not _pod_ready(head):
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

    # --- Services ------------------------------------------------------------------------------

    async def point_services_at(self, rayservice: Object, cluster: Object) -> str | None:
        """Create `<name>-head-svc` and `<name>-serve-svc`, or switch their selectors to
        `cluster`; the cluster both select afterwards."""
        try:
            wanted = [
                build.build_head_service_for_service(rayservice, cluster),
                build.build_serve_service_for_service(rayservice, cluster),
            ]
        except NoServePortError as error:
            await self._events.record(
                rayservice, reason="InvalidServeService", message=str(error), type="Warning"
            )
            return self._services_point_to(rayservice)
        for service in wanted:
            await self._ensure_service(rayservice, service)
        return str(cluster["metadata"]["name"])

    async def _ensure_service(self, rayservice: Object, service: JSON) -> None:
        namespace, name = rayservice["metadata"]["namespace"], service["metadata"]["name"]
        existing = self._store.get(SERVICE, namespace, name)
        if existing is None:
            try:
                await self._client.create(SERVICE, service, namespace=namespace)
            except AlreadyExists:
                return
            await self._events.record(
                rayservice,
                reason="CreatedService",
                message=f"Created the service {namespace}/{name}",
            )
            return
        target = service["spec"]["selector"][names.CLUSTER_LABEL]
        if rules.serving_cluster_of(existing) == target:
            return
        # Only the selector moves: a Service's clusterIP is immutable, its ports stay valid.
        await self._client.patch(
            SERVICE,
            name,
            {"spec": {"selector": service["spec"]["selector"]}},
            namespace=namespace,
            patch_type=PatchType.STRATEGIC,
        )
        logger.info("switched Service %s to RayCluster %s", name, target)
        await self._events.record(
            rayservice,
            reason="UpdatedService",
            message=f"Updated the service {namespace}/{name} to RayCluster {target}",
        )

    def _services_point_to(self, rayservice: Object) -> str | None:
        namespace, name = rayservice["metadata"]["namespace"], rayservice["metadata"]["name"]
        head = self._store.get(SERVICE, namespace, f"{name}-{names.HEAD_SERVICE_SUFFIX}")
        serve = self._store.get(SERVICE, namespace, f"{name}-{names.SERVE_SERVICE_SUFFIX}")
        pointed = rules.serving_cluster_of(head)
        return pointed if pointed == rules.serving_cluster_of(serve) else None

    # --- lifecycle -----------------------------------------------------------------------------

    async def ensure_finalizer(self, rayservice: Object) -> bool:
        """Add our finalizer; True when it had to be added (look again once it is cached)."""
        return await add_finalizer(self._client, RAY_SERVICE, rayservice, FINALIZER)

    async def finalize(self, rayservice: Object, *, clusters_left: bool) -> Result:
        """Being deleted: once its clusters are gone, delete its Services and drop the finalizer."""
        if not has_finalizer(rayservice, FINALIZER):
            return Result()
        if clusters_left:
            return Result(requeue_after=1.0)
        for service in self._store.list_owned_by(SERVICE, rayservice["metadata"]["uid"]):
            await self._delete(SERVICE, service)
        await remove_finalizer(self._client, RAY_SERVICE, rayservice, FINALIZER)
        self._serve_configs.pop(ObjectKey.of(rayservice), None)
        return Result()

    def spec_problem(self, rayservice: Object) -> str | None:
        """What makes the spec unusable (the webhook's rules, again: an object may predate the
        webhook or bypass it), or what this operator does not implement yet; None when fine."""
        problems = [str(error) for error in validate_rayservice(rayservice, limits=self._limits)]
        try:
            build.serve_config(rayservice)
        except build.InvalidServeConfigError as error:
            problems.append(str(error))
        strategy = ((rayservice.get("spec") or {}).get("upgradeStrategy") or {}).get("type")
        if strategy == "NewClusterWithIncrementalUpgrade":
            problems.append(
                'spec.upgradeStrategy.type: Unsupported value: "NewClusterWithIncrementalUpgrade": '
                'not implemented by this operator yet; use "NewCluster" or "None"'
            )
        return "; ".join(problems) or None

    async def report_invalid_spec(self, rayservice: Object, status: JSON, message: str) -> Result:
        await self._events.record(
            rayservice, reason="InvalidRayServiceSpec", message=message, type="Warning"
        )
        new = rules.invalid_status(
            status,
            message,
            now=self._now(),
            generation=int(rayservice["metadata"].get("generation") or 0),
        )
        await self.write_status(rayservice, status, new)
        return Result()

    async def write_status(self, rayservice: Object, old: JSON, new: JSON) -> None:
        if not rules.status_changed(old, new):
            return
        new["lastUpdateTime"] = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {**{key: None for key in old if key not in new}, **new}
        for entry in ("activeServiceStatus", "pendingServiceStatus"):
            # A merge patch merges nested objects: name what vanished inside them too.
            old_entry, new_entry = old.get(entry) or {}, new.get(entry) or {}
            patch[entry] = {**{k: None for k in old_entry if k not in new_entry}, **new_entry}
        try:
            await self._client.patch_status(
                RAY_SERVICE,
                rayservice["metadata"]["name"],
                {
                    # The resourceVersion we decided on: a write based on a stale cache (say,
                    # one that would choose a second submission id or pending cluster name)
                    # fails with Conflict and is retried from fresh data.
                    "metadata": {"resourceVersion": rayservice["metadata"]["resourceVersion"]},
                    "status": patch,
                },
                namespace=rayservice["metadata"]["namespace"],
            )
        except NotFound:
            return

    # --- helpers -------------------------------------------------------------------------------

    def _owned_cluster(self, rayservice: Object, name: str) -> Object | None:
        if not name:
            return None
        cluster = self._store.get(RAY_CLUSTER, rayservice["metadata"]["namespace"], name)
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            return None
        uid = rayservice["metadata"]["uid"]
        refs = cluster["metadata"].get("ownerReferences") or ()
        return cluster if any(ref.get("uid") == uid for ref in refs) else None

    def _service_of_pod(self, pod: Object) -> list[ObjectKey]:
        # A head Pod's readiness decides the serve label and the endpoint count.
        for cluster_key in cluster_key_from_label(pod):
            cluster = self._store.get(RAY_CLUSTER, cluster_key.namespace, cluster_key.name)
            if cluster is not None:
                return owner_keys(cluster, owner=RAY_SERVICE)
        return []

    def _forget_serve_config(self, rayservice: Object, cluster_name: str) -> None:
        self._serve_configs.get(ObjectKey.of(rayservice), {}).pop(cluster_name, None)

    async def _delete(self, kind: Kind, obj: Object) -> None:
        metadata = obj["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await self._client.delete(
                kind, metadata["name"], namespace=metadata["namespace"], uid=metadata.get("uid")
            )


def _cluster_name(status: Object, entry: str) -> str:
    return str((status.get(entry) or {}).get("rayClusterName") or "")


def _head_pod(pods: Sequence[Object]) -> Object | None:
    heads = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        and not p["metadata"].get("deletionTimestamp")
    ]
    return heads[0] if len(heads) == 1 else None


def _pod_ready(pod: Object) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _head_pod_ready(cluster: Object) -> bool:
    return any(
        c.get("type") == "HeadPodReady" and c.get("status") == "True"
        for c in (cluster.get("status") or {}).get("conditions") or ()
    )


def rayservice_controller(
    *,
    resolver: DashboardResolver | None = None,
    options: DashboardOptions | None = None,
    limits: ClusterLimits = DEFAULT_LIMITS,
) -> ControllerFactory:
    """The factory `app.run(..., controllers=[...])` takes, with how to reach dashboards."""

    def factory(context: ControllerContext) -> RayServiceController:
        access = DashboardAccess(context.client, resolver=resolver, options=options)
        return RayServiceController(context, dashboards=access, limits=limits)

    return factory
