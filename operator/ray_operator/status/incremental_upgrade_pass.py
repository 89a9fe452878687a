"""One reconcile of an incremental upgrade, the pure parts: what a pass works from and what it
writes back into the RayService's status (`controllers/incremental_upgrade.py` does the I/O).

- `applies`: whether a RayService upgrades incrementally; `strip_worker_replicas`: a pending
  cluster built during an upgrade grows from `minReplicas` as its Serve capacity does.
- `UpgradePass` and `Serving`: this pass's facts (the clusters, the spec, whether an upgrade runs
  and whether it rolls back, each cluster's side of the status) and what Serve said on each.
- Reading and writing a cluster's side of the status (`side_of`, `set_side`), KubeRay's default
  capacities once an upgrade runs, the `RollbackInProgress` condition set or removed, and the
  conditions after a finished rollback.
- `head_target`: the cluster `<name>-head-svc` selects; `serve_config_with_capacity`: the
  Serve config a cluster is given, with its `target_capacity` from the status.

The traffic-shifting state machine itself is `status/incremental_upgrade.py`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ray_operator.builders import gateway as gw
from ray_operator.builders import rayservice as build
from ray_operator.spec.dashboard_models import ServeApplicationStatus
from ray_operator.status import incremental_upgrade as machine
from ray_operator.status import rayservice as rules
from ray_operator.status.conditions import set_condition
from ray_operator.validation.incremental_upgrade import INCREMENTAL_UPGRADE

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService

    from ray_operator.spec.rayservice import SpecReading

JSON = dict[str, Any]
Object = Mapping[str, Any]

ACTIVE, PENDING = "activeServiceStatus", "pendingServiceStatus"


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


def side_of(status: Object, entry: str) -> machine.Side:
    """What the status says of the cluster in `entry` (`ACTIVE` or `PENDING`)."""
    return machine.Side.of(status.get(entry))


def set_side(status: JSON, entry: str, side: machine.Side) -> None:
    """Write the cluster's capacity, traffic and last migration into the status's `entry`."""
    values = dict(status.get(entry) or {})
    if side.target_capacity is not None:
        values["targetCapacity"] = side.target_capacity
    if side.traffic is not None:
        values["trafficRoutedPercent"] = side.traffic
    if side.last_migrated is not None:
        values["lastTrafficMigratedTime"] = _time(side.last_migrated)
    status[entry] = values


def serve_config_with_capacity(status: Object, cluster_name: str, spec: SpecReading) -> SpecReading:
    """The spec's Serve config with the cluster's `target_capacity` from the status."""
    capacity = None
    for entry in (ACTIVE, PENDING):
        values = status.get(entry) or {}
        if values.get("rayClusterName") == cluster_name:
            capacity = values.get("targetCapacity")
    if capacity is None:
        return spec
    return replace(spec, serve_config={**spec.serve_config, "target_capacity": capacity})


@dataclass(slots=True)
class UpgradePass:
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
        self.active_side = side_of(self.status, ACTIVE)
        self.pending_side = side_of(self.status, PENDING)

    def complete(self) -> bool:
        """The upgrade (not a rollback) has moved all capacity and traffic to the pending one."""
        return (
            self.upgrading
            and not self.back
            and machine.upgrade_complete(self.active_side, self.pending_side)
        )


@dataclass(frozen=True, slots=True)
class Serving:
    """What Serve said on each cluster this pass."""

    pending_ready: bool = False
    pending_apps: Mapping[str, ServeApplicationStatus] | None = None
    active_ready: bool = False
    active_apps: Mapping[str, ServeApplicationStatus] | None = None


def routing_ready(gateway: JSON | None, route: JSON | None) -> bool:
    """The Gateway and the route both report ready: capacity steps may begin."""
    return gw.gateway_ready(gateway) and gw.httproute_ready(gateway, route)


def cluster_name(cluster: RayCluster) -> str:
    return str(cluster["metadata"]["name"])


def cluster_hash(cluster: RayCluster | None) -> str:
    """The `rayClusterConfig` hash the cluster was built from ("" for none)."""
    annotations = ((cluster or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(build.CLUSTER_HASH_ANNOTATION) or "")


def default_capacities(status: JSON) -> None:
    """KubeRay's defaults once an upgrade runs: 100 on the active cluster, 0 on the pending."""
    status[ACTIVE] = {"targetCapacity": machine.FULL, **(status.get(ACTIVE) or {})}
    status[PENDING] = {"targetCapacity": 0, **(status.get(PENDING) or {})}


def head_target(
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


def rollback_condition(
    status: Object, back: bool, *, now: datetime.datetime, generation: int
) -> list[JSON]:
    """The conditions with `RollbackInProgress` set when a rollback begins, removed when it
    stops."""
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


def after_rollback(status: Object, *, now: datetime.datetime, generation: int) -> list[JSON]:
    """The conditions once a rollback is complete: no rollback, no upgrade in progress."""
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
