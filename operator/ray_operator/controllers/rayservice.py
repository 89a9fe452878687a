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
cluster is deleted after `rayClusterDeletionDelaySeconds` (60 by default). As in KubeRay, two
changes rewrite a cluster in place instead (`update_clusters_in_place`, event `UpdatedRayCluster`):
worker groups only appended to the config (`ray.io/num-worker-groups` counts the old ones), and
an active cluster stamped by another KubeRay version (`ray.io/kuberay-version`), whose hash may
come from that version's algorithm: its annotations are re-stamped, nothing is recreated. A changed
`serveConfigV2` alone is PUT to the running cluster in place: which config each cluster has is
remembered as a hash per cluster, in memory. With no record for a cluster (after our restart, or
a cluster KubeRay deployed to before we took over), the config the cluster reports running is
compared with ours (`status/deployed_serve_config`): the same → recorded, not PUT again;
different, or not verifiable → PUT.

`spec.suspend: true` (after validation, as in KubeRay): `Suspending` is stored first, then the
RayService's RayClusters and Services are deleted (events `DeletedRayCluster`/`DeletedService`),
then `Suspended`; a stored `Suspending` always completes. `suspend: false` resumes from scratch
(Ready `Initializing` again). With `ray.io/initializing-timeout`, a RayService that never served
within it is marked Ready=False/`InitializingTimeout` (Warning `RayServiceInitializingTimeout`),
its clusters are deleted as replaced ones, and nothing else is reconciled until it is recreated
or suspended and resumed (`ensure_suspension`, `report_initializing_timeout`).

The spec is read (validated, `serveConfigV2` parsed and hashed) once per change of it, not once
per reconcile: PyYAML needs seconds for a config of a megabyte (`read_spec`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ray_operator.builders import rayservice as build
from ray_operator.builders.services import NoServePortError
from ray_operator.controllers import incremental_upgrade as incremental
from ray_operator.controllers import status_writer
from ray_operator.controllers.dashboards import DashboardAccess
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.dashboard.client import DashboardOptions
from ray_operator.dashboard.resolver import DashboardResolver
from ray_operator.defaults import DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS, default_rayservice
from ray_operator.planning.drift import selector_patch
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    cluster_key_from_label,
    own_key,
    owner_keys,
)
from ray_operator.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.dashboard_errors import DashboardError
from ray_operator.spec.dashboard_models import ServeApplicationStatus, ServeDetails
from ray_operator.spec.kinds import POD, RAY_CLUSTER, RAY_SERVICE, SERVICE, Kind, ObjectKey
from ray_operator.spec.object_names import random_suffix
from ray_operator.spec.rayservice import SpecReading
from ray_operator.status import rayservice as rules
from ray_operator.status import waiting
from ray_operator.status.dashboard_reachability import Reachability
from ray_operator.status.deployed_serve_config import serve_config_deployed
from ray_operator.validation.errors import FieldError, summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayservice import validate_rayservice

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster, RayService


logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

