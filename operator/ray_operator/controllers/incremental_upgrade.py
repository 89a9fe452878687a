"""The RayService steps of `upgradeStrategy.type: NewClusterWithIncrementalUpgrade` (KubeRay's
`RayServiceIncrementalUpgrade` gate): traffic moves from the active cluster to the pending one
through a Gateway API HTTPRoute, a step at a time, while Serve's `target_capacity` on each
cluster grows and shrinks to match (the pure state machine is `status/incremental_upgrade`, the
facts of a pass and its status entries `status/incremental_upgrade_pass`).

`RayServiceController.reconcile` hands over to `IncrementalUpgrade.reconcile` once the clusters
are known; the steps it shares with every RayService (Serve, the Services, the status write) are
the controller's step objects, handed in, not the controller; per reconcile, as KubeRay's
controller:
1. rollback: during an upgrade, a spec back at the active cluster's hash (or at a third one)
   sets `RollbackInProgress`; back at the pending cluster's removes it;
2. Serve: the config is PUT to the pending cluster (and to the active one outside an upgrade or
   during a rollback) with `target_capacity` from the status;
3. each cluster's own Serve Service `<cluster>-serve-svc`, the Gateway `<name>-gateway`
   (`incremental_upgrade_routing`), then (once the Gateway and the route report ready) the
   capacity steps, PUT to each dashboard;
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

The config last PUT to each cluster is kept in memory (`ServeConfigSubmission`) so that a
capacity step re-sends that cluster's own config (the active cluster keeps its old
applications); after a restart, the spec's config is used, as KubeRay does.
"""

from __future__ import annotations

