"""The RayService steps of `upgradeStrategy.type: NewClusterWithIncrementalUpgrade` (KubeRay's
`RayServiceIncrementalUpgrade` gate): traffic moves from the active cluster to the pending one
through a Gateway API HTTPRoute, a step at a time, while Serve's `target_capacity` on each
cluster grows and shrinks to match (the pure state machine is `status/incremental_upgrade`).

`RayServiceController.reconcile` hands over to `IncrementalUpgrade.reconcile` once the clusters
are known, and lends it the few steps of its own it needs (`RayServiceSteps`: Serve, a Service,
the status), not itself; per reconcile, as KubeRay's controller:
1. rollback: during an upgrade, a spec back at the active cluster's hash (or at a third one)
   sets `RollbackInProgress`; back at the pending cluster's removes it;
2. Serve: the config is PUT to the pending cluster (and to the active one outside an upgrade or
   during a rollback) with `target_capacity` from the status;
3. each cluster's own Serve Service `<cluster>-serve-svc`, the Gateway `<name>-gateway`, then
   (once the Gateway and the route report ready) the capacity steps, PUT to each dashboard;
4. the HTTPRoute `<name>-httproute` with the weights of this step;
5. `<name>-head-svc` on the active cluster (the pending one when there is none yet, or once the
   upgrade is complete);
6. the status: weights read into `trafficRoutedPercent` (with `lastTrafficMigratedTime`),
   capacities in `targetCapacity`, promotion once the active cluster has no capacity left and
   the pending one all the traffic, a finished rollback dropping the pending cluster.

No Gateway controller: nothing routes until one (Istio, Envoy Gateway, ...) programs the Gateway;
the traffic does not move and Serve capacities stay put until it reports the Gateway and the
route ready. Missing Gateway API CRDs are told by a Warning event on each attempt (aggregated),
and the RayService keeps serving through its Services as before.

The config last PUT to each cluster is kept in memory so that a capacity step re-sends that
cluster's own config (the active cluster keeps its old applications); after a restart, the
spec's config is used, as KubeRay does.
"""

from __future__ import annotations

import copy
import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from ray_operator.builders import gateway as gw
from ray_operator.builders import rayservice as build
from ray_operator.builders.services import NoServePortError
from ray_operator.runtime.controller import Result
from ray_operator.runtime.errors import AlreadyExists, Forbidden, KubeError, NotFound
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.dashboard_errors import DashboardError
from ray_operator.spec.dashboard_models import ServeApplicationStatus
from ray_operator.spec.kinds import POD, SERVICE, Kind, ObjectKey
from ray_operator.spec.rayservice import SpecReading
from ray_operator.status import incremental_upgrade as machine
from ray_operator.status import rayservice as rules
from ray_operator.status.conditions import set_condition
from ray_operator.validation.incremental_upgrade import INCREMENTAL_UPGRADE

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService

    from ray_operator.controllers.dashboards import DashboardAccess
    from ray_operator.runtime.controller import ControllerContext
    from ray_operator.status.dashboard_reachability import Reachability

logger = logging.getLogger(__name__)

JSON = dict[str, Any]
Object = Mapping[str, Any]

GATEWAY: Final[Kind[JSON]] = Kind(gw.GATEWAY_API_GROUP, "v1", "gateways", "Gateway")
HTTP_ROUTE: Final[Kind[JSON]] = Kind(gw.GATEWAY_API_GROUP, "v1", "httproutes", "HTTPRoute")
ACTIVE, PENDING = "activeServiceStatus", "pendingServiceStatus"
REQUEUE_SECONDS = 2.0
MISSING_CRDS = (
    "the Gateway API is not installed (no gateway.networking.k8s.io/v1 {kind} resource): "
    "NewClusterWithIncrementalUpgrade needs its CRDs and a Gateway controller"
)