FINALIZER = "ray.io/rayservice-finalizer"
# KubeRay's ServiceDefaultRequeueDuration.
REQUEUE_SECONDS = 2.0
SERVICE_STATUS_ENTRIES = ("activeServiceStatus", "pendingServiceStatus")
"""Objects inside the status that a merge patch would merge: what vanished inside them is named
too."""


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
        self._dashboards = dashboards or DashboardAccess(context.client, store=context.store)
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._monotonic = monotonic
        self._suffix = suffix
        # RayService key -> {cluster name -> hash of the Serve config last PUT there}.
        self._serve_configs: dict[ObjectKey, dict[str, str]] = {}
        # Replaced cluster uid -> when it may be deleted (monotonic seconds).
        self._deletion_due: dict[str, float] = {}
        # RayService key -> its spec, read (one entry per RayService, replaced on any change).
        self._spec_readings: dict[ObjectKey, SpecReading] = {}
        self._incremental = incremental.IncrementalUpgrade(
            self, context, dashboards=self._dashboards, now=self._now, suffix=suffix
        )

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
            self._spec_readings.pop(key, None)
            self._incremental.forget(key)
            self._dashboards.forget_owner(key.namespace, key.name)
            return Result()
        # The webhook's defaults, applied here too, so an install without webhooks behaves the same.
        rayservice = cast("RayService", default_rayservice(cached))
        if rayservice.get("spec", {}).get("managedBy") not in names.OWN_MANAGED_BY:
            return Result()
        status: JSON = dict(rayservice.get("status") or {})
        waiting_for_deletion = await self.delete_replaced_clusters(rayservice, status)
        if rayservice["metadata"].get("deletionTimestamp"):
            return await self.finalize(rayservice, clusters_left=waiting_for_deletion)
        if await self.ensure_finalizer(rayservice):
            return Result(requeue_after=REQUEUE_SECONDS)
        spec = self.read_spec(rayservice)
        if spec.problem is not None:
            return await self.report_invalid_spec(rayservice, status, spec.problem)
        stored = status  # what the API server has: the base of the status write
        status, suspend_result = await self.ensure_suspension(rayservice, status)
        if suspend_result is not None:
            await self.write_status(rayservice, stored, status)
            return suspend_result
        if rules.initializing_timed_out(status):
            # Terminal, as in KubeRay: only the clusters' cleanup (above) goes on.
            return Result(requeue_after=REQUEUE_SECONDS if waiting_for_deletion else None)
        active, pending = await self.active_and_pending_clusters(rayservice, status)
        active, pending = await self.update_clusters_in_place(
            rayservice, status, active, pending, goal_hash=spec.cluster_config_hash
        )
        await self.mark_serving_head_pods(rayservice, active, pending)
        if incremental.applies(rayservice):
            return await self._incremental.reconcile(
                rayservice, stored, status, active, pending, spec
            )
        goal_hash = spec.cluster_config_hash
        active_ready, pending_ready = False, False
        active_apps: Mapping[str, ServeApplicationStatus] | None = None
        pending_apps: Mapping[str, ServeApplicationStatus] | None = None
        checked: RayCluster | None = None  # the cluster whose dashboard this reconcile asked
        reachability: Reachability | None = None
        if pending is not None:
            checked = pending
            pending_ready, pending_apps, reachability = await self.reconcile_serve(
                rayservice, pending, spec
            )
        elif active is not None and not rules.needs_new_cluster(
            rayservice, goal_hash=goal_hash, active=active, pending=None
        ):
            checked = active
            active_ready, active_apps, reachability = await self.reconcile_serve(
                rayservice, active, spec
            )
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
            initializing_timeout=rules.initializing_timeout(rayservice),
        )
        new = rules.compute_status(status, observed, now=self._now())
        new = waiting.with_clusters_waiting(
            new, [active, pending], now=self._now(), generation=observed.generation
        )
        new = await self._dashboards.report_reachability(
            rayservice, new, reachability, events=self._events, now=self._now()
        )
        await self.report_initializing_timeout(rayservice, status, new)
        await self.write_status(rayservice, stored, new)
        # While the dashboard cannot be reached, look again only when it may be asked again.
        cooldown = 0.0 if checked is None else self._dashboards.cooldown_remaining(checked)
        return Result(requeue_after=max(REQUEUE_SECONDS, cooldown))

    # --- suspend and the initializing timeout --------------------------------------------------

    async def ensure_suspension(
        self, rayservice: RayService, status: JSON
    ) -> tuple[JSON, Result | None]:
        """Follow `spec.suspend` (KubeRay's `handleSuspend`): the status afterwards, and a Result
        when the suspension owns this reconcile (the rest would recreate what it deletes). A
        resume returns the resumed status and no Result: the reconcile goes on in the same pass."""
        suspend = bool(rayservice.get("spec", {}).get("suspend"))
        generation = int(rayservice["metadata"].get("generation") or 0)
        phase = rules.suspend_phase(status, suspend=suspend)
        if phase is rules.SuspendPhase.NOT_SUSPENDED:
            return status, None
        if phase is rules.SuspendPhase.SUSPENDED:
            return status, Result()
        if phase is rules.SuspendPhase.RESUME:
            logger.info("%s: suspend is false, resuming", ObjectKey.of(rayservice))
            return rules.resumed_status(status, generation=generation, now=self._now()), None
        if phase is rules.SuspendPhase.STAGE:
            # Stored before anything is deleted: a suspension once begun always completes.
            logger.info("%s: suspend is true, suspending", ObjectKey.of(rayservice))
            new = rules.suspending_status(status, generation=generation, now=self._now())
            return new, Result(requeue_after=REQUEUE_SECONDS)
        all_deleted = await self.delete_owned_objects(rayservice)
        new = rules.suspension_progress_status(status, all_deleted=all_deleted, now=self._now())
        # Requeued even once Suspended: `suspend` may have been turned off meanwhile.
        return new, Result(requeue_after=REQUEUE_SECONDS)

    async def delete_owned_objects(self, rayservice: RayService) -> bool:
        """Delete the RayService's RayClusters and Services for a suspension; True when none
        was left to delete (those already being deleted count as left)."""
        uid = rayservice["metadata"]["uid"]
        clusters = self._store.list_owned_by(RAY_CLUSTER, uid)
        services = self._store.list_owned_by(SERVICE, uid)
        for kind, obj in [*((RAY_CLUSTER, c) for c in clusters), *((SERVICE, s) for s in services)]:
            metadata = obj["metadata"]
            if metadata.get("deletionTimestamp"):
                continue
            await self._delete_for_suspend(rayservice, kind, obj)
            if kind == RAY_CLUSTER:
                self._deletion_due.pop(metadata.get("uid", ""), None)
                self._forget_serve_config(rayservice, metadata["name"])
        routing_deleted = await self._incremental.delete_routing(rayservice)
        return not clusters and not services and routing_deleted

    async def _delete_for_suspend(self, rayservice: RayService, kind: Kind, obj: Object) -> None:
        what = "RayCluster" if kind == RAY_CLUSTER else "Service"
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            await self._client.delete_seen(kind, obj)
        except KubeError as error:
            await self._events.record(
                rayservice,
                reason=f"FailedToDelete{what}",
                message=f"Failed to delete the {what} {namespace}/{name} during suspend: {error}",
                type="Warning",
            )
            raise
        logger.info("deleted %s %s for suspend", what, name)
        await self._events.record(
            rayservice,
            reason=f"Deleted{what}",
            message=f"Deleted the {what} {namespace}/{name} during suspend",
        )

    async def report_initializing_timeout(
        self, rayservice: RayService, old: Object, new: Object
    ) -> None:
        """The Warning KubeRay records when the status has just timed out initializing."""
        if rules.initializing_timed_out(old) or not rules.initializing_timed_out(new):
            return
        timeout = rules.initializing_timeout(rayservice) or 0.0
        spent = rules.initializing_for(list(old.get("conditions") or []), now=self._now())
        logger.info("%s: initializing timeout exceeded", ObjectKey.of(rayservice))
        await self._events.record(
            rayservice,
            reason="RayServiceInitializingTimeout",
            message=f"RayService initializing timeout exceeded after "
            f"{rules.go_duration(spent or timeout)} "
            f"(configured timeout: {rules.go_duration(timeout)})",
            type="Warning",
        )

    # --- clusters ------------------------------------------------------------------------------

    async def active_and_pending_clusters(
        self,
        rayservice: RayService,
        status: Object,
    ) -> tuple[RayCluster | None, RayCluster | None]:
        """The clusters named in the status; the pending one is created when missing (and
        returned as created, so this reconcile does not take it for absent and name another)."""
        active = self._owned_cluster(rayservice, _cluster_name(status, "activeServiceStatus"))
        pending_name = _cluster_name(status, "pendingServiceStatus")
        pending = self._owned_cluster(rayservice, pending_name)
        if pending_name and pending is None:
            pending = await self.create_cluster(rayservice, pending_name)
        return active, pending

    async def update_clusters_in_place(
        self,
        rayservice: RayService,
        status: Object,
        active: RayCluster | None,
        pending: RayCluster | None,
        *,
        goal_hash: str,
    ) -> tuple[RayCluster | None, RayCluster | None]:
        """Rewrite the active or pending cluster from `rayClusterConfig` where KubeRay would
        rather than replace it (`rules.should_update_cluster`: stamped by another KubeRay version,
        or worker groups only appended); the clusters as they are afterwards, so the decisions
        that follow compare the re-stamped hash."""
        upgrading = rules.upgrade_in_progress(status)
        if rules.should_update_cluster(
            rayservice, active, active=True, upgrade_in_progress=upgrading, goal_hash=goal_hash
        ):
            assert active is not None
            active = await self.update_cluster(rayservice, active, role="active")
        if rules.should_update_cluster(
            rayservice, pending, active=False, upgrade_in_progress=upgrading, goal_hash=goal_hash
        ):
            assert pending is not None
            pending = await self.update_cluster(rayservice, pending, role="pending")
        return active, pending

    async def update_cluster(
        self, rayservice: RayService, cluster: RayCluster, *, role: str
    ) -> RayCluster:
        """One update (PUT, compare-and-swap on the cached resourceVersion) of the cluster. A
        failure raises: deciding on with the old annotations would prepare a new cluster."""
        namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
        try:
            updated = await self._client.replace(
                RAY_CLUSTER, rules.cluster_updated_in_place(rayservice, cluster)
            )
        except Conflict:
            raise  # a stale cache: retried from fresh data, no Event for a routine race
        except KubeError as error:
            await self._events.record(
                rayservice,
                reason="FailedToUpdateRayCluster",
                message=f"Failed to update the {role} RayCluster {namespace}/{name}: {error}",
                type="Warning",
            )
            raise
        logger.info("updated the %s RayCluster %s in place", role, name)
        await self._events.record(
            rayservice,
            reason="UpdatedRayCluster",
            message=f"Updated the {role} RayCluster {namespace}/{name}",
        )
        return updated

    async def create_cluster(self, rayservice: RayService, name: str) -> RayCluster:
        namespace = rayservice["metadata"]["namespace"]
        cluster = build.build_cluster_for_service(rayservice, name=name)
        cluster = incremental.strip_worker_replicas(rayservice, cluster)
        try:
            created = await self._client.create(RAY_CLUSTER, cluster, namespace=namespace)
        except AlreadyExists:
            # Ours, created by an earlier reconcile and not cached yet.
            return cast("RayCluster", cluster)
        logger.info("created RayCluster %s", name)
        await self._events.record(
            rayservice,
            reason="CreatedRayCluster",
            message=f"Created the RayCluster {namespace}/{name}",
        )
        return created

    async def delete_replaced_clusters(self, rayservice: RayService, status: Object) -> bool:
        """Delete owned clusters that are neither active nor pending, after the deletion delay
        (at once when the RayService is being deleted). True while some remain."""
        keep = set()
        deleting = bool(rayservice["metadata"].get("deletionTimestamp"))
        if not deleting:
            keep = {
                _cluster_name(status, "activeServiceStatus"),
                _cluster_name(status, "pendingServiceStatus"),
            }
        spec = rayservice.get("spec", {})
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
            await self._client.delete_seen(RAY_CLUSTER, cluster)
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
        rayservice: RayService,
        cluster: RayCluster,
        spec: SpecReading,
        *,
        put: bool = True,
    ) -> tuple[bool, Mapping[str, ServeApplicationStatus] | None, Reachability | None]:
        """PUT the Serve config when needed (and `put`: an incremental upgrade holds it back
        from the cluster it moves away from); whether all apps run, their statuses, and what
        asking the dashboard showed of its reachability (None: not asked)."""
        if not _head_pod_ready(cluster):
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
                    self._serve_configs.setdefault(key, {})[name] = current
                    self._incremental.remember_config(rayservice, name, spec.serve_config)
                    await self._events.record(
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
        recorded = self._serve_configs.get(key, {}).get(cluster_name)
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
        self._serve_configs.setdefault(key, {})[cluster_name] = spec.serve_config_hash
        return spec.serve_config_hash

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

    async def point_services_at(self, rayservice: RayService, cluster: RayCluster) -> str | None:
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
            await self.ensure_service(rayservice, service)
        return str(cluster["metadata"]["name"])

    async def ensure_service(self, rayservice: RayService, service: JSON) -> None:
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
        # Only the selector moves: a Service's clusterIP is immutable, its ports stay valid.
        patch = selector_patch(service, existing)
        if patch is None:
            return
        await self._client.patch(SERVICE, name, patch, namespace=namespace)
        logger.info("switched Service %s to RayCluster %s", name, target)
        await self._events.record(
            rayservice,
            reason="UpdatedService",
            message=f"Updated the service {namespace}/{name} to RayCluster {target}",
        )

    def _services_point_to(self, rayservice: RayService) -> str | None:
        namespace, name = rayservice["metadata"]["namespace"], rayservice["metadata"]["name"]
        head = self._store.get(SERVICE, namespace, f"{name}-{names.HEAD_SERVICE_SUFFIX}")
        serve = self._store.get(SERVICE, namespace, f"{name}-{names.SERVE_SERVICE_SUFFIX}")
        pointed = rules.serving_cluster_of(head)
        return pointed if pointed == rules.serving_cluster_of(serve) else None

    # --- lifecycle -----------------------------------------------------------------------------

    async def ensure_finalizer(self, rayservice: RayService) -> bool:
        """Add our finalizer; True when it had to be added (look again once it is cached)."""
        return await add_finalizer(self._client, RAY_SERVICE, rayservice, FINALIZER)

    async def finalize(self, rayservice: RayService, *, clusters_left: bool) -> Result:
        """Being deleted: once its clusters are gone, delete its Services and drop the finalizer."""
        if not has_finalizer(rayservice, FINALIZER):
            return Result()
        if clusters_left:
            return Result(requeue_after=1.0)
        for service in self._store.list_owned_by(SERVICE, rayservice["metadata"]["uid"]):
            await self._client.delete_seen(SERVICE, service)
        if not await self._incremental.delete_routing(rayservice):
            return Result(requeue_after=1.0)
        await remove_finalizer(self._client, RAY_SERVICE, rayservice, FINALIZER)
        self._serve_configs.pop(ObjectKey.of(rayservice), None)
        self._spec_readings.pop(ObjectKey.of(rayservice), None)
        return Result()

    def read_spec(self, rayservice: RayService) -> SpecReading:
        """What makes the spec unusable (the webhook's rules, again: an object may predate the
        webhook or bypass it, or what this operator does not implement yet), and the parsed
        Serve config; recomputed only when the name, annotations or spec changed (their digest
        costs O(size), a YAML parse far more)."""
        key = ObjectKey.of(rayservice)
        digest = _spec_digest(rayservice)
        known = self._spec_readings.get(key)
        if known is not None and known.digest == digest:
            return known
        problems: list[FieldError | str] = [*validate_rayservice(rayservice, limits=self._limits)]
        config: Mapping[str, Any] = {}
        try:
            # Only a valid spec is parsed again (its refusal would repeat the webhook's rule).
            config = {} if problems else build.serve_config(rayservice)
        except build.InvalidServeConfigError as error:
            problems.append(str(error))
        problem = summarize(problems) or None
        reading = SpecReading(
            digest=digest,
            problem=problem,
            serve_config=config if problem is None else {},
            serve_config_hash=build.serve_config_hash(rayservice) if problem is None else "",
            cluster_config_hash=build.cluster_config_hash(rayservice) if problem is None else "",
        )
        self._spec_readings[key] = reading
        return reading

    async def report_invalid_spec(
        self, rayservice: RayService, status: JSON, message: str
    ) -> Result:
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

    async def write_status(self, rayservice: RayService, old: JSON, new: JSON) -> None:
        if not rules.status_changed(old, new):
            return
        new["lastUpdateTime"] = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        # A Conflict (a stale cache: say, one that would choose a second pending cluster name)
        # is retried from fresh data.
        written = await status_writer.write_status(
            self._client, RAY_SERVICE, rayservice, old, new, nested=SERVICE_STATUS_ENTRIES
        )
        if written:
            await status_writer.record_pods_waiting_news(self._events, rayservice, old, new)

    # --- helpers -------------------------------------------------------------------------------

    def _owned_cluster(self, rayservice: RayService, name: str) -> RayCluster | None:
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

    def _forget_serve_config(self, rayservice: RayService, cluster_name: str) -> None:
        self._serve_configs.get(ObjectKey.of(rayservice), {}).pop(cluster_name, None)


def _spec_digest(rayservice: RayService) -> str:
    """A digest of what validation and the Serve config read: name, annotations and spec."""
    metadata = rayservice.get("metadata") or {}
    what = [metadata.get("name"), metadata.get("annotations"), rayservice.get("spec")]
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _cluster_name(status: Object, entry: str) -> str:
    return str((status.get(entry) or {}).get("rayClusterName") or "")


def _head_pod(pods: Sequence[Pod]) -> Pod | None:
    heads = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        and not p["metadata"].get("deletionTimestamp")
    ]
    return heads[0] if len(heads) == 1 else None


def _pod_ready(pod: Pod) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _head_pod_ready(cluster: RayCluster) -> bool:
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
        access = DashboardAccess(
            context.client, store=context.store, resolver=resolver, options=options
        )
        return RayServiceController(context, dashboards=access, limits=limits)

    return factory
