"""The RayService controller: a Serve deployment on a RayCluster, upgraded without downtime.

`reconcile` reads like KubeRay's: clean up replaced clusters, handle deletion (finalizer
`ray.io/rayservice-finalizer`), validate, find the active and pending clusters (creating the
pending one once its name is in the status), mark head Pods whose Serve proxy is healthy, PUT
the Serve config where needed (pending cluster first; the active one only when no upgrade is
under way), point `<name>-head-svc` and `<name>-serve-svc` at the cluster that is ready (the
pending one as soon as all its apps are RUNNING), then compute the status (`status/rayservice`).
The steps that carry this out against the API and the dashboards are objects of their own, one
per responsibility:

- `rayservice_clusters.RayServiceClusters`: the active and pending clusters, created, updated in
  place, replaced ones deleted after the delay;
- `rayservice_serve_config.ServeConfigSubmission`: the Serve config PUT to each cluster, and
  which config each cluster has;
- `rayservice_services.RayServiceServices`: `<name>-head-svc`, `<name>-serve-svc` and the head
  Pods' `ray.io/serve` label;
- `rayservice_status.RayServiceStatusWriter`: the status write and its Events;
- `incremental_upgrade.IncrementalUpgrade` (with `incremental_upgrade_routing.GatewayRouting`):
  `upgradeStrategy.type: NewClusterWithIncrementalUpgrade`, which takes over once the clusters
  are known.

Zero-downtime upgrade: a changed `rayClusterConfig` (its hash differs from the cluster's
annotation) names a pending cluster in the status; the next reconcile creates it; once its
applications run, the Services switch to it, the status promotes it to active, and the old
cluster is deleted after `rayClusterDeletionDelaySeconds` (60 by default). As in KubeRay, two
changes rewrite a cluster in place instead (`update_clusters_in_place`, event `UpdatedRayCluster`):
worker groups only appended to the config (`ray.io/num-worker-groups` counts the old ones), and
an active cluster stamped by another KubeRay version (`ray.io/kuberay-version`), whose hash may
come from that version's algorithm: its annotations are re-stamped, nothing is recreated. A changed
`serveConfigV2` alone is PUT to the running cluster in place (`ServeConfigSubmission`).

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
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from ray_operator.builders import rayservice as build
from ray_operator.controllers.dashboards import DashboardAccess
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.controllers.incremental_upgrade import IncrementalUpgrade
from ray_operator.controllers.incremental_upgrade_routing import GatewayRouting
from ray_operator.controllers.rayservice_clusters import RayServiceClusters
from ray_operator.controllers.rayservice_serve_config import ServeConfigSubmission
from ray_operator.controllers.rayservice_services import RayServiceServices
from ray_operator.controllers.rayservice_status import RayServiceStatusWriter
from ray_operator.dashboard.client import DashboardOptions
from ray_operator.dashboard.resolver import DashboardResolver
from ray_operator.defaults import default_rayservice
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    cluster_key_from_label,
    own_key,
    owner_keys,
)
from ray_operator.runtime.errors import KubeError
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.dashboard_models import ServeApplicationStatus
from ray_operator.spec.kinds import POD, RAY_CLUSTER, RAY_SERVICE, SERVICE, Kind, ObjectKey
from ray_operator.spec.object_names import random_suffix
from ray_operator.spec.rayservice import SpecReading
from ray_operator.status import rayservice as rules
from ray_operator.status import waiting
from ray_operator.status.dashboard_reachability import Reachability
from ray_operator.status.incremental_upgrade_pass import applies as upgrades_incrementally
from ray_operator.validation.errors import FieldError, summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayservice import validate_rayservice

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService


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
        self._dashboards = dashboards or DashboardAccess(context.client, store=context.store)
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._suffix = suffix
        # RayService key -> its spec, read (one entry per RayService, replaced on any change).
        self._spec_readings: dict[ObjectKey, SpecReading] = {}
        client, store, events = context.client, context.store, context.events
        self._serve = ServeConfigSubmission(dashboards=self._dashboards, events=events)
        self._clusters = RayServiceClusters(
            client=client, store=store, events=events, serve=self._serve, monotonic=monotonic
        )
        self._services = RayServiceServices(
            client=client, store=store, events=events, dashboards=self._dashboards
        )
        self._status = RayServiceStatusWriter(client=client, events=events, clock=self._now)
        self._routing = GatewayRouting(client=client, store=store, events=events)
        self._incremental = IncrementalUpgrade(
            store=context.store,
            serve=self._serve,
            services=self._services,
            status=self._status,
            routing=self._routing,
            now=self._now,
            suffix=suffix,
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
            self._serve.forget(key)
            self._spec_readings.pop(key, None)
            self._routing.forget(key)
            self._dashboards.forget_owner(key.namespace, key.name)
            return Result()
        # The webhook's defaults, applied here too, so an install without webhooks behaves the same.
        rayservice = cast("RayService", default_rayservice(cached))
        if rayservice.get("spec", {}).get("managedBy") not in names.OWN_MANAGED_BY:
            return Result()
        status: JSON = dict(rayservice.get("status") or {})
        waiting_for_deletion = await self._clusters.delete_replaced_clusters(rayservice, status)
        if rayservice["metadata"].get("deletionTimestamp"):
            return await self.finalize(rayservice, clusters_left=waiting_for_deletion)
        if await self.ensure_finalizer(rayservice):
            return Result(requeue_after=REQUEUE_SECONDS)
        spec = self.read_spec(rayservice)
        if spec.problem is not None:
            return await self._status.report_invalid_spec(rayservice, status, spec.problem)
        stored = status  # what the API server has: the base of the status write
        status, suspend_result = await self.ensure_suspension(rayservice, status)
        if suspend_result is not None:
            await self._status.write_status(rayservice, stored, status)
            return suspend_result
        if rules.initializing_timed_out(status):
            # Terminal, as in KubeRay: only the clusters' cleanup (above) goes on.
            return Result(requeue_after=REQUEUE_SECONDS if waiting_for_deletion else None)
        active, pending = await self._clusters.active_and_pending_clusters(rayservice, status)
        active, pending = await self._clusters.update_clusters_in_place(
            rayservice, status, active, pending, goal_hash=spec.cluster_config_hash
        )
        await self._services.mark_serving_head_pods(rayservice, active, pending)
        if upgrades_incrementally(rayservice):
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
            pending_ready, pending_apps, reachability = await self._serve.reconcile_serve(
                rayservice, pending, spec
            )
        elif active is not None and not rules.needs_new_cluster(
            rayservice, goal_hash=goal_hash, active=active, pending=None
        ):
            checked = active
            active_ready, active_apps, reachability = await self._serve.reconcile_serve(
                rayservice, active, spec
            )
        serving = pending if pending_ready else active if active_ready else None
        services_point_to = self._services.services_point_to(rayservice)
        if serving is not None:
            services_point_to = await self._services.point_services_at(rayservice, serving)
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
        new = self._dashboards.report_reachability(
            rayservice, new, reachability, events=self._events, now=self._now()
        )
        self._status.report_initializing_timeout(rayservice, status, new)
        await self._status.write_status(rayservice, stored, new)
        # While the dashboard cannot be reached, look again only when it may be asked again.
        cooldown = 0.0 if checked is None else self._dashboards.cooldown_remaining(checked)
        return Result(requeue_after=max(REQUEUE_SECONDS, cooldown))

    # --- suspend ---------------------------------------------------------------------------------

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
                self._clusters.forget_deletion(metadata.get("uid", ""))
                self._serve.forget_cluster(rayservice, metadata["name"])
        routing_deleted = await self._routing.delete_routing(rayservice)
        return not clusters and not services and routing_deleted

    async def _delete_for_suspend(self, rayservice: RayService, kind: Kind, obj: Object) -> None:
        what = "RayCluster" if kind == RAY_CLUSTER else "Service"
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            await self._client.delete_seen(kind, obj)
        except KubeError as error:
            self._events.record(
                rayservice,
                reason=f"FailedToDelete{what}",
                message=f"Failed to delete the {what} {namespace}/{name} during suspend: {error}",
                type="Warning",
            )
            raise
        logger.info("deleted %s %s for suspend", what, name)
        self._events.record(
            rayservice,
            reason=f"Deleted{what}",
            message=f"Deleted the {what} {namespace}/{name} during suspend",
        )

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
        if not await self._routing.delete_routing(rayservice):
            return Result(requeue_after=1.0)
        await remove_finalizer(self._client, RAY_SERVICE, rayservice, FINALIZER)
        self._serve.forget(ObjectKey.of(rayservice))
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

    # --- helpers -------------------------------------------------------------------------------

    def _service_of_pod(self, pod: Object) -> list[ObjectKey]:
        # A head Pod's readiness decides the serve label and the endpoint count.
        for cluster_key in cluster_key_from_label(pod):
            cluster = self._store.get(RAY_CLUSTER, cluster_key.namespace, cluster_key.name)
            if cluster is not None:
                return owner_keys(cluster, owner=RAY_SERVICE)
        return []


def _spec_digest(rayservice: RayService) -> str:
    """A digest of what validation and the Serve config read: name, annotations and spec."""
    metadata = rayservice.get("metadata") or {}
    what = [metadata.get("name"), metadata.get("annotations"), rayservice.get("spec")]
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


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