def applies(rayservice: Object) -> bool:
    """Whether the RayService upgrades incrementally (admission checked its feature gate)."""
    strategy = (rayservice.get("spec") or {}).get("upgradeStrategy") or {}
    return strategy.get("type") == INCREMENTAL_UPGRADE


def strip_worker_replicas(rayservice: Object, cluster: JSON) -> JSON:
    """A pending cluster built during an upgrade starts without worker `replicas`: it grows
    from `minReplicas` as its Serve capacity does (KubeRay's `constructRayClusterForRayService`)."""
    active = ((rayservice.get("status") or {}).get(ACTIVE) or {}).get("rayClusterName")
    if applies(rayservice) and active:
        for group in cluster.get("spec", {}).get("workerGroupSpecs") or []:
            group.pop("replicas", None)
    return cluster


def _time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _side(status: Object, entry: str) -> machine.Side:
    return machine.Side.of(status.get(entry))


def _set_side(status: JSON, entry: str, side: machine.Side) -> None:
    values = dict(status.get(entry) or {})
    if side.target_capacity is not None:
        values["targetCapacity"] = side.target_capacity
    if side.traffic is not None:
        values["trafficRoutedPercent"] = side.traffic
    if side.last_migrated is not None:
        values["lastTrafficMigratedTime"] = _time(side.last_migrated)
    status[entry] = values


class RayServiceSteps(Protocol):
    """What the incremental upgrade asks of the RayService controller: its Serve, Service and
    status steps, which every RayService uses whatever its upgrade strategy."""

    async def reconcile_serve(
        self, rayservice: RayService, cluster: RayCluster, spec: SpecReading, *, put: bool = True
    ) -> tuple[bool, Mapping[str, ServeApplicationStatus] | None, Reachability | None]:
        """PUT the Serve config when needed (and `put`); whether all apps run, their statuses,
        and what asking the dashboard showed of its reachability (None: not asked)."""
        ...

    async def ensure_service(self, rayservice: RayService, service: JSON) -> None:
        """The Service created when missing; otherwise only its selector moved to this one's."""
        ...

    async def report_initializing_timeout(
        self, rayservice: RayService, old: Object, new: Object
    ) -> None:
        """The Warning KubeRay records when the status has just timed out initializing."""
        ...

    async def write_status(self, rayservice: RayService, old: JSON, new: JSON) -> None:
        """The status patched when `status_changed(old, new)` says so."""
        ...