import copy
import datetime
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ray_operator.builders import gateway as gw
from ray_operator.builders import rayservice as build
from ray_operator.runtime.controller import Result
from ray_operator.spec.kinds import POD, ObjectKey
from ray_operator.status import incremental_upgrade as machine
from ray_operator.status import rayservice as rules
from ray_operator.status.conditions import condition_true
from ray_operator.status.incremental_upgrade_pass import (
    ACTIVE,
    PENDING,
    Serving,
    UpgradePass,
    after_rollback,
    cluster_hash,
    cluster_name,
    default_capacities,
    head_target,
    rollback_condition,
    routing_ready,
    serve_config_with_capacity,
    set_side,
    side_of,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService

    from ray_operator.controllers.incremental_upgrade_routing import GatewayRouting
    from ray_operator.controllers.rayservice_serve_config import ServeConfigSubmission
    from ray_operator.controllers.rayservice_services import RayServiceServices
    from ray_operator.controllers.rayservice_status import RayServiceStatusWriter
    from ray_operator.runtime.store import StoreView
    from ray_operator.spec.rayservice import SpecReading

logger = logging.getLogger(__name__)

JSON = dict[str, Any]

REQUEUE_SECONDS = 2.0


class IncrementalUpgrade:
    """The incremental-upgrade steps of one RayService controller, over the step objects it
    shares with the controller."""

    def __init__(
        self,
        *,
        store: StoreView,
        serve: ServeConfigSubmission,
        services: RayServiceServices,
        status: RayServiceStatusWriter,
        routing: GatewayRouting,
        now: Callable[[], datetime.datetime],
        suffix: Callable[[], str],
    ) -> None:
        self._store = store
        self._serve = serve
        self._services = services
        self._status = status
        self._routing = routing
        self._now = now
        self._suffix = suffix

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
        gateway, route = await self._routing.ensure_routing_objects(rayservice, (active, pending))
        weights = await self.shift_capacity(run, serving, ready=routing_ready(gateway, route))
        if gateway is not None:
            await self.route_traffic(run, route, weights)
        points_to = await self.point_head_service(run, serving)
        new = self.next_status(run, serving, points_to=points_to)
        self._status.report_initializing_timeout(rayservice, stored, new)
        await self._status.write_status(rayservice, stored, new)
        return Result(requeue_after=REQUEUE_SECONDS)

    def begin(
        self,
        rayservice: RayService,
        status: JSON,
        active: RayCluster | None,
        pending: RayCluster | None,
        spec: SpecReading,
    ) -> UpgradePass:
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
            active_hash=cluster_hash(active),
            pending_hash=cluster_hash(pending),
        )
        status["conditions"] = rollback_condition(status, back, now=now, generation=generation)
        if upgrading:
            default_capacities(status)
        return UpgradePass(
            rayservice, status, active, pending, spec, options, now, generation, upgrading, back
        )

    async def reconcile_serve(self, run: UpgradePass) -> Serving:
        """Serve on the pending cluster (not PUT while rolling back) and on the active one (PUT
        only outside an upgrade or while rolling back), each with its target_capacity."""
        serving = Serving()
        rayservice, status, spec = run.rayservice, run.status, run.spec
        if run.pending is not None:
            config = serve_config_with_capacity(status, cluster_name(run.pending), spec)
            ready, apps, _ = await self._serve.reconcile_serve(
                rayservice, run.pending, config, put=not run.back
            )
            serving = replace(serving, pending_ready=ready, pending_apps=apps)
        if run.active is not None and (
            run.pending is not None
            or not rules.needs_new_cluster(
                rayservice, goal_hash=spec.cluster_config_hash, active=run.active, pending=None
            )
        ):
            config = serve_config_with_capacity(status, cluster_name(run.active), spec)
            ready, apps, _ = await self._serve.reconcile_serve(
                rayservice, run.active, config, put=not run.upgrading or run.back
            )
            serving = replace(serving, active_ready=ready, active_apps=apps)
        return serving

    async def shift_capacity(
        self, run: UpgradePass, serving: Serving, *, ready: bool
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
            if condition_true(cluster, "HeadPodReady")
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
            if not await self._serve.set_target_capacity(
                run.rayservice, cluster, change.goal, run.spec
            ):
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

    async def route_traffic(
        self, run: UpgradePass, route: JSON | None, weights: tuple[int, int]
    ) -> None:
        """Write the route (once there is an active cluster); the weights it now has become the
        clusters' `trafficRoutedPercent`."""
        if run.active is None:
            return
        backends = [gw.Backend(run.active, weights[0])]
        if run.pending is not None:
            backends.append(gw.Backend(run.pending, weights[1]))
        desired = gw.build_httproute(run.rayservice, backends)
        if not await self._routing.ensure_httproute(run.rayservice, desired, route):
            return
        run.active_side = machine.observed_traffic(run.active_side, weights[0], now=run.now)
        if run.pending is not None:
            run.pending_side = machine.observed_traffic(run.pending_side, weights[1], now=run.now)

    async def point_head_service(self, run: UpgradePass, serving: Serving) -> str | None:
        """`<name>-head-svc` on its cluster (`head_target`); the cluster the status takes as
        served: the pending one only once it may be promoted."""
        complete = run.complete()
        target = head_target(
            run.active,
            run.pending,
            upgrading=run.upgrading,
            complete=complete,
            pending_ready=serving.pending_ready,
            active_ready=serving.active_ready,
        )
        points_to = self._services.head_points_to(run.rayservice)
        if target is not None:
            service = build.build_head_service_for_service(run.rayservice, target)
            await self._services.ensure_service(run.rayservice, service)
            points_to = cluster_name(target)
        if run.upgrading and not complete:
            return cluster_name(run.active) if run.active is not None else None
        return points_to

    def next_status(self, run: UpgradePass, serving: Serving, *, points_to: str | None) -> JSON:
        """The status: the capacities and traffic of this pass, KubeRay's promotion and
        conditions (`rules.compute_status`), a new pending cluster at its initial capacity, and
        the pending cluster dropped once a rollback is complete."""
        status, active, pending = run.status, run.active, run.pending
        set_side(status, ACTIVE, run.active_side)
        if pending is not None:
            set_side(status, PENDING, run.pending_side)
        new_pending_name = None
        if not run.back and rules.needs_new_cluster(
            run.rayservice,
            goal_hash=run.spec.cluster_config_hash,
            active=active,
            pending=pending,
            pending_serving=pending is not None and points_to == cluster_name(pending),
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
                rules.count_serve_endpoints(pods, cluster=cluster_name(cluster))
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
            side_of(new, ACTIVE),
            side_of(new, PENDING),
            pending_healthy=pending is not None and condition_true(pending, "HeadPodReady"),
        ):
            logger.info("%s: rollback complete", ObjectKey.of(run.rayservice))
            new[PENDING] = {}
            new["conditions"] = after_rollback(new, now=run.now, generation=run.generation)
        return new