class IncrementalUpgrade:
    """The incremental-upgrade steps of one RayService controller (it owns the client, cache,
    events and dashboards these steps use)."""

    def __init__(
        self,
        controller: RayServiceSteps,
        context: ControllerContext,
        *,
        dashboards: DashboardAccess,
        now: Callable[[], datetime.datetime],
        suffix: Callable[[], str],
    ) -> None:
        self._c = controller  # its public Serve, Service and status steps
        self._client = context.client
        self._store = context.store
        self._events = context.events
        self._dashboards = dashboards
        self._now = now
        self._suffix = suffix
        # RayService key -> {cluster name -> the Serve config last PUT there}.
        self._configs: dict[ObjectKey, dict[str, Mapping[str, Any]]] = {}
        # RayServices told in the log that the Gateway API is missing (the Event aggregates).
        self._told_missing: set[ObjectKey] = set()

    def forget(self, key: ObjectKey) -> None:
        self._configs.pop(key, None)
        self._told_missing.discard(key)

    def remember_config(
        self, rayservice: RayService, cluster_name: str, config: Mapping[str, Any]
    ) -> None:
        self._configs.setdefault(ObjectKey.of(rayservice), {})[cluster_name] = config

    def serve_config_for(
        self, rayservice: RayService, status: Object, cluster_name: str, spec: SpecReading
    ) -> SpecReading:
        """The spec's Serve config with the cluster's `target_capacity` from the status."""
        capacity = None
        for entry in (ACTIVE, PENDING):
            values = status.get(entry) or {}
            if values.get("rayClusterName") == cluster_name:
                capacity = values.get("targetCapacity")
        if capacity is None:
            return spec
        return replace(spec, serve_config={**spec.serve_config, "target_capacity": capacity})

    async def reconcile(
        self,
        rayservice: RayService,
        stored: JSON,
        status: JSON,
        active: RayCluster | None,
        pending: RayCluster | None,
        spec: SpecReading,
    ) -> Result:
        """One pass of the incremental upgrade, after the clusters are known (see the module)."""
        run = self.begin(rayservice, status, active, pending, spec)
        serving = await self.reconcile_serve(run)
        gateway, route = await self.ensure_routing_objects(run)
        weights = await self.shift_capacity(run, serving, ready=_routing_ready(gateway, route))
        if gateway is not None:
            await self.route_traffic(run, route, weights)
        points_to = await self.point_head_service(run, serving)
        new = self.next_status(run, serving, points_to=points_to)
        await self._c.report_initializing_timeout(rayservice, stored, new)
        await self._c.write_status(rayservice, stored, new)
        return Result(requeue_after=REQUEUE_SECONDS)

    def begin(
        self,
        rayservice: RayService,
        status: JSON,
        active: RayCluster | None,
        pending: RayCluster | None,
        spec: SpecReading,
    ) -> _Pass:
        """This pass's facts: whether an upgrade runs, whether it rolls back (the condition set
        or removed), KubeRay's default capacities during an upgrade."""
        now = self._now()
        generation = int(rayservice["metadata"].get("generation") or 0)
        options = machine.options_of(rayservice)
        assert options is not None  # admission requires them
        status = copy.deepcopy(status)
        upgrading = active is not None and pending is not None and rules.upgrade_in_progress(status)
        back = upgrading and machine.rolling_back(
            goal_hash=spec.cluster_config_hash,
            active_hash=_hash(active),
            pending_hash=_hash(pending),
        )
        status["conditions"] = _rollback_condition(status, back, now=now, generation=generation)
        if upgrading:
            _default_capacities(status)
        return _Pass(
            rayservice, status, active, pending, spec, options, now, generation, upgrading, back
        )

    async def reconcile_serve(self, run: _Pass) -> _Serving:
        """Serve on the pending cluster (not PUT while rolling back) and on the active one (PUT
        only outside an upgrade or while rolling back), each with its target_capacity."""
        serving = _Serving()
        rayservice, status, spec = run.rayservice, run.status, run.spec
        if run.pending is not None:
            config = self.serve_config_for(rayservice, status, _name(run.pending), spec)
            ready, apps, _ = await self._c.reconcile_serve(
                rayservice, run.pending, config, put=not run.back
            )
            serving = replace(serving, pending_ready=ready, pending_apps=apps)
        if run.active is not None and (
            run.pending is not None
            or not rules.needs_new_cluster(
                rayservice, goal_hash=spec.cluster_config_hash, active=run.active, pending=None
            )
        ):
            config = self.serve_config_for(rayservice, status, _name(run.active), spec)
            ready, apps, _ = await self._c.reconcile_serve(
                rayservice, run.active, config, put=not run.upgrading or run.back
            )
            serving = replace(serving, active_ready=ready, active_apps=apps)
        return serving

    async def ensure_routing_objects(self, run: _Pass) -> tuple[JSON | None, JSON | None]:
        """Each cluster's Serve Service, the Gateway, and the route as stored (None for what the
        Gateway API does not have: the Gateway None when the API is missing)."""
        for cluster in (run.active, run.pending):
            if cluster is not None:
                await self.ensure_cluster_serve_service(run.rayservice, cluster)
        gateway = await self.ensure_gateway(run.rayservice)
        if gateway is None:
            return None, None
        try:
            name = gw.httproute_name(run.rayservice)
            return gateway, await self._get(HTTP_ROUTE, run.rayservice, name)
        except NotFound:
            await self._missing(run.rayservice, "HTTPRoute", reason="FailedToCreateHTTPRoute")
            return None, None

    async def shift_capacity(
        self, run: _Pass, serving: _Serving, *, ready: bool
    ) -> tuple[int, int]:
        """During an upgrade, PUT this step's capacities (once the Gateway and route are ready);
        the route's weights for the active and pending cluster now."""
        if not run.upgrading or run.active is None or run.pending is None:
            return run.active_side.traffic_or(machine.FULL), run.pending_side.traffic_or(0)
        reachable = frozenset(
            role
            for role, cluster in (
                (machine.Role.ACTIVE, run.active),
                (machine.Role.PENDING, run.pending),
            )
            if _head_ready(cluster)
        )
        step = machine.plan(
            run.active_side,
            run.pending_side,
            run.options,
            routing_ready=ready,
            pending_ready=serving.pending_ready,
            reachable=reachable,
            rolling_back=run.back,
            now=run.now,
        )
        for change in step.capacity_changes:
            cluster = run.active if change.role is machine.Role.ACTIVE else run.pending
            if not await self.set_target_capacity(run.rayservice, cluster, change.goal, run.spec):
                break
            run.active_side, run.pending_side = machine.with_capacity(
                run.active_side, run.pending_side, change
            )
        return machine.weights(
            run.active_side,
            run.pending_side,
            run.options,
            pending_ready=serving.pending_ready,
            rolling_back=run.back,
            now=run.now,
        )

    async def route_traffic(self, run: _Pass, route: JSON | None, weights: tuple[int, int]) -> None:
        """Write the route (once there is an active cluster); the weights it now has become the
        clusters' `trafficRoutedPercent`."""
        if run.active is None:
            return
        backends = [gw.Backend(run.active, weights[0])]
        if run.pending is not None:
            backends.append(gw.Backend(run.pending, weights[1]))
        desired = gw.build_httproute(run.rayservice, backends)
        if not await self.ensure_httproute(run.rayservice, desired, route):
            return
        run.active_side = machine.observed_traffic(run.active_side, weights[0], now=run.now)
        if run.pending is not None:
            run.pending_side = machine.observed_traffic(run.pending_side, weights[1], now=run.now)

    async def point_head_service(self, run: _Pass, serving: _Serving) -> str | None:
        """`<name>-head-svc` on its cluster (`_head_target`); the cluster the status takes as
        served: the pending one only once it may be promoted."""
        complete = self._complete(run)
        target = _head_target(
            run.active,
            run.pending,
            upgrading=run.upgrading,
            complete=complete,
            pending_ready=serving.pending_ready,
            active_ready=serving.active_ready,
        )
        points_to = self._head_points_to(run.rayservice)
        if target is not None:
            service = build.build_head_service_for_service(run.rayservice, target)
            await self._c.ensure_service(run.rayservice, service)
            points_to = _name(target)
        if run.upgrading and not complete:
            return _name(run.active) if run.active is not None else None
        return points_to

    def next_status(self, run: _Pass, serving: _Serving, *, points_to: str | None) -> JSON:
        """The status: the capacities and traffic of this pass, KubeRay's promotion and
        conditions (`rules.compute_status`), a new pending cluster at its initial capacity, and
        the pending cluster dropped once a rollback is complete."""
        status, active, pending = run.status, run.active, run.pending
        _set_side(status, ACTIVE, run.active_side)
        if pending is not None:
            _set_side(status, PENDING, run.pending_side)
        new_pending_name = None
        if not run.back and rules.needs_new_cluster(
            run.rayservice,
            goal_hash=run.spec.cluster_config_hash,
            active=active,
            pending=pending,
            pending_serving=pending is not None and points_to == _name(pending),
        ):
            new_pending_name = f"{run.rayservice['metadata']['name']}-{self._suffix()}"
            logger.info("preparing a new RayCluster %s", new_pending_name)
        pods = self._store.list(POD, namespace=run.rayservice["metadata"]["namespace"])
        observed = rules.Observed(
            generation=run.generation,
            active=active,
            pending=pending,
            active_apps=serving.active_apps,
            pending_apps=serving.pending_apps,
            services_point_to=points_to,
            serve_endpoints=sum(
                rules.count_serve_endpoints(pods, cluster=_name(cluster))
                for cluster in (active, pending)
                if cluster is not None
            ),
            new_pending_name=new_pending_name,
            initializing_timeout=rules.initializing_timeout(run.rayservice),
        )
        new = rules.compute_status(status, observed, now=run.now)
        if new_pending_name is not None:
            has_active = bool((new.get(ACTIVE) or {}).get("rayClusterName"))
            new[PENDING]["targetCapacity"] = machine.initial_pending_capacity(
                "active" if has_active else ""
            )
        if run.back and machine.rollback_complete(
            _side(new, ACTIVE),
            _side(new, PENDING),
            pending_healthy=pending is not None and _head_ready(pending),
        ):
            logger.info("%s: rollback complete", ObjectKey.of(run.rayservice))
            new[PENDING] = {}
            new["conditions"] = _after_rollback(new, now=run.now, generation=run.generation)
        return new

    @staticmethod
    def _complete(run: _Pass) -> bool:
        return (
            run.upgrading
            and not run.back
            and machine.upgrade_complete(run.active_side, run.pending_side)
        )

    # --- objects -------------------------------------------------------------------------------

    async def ensure_cluster_serve_service(
        self, rayservice: RayService, cluster: RayCluster
    ) -> None:
        """`<cluster>-serve-svc`, created once (KubeRay's `reconcilePerClusterServeService`)."""
        namespace = rayservice["metadata"]["namespace"]
        try:
            service = gw.build_cluster_serve_service(rayservice, cluster)
        except NoServePortError as error:
            await self._events.record(
                rayservice, reason="InvalidServeService", message=str(error), type="Warning"
            )
            return
        if self._store.get(SERVICE, namespace, service["metadata"]["name"]) is not None:
            return
        try:
            await self._client.create(SERVICE, service, namespace=namespace)
        except AlreadyExists:
            return
        logger.info("created the Serve Service %s", service["metadata"]["name"])

    async def ensure_gateway(self, rayservice: RayService) -> JSON | None:
        """The RayService's Gateway as stored (created or updated to the wanted one); None when
        it cannot be had (the Gateway API is missing, or the request failed: told by an Event)."""
        desired = gw.build_gateway(rayservice)
        name = desired["metadata"]["name"]
        namespace = rayservice["metadata"]["namespace"]
        events = self._events
        try:
            existing = await self._get(GATEWAY, rayservice, name)
            if existing is None:
                created = await self._client.create(GATEWAY, desired, namespace=namespace)
                await events.record(
                    rayservice,
                    reason="CreatedGateway",
                    message=f"Created Gateway for RayService {namespace}/{name}",
                )
                return created
            if not gw.gateway_differs(existing, desired):
                return existing
            updated = await self._client.patch(
                GATEWAY, name, {"spec": desired["spec"]}, namespace=namespace
            )
            await events.record(
                rayservice,
                reason="UpdatedGateway",
                message=f"Updated the Gateway {namespace}/{name}",
            )
            return updated
        except NotFound:
            await self._missing(rayservice, "Gateway", reason="FailedToCreateGateway")
        except KubeError as error:
            await events.record(
                rayservice,
                reason="FailedToCreateGateway",
                message=f"Failed to create or update the Gateway {namespace}/{name}: {error}",
                type="Warning",
            )
        return None

    async def ensure_httproute(
        self, rayservice: RayService, desired: JSON, existing: JSON | None
    ) -> bool:
        """Create or update the route; whether it now has the wanted weights."""
        name = desired["metadata"]["name"]
        namespace = rayservice["metadata"]["namespace"]
        events, client = self._events, self._client
        try:
            if existing is None:
                await client.create(HTTP_ROUTE, desired, namespace=namespace)
                await events.record(
                    rayservice,
                    reason="CreatedHTTPRoute",
                    message=f"Created HTTPRoute for RayService {namespace}/{name}",
                )
            elif gw.httproute_differs(existing, desired):
                await client.patch(HTTP_ROUTE, name, {"spec": desired["spec"]}, namespace=namespace)
                await events.record(
                    rayservice,
                    reason="UpdatedHTTPRoute",
                    message=f"Updated the HTTPRoute {namespace}/{name}",
                )
        except NotFound:
            await self._missing(rayservice, "HTTPRoute", reason="FailedToCreateHTTPRoute")
            return False
        except KubeError as error:
            await events.record(
                rayservice,
                reason="FailedToUpdateHTTPRoute",
                message=f"Failed to create or update the HTTPRoute {namespace}/{name}: {error}",
                type="Warning",
            )
            return False
        return True

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
            await self._events.record(
                rayservice,
                reason="FailedToUpdateTargetCapacity",
                message=f"Failed to update target_capacity of serve applications to the "
                f"RayCluster {namespace}/{name}: {error}",
                type="Warning",
            )
            return False
        self.remember_config(rayservice, name, body)
        logger.info("set target_capacity %d on RayCluster %s", goal, name)
        await self._events.record(
            rayservice,
            reason="UpdatedServeTargetCapacity",
            message=f"Updated target_capacity of serve applications to {goal} on the RayCluster "
            f"{namespace}/{name}",
        )
        return True

    async def delete_routing(self, rayservice: RayService) -> bool:
        """Delete the Gateway and the HTTPRoute (suspend, deletion) of an incrementally upgraded
        RayService; True when none is left."""
        if not applies(rayservice):
            return True
        left = False
        for kind, name in (
            (HTTP_ROUTE, gw.httproute_name(rayservice)),
            (GATEWAY, gw.gateway_name(rayservice)),
        ):
            try:
                existing = await self._get(kind, rayservice, name)
            except NotFound:
                continue  # the Gateway API is not installed: nothing to delete
            except Forbidden:
                # An operator without the Gateway API rule (the gate turned off and the rule
                # dropped): the objects are owned, the garbage collector removes them.
                logger.info(
                    "%s: may not read its %s; left to the garbage collector",
                    ObjectKey.of(rayservice),
                    kind.kind,
                )
                continue
            if existing is None:
                continue
            left = True
            if not existing["metadata"].get("deletionTimestamp"):
                await self._client.delete_seen(kind, existing)
                namespace = rayservice["metadata"]["namespace"]
                await self._events.record(
                    rayservice,
                    reason=f"Deleted{kind.kind}",
                    message=f"Deleted the {kind.kind} {namespace}/{name}",
                )
        return not left

    # --- helpers -------------------------------------------------------------------------------

    async def _get(self, kind: Kind[JSON], rayservice: RayService, name: str) -> JSON | None:
        """The object, None when absent; NotFound raised when the kind itself is not served
        (a missing object's 404 names it, a missing resource type's does not)."""
        namespace = rayservice["metadata"]["namespace"]
        try:
            return await self._client.get(kind, name, namespace=namespace)
        except NotFound as error:
            if f'"{name}"' not in str(error):
                raise
            return None

    async def _missing(self, rayservice: RayService, kind: str, *, reason: str) -> None:
        message = MISSING_CRDS.format(kind=kind)
        key = ObjectKey.of(rayservice)
        level = logging.DEBUG if key in self._told_missing else logging.WARNING
        self._told_missing.add(key)
        logger.log(level, "%s: %s", key, message)
        await self._events.record(rayservice, reason=reason, message=message, type="Warning")

    def _head_points_to(self, rayservice: RayService) -> str | None:
        namespace, name = rayservice["metadata"]["namespace"], rayservice["metadata"]["name"]
        head = self._store.get(SERVICE, namespace, f"{name}-{names.HEAD_SERVICE_SUFFIX}")
        return rules.serving_cluster_of(head)


@dataclass(slots=True)
class _Pass:
    """What one reconcile of an incremental upgrade works from, and the two clusters' sides of
    the status as this pass moves them."""

    rayservice: RayService
    status: JSON
    active: RayCluster | None
    pending: RayCluster | None
    spec: SpecReading
    options: machine.Options
    now: datetime.datetime
    generation: int
    upgrading: bool
    back: bool
    active_side: machine.Side = field(default_factory=machine.Side)
    pending_side: machine.Side = field(default_factory=machine.Side)

    def __post_init__(self) -> None:
        self.active_side = _side(self.status, ACTIVE)
        self.pending_side = _side(self.status, PENDING)


@dataclass(frozen=True, slots=True)
class _Serving:
    """What Serve said on each cluster this pass."""

    pending_ready: bool = False
    pending_apps: Mapping[str, ServeApplicationStatus] | None = None
    active_ready: bool = False
    active_apps: Mapping[str, ServeApplicationStatus] | None = None


def _routing_ready(gateway: JSON | None, route: JSON | None) -> bool:
    return gw.gateway_ready(gateway) and gw.httproute_ready(gateway, route)


def _name(cluster: RayCluster) -> str:
    return str(cluster["metadata"]["name"])


def _hash(cluster: RayCluster | None) -> str:
    annotations = ((cluster or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(build.CLUSTER_HASH_ANNOTATION) or "")


def _head_ready(cluster: RayCluster) -> bool:
    return any(
        c.get("type") == "HeadPodReady" and c.get("status") == "True"
        for c in (cluster.get("status") or {}).get("conditions") or ()
    )


def _default_capacities(status: JSON) -> None:
    """KubeRay's defaults once an upgrade runs: 100 on the active cluster, 0 on the pending."""
    status[ACTIVE] = {"targetCapacity": machine.FULL, **(status.get(ACTIVE) or {})}
    status[PENDING] = {"targetCapacity": 0, **(status.get(PENDING) or {})}


def _head_target(
    active: RayCluster | None,
    pending: RayCluster | None,
    *,
    upgrading: bool,
    complete: bool,
    pending_ready: bool,
    active_ready: bool,
) -> RayCluster | None:
    """The cluster `<name>-head-svc` selects: the active one during an upgrade (the pending one
    once complete); otherwise the ready one, the pending first (a first cluster)."""
    if upgrading:
        return pending if complete else active
    if pending_ready and pending is not None:
        return pending
    return active if active_ready else None


def _rollback_condition(
    status: Object, back: bool, *, now: datetime.datetime, generation: int
) -> list[JSON]:
    conditions = [dict(c) for c in status.get("conditions") or ()]
    rolling = any(
        c.get("type") == rules.ROLLBACK_IN_PROGRESS and c.get("status") == "True"
        for c in conditions
    )
    if back and not rolling:
        return set_condition(
            conditions,
            rules.ROLLBACK_IN_PROGRESS,
            status="True",
            reason="DesiredClusterSpecChanged",
            message="Goal state changed during the upgrade, rolling back to the original cluster.",
            now=now,
            generation=generation,
        )
    if not back and rolling:
        return [c for c in conditions if c.get("type") != rules.ROLLBACK_IN_PROGRESS]
    return conditions


def _after_rollback(status: Object, *, now: datetime.datetime, generation: int) -> list[JSON]:
    conditions = [
        dict(c)
        for c in status.get("conditions") or ()
        if c.get("type") != rules.ROLLBACK_IN_PROGRESS
    ]
    return set_condition(
        conditions,
        rules.UPGRADE_IN_PROGRESS,
        status="False",
        reason=rules.NO_PENDING_CLUSTER,
        message="Rollback complete, active Ray cluster exists and no pending Ray cluster",
        now=now,
        generation=generation,
    )
