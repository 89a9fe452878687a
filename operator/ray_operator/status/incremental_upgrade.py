"""The traffic-shifting state machine of an incremental upgrade, pure: given the RayService's
status (each cluster's `targetCapacity`, `trafficRoutedPercent`, `lastTrafficMigratedTime`),
its `clusterUpgradeOptions` and `now`, what to do next. The controller applies the answer: the
Serve `target_capacity` PUT to each cluster's dashboard, the weights written to the HTTPRoute.

KubeRay's machine (`reconcileServeTargetCapacity`, `calculateTrafficRoutedPercent`,
`checkIfNeedTargetCapacityUpdate`, `IsIncrementalUpgradeComplete`, `reconcileRollbackState`,
`shouldCompleteIncrementalRollback`), step by step:

1. A new pending cluster starts at target capacity 0 (100 when there is no active cluster).
2. Capacity: once the traffic on the pending cluster has caught up with its capacity and the
   two capacities add up to at most 100, the pending cluster's capacity rises by
   `maxSurgePercent` (at most 100); while they add up to more than 100, the active cluster's
   falls by `maxSurgePercent` (at least 0).
3. Traffic: every `intervalSeconds` (after the pending cluster's `lastTrafficMigratedTime`), and
   only while the pending cluster's apps are ready, `stepSizePercent` of the traffic moves to it,
   never beyond its capacity; the active cluster gets the rest.
4. Done when the active cluster's capacity is 0 and the pending cluster has 100% of the traffic:
   the pending cluster is promoted.
Rollback (the spec changed back to the active cluster's, or to a third one mid-upgrade): the same
moves in reverse, traffic returning to the active cluster whatever the pending one's readiness,
until the active cluster has capacity and traffic 100 and the pending one 0 (or its head is not
ready); then the pending cluster is dropped.

Capacity changes wait for the Gateway and the route to be ready (`routing_ready`), as KubeRay's do.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from ray_operator.status.rayservice import parse_time

Object = Mapping[str, Any]

FULL = 100


@dataclass(frozen=True, slots=True)
class Options:
    """`spec.upgradeStrategy.clusterUpgradeOptions`, as validated (webhook and controller)."""

    step_size_percent: int
    interval_seconds: int
    max_surge_percent: int = FULL
    gateway_class_name: str = ""


def options_of(rayservice: Object) -> Options | None:
    """The RayService's upgrade options (None when unset)."""
    strategy = (rayservice.get("spec") or {}).get("upgradeStrategy") or {}
    raw = strategy.get("clusterUpgradeOptions")
    if not isinstance(raw, Mapping):
        return None
    surge = raw.get("maxSurgePercent")
    return Options(
        step_size_percent=int(raw.get("stepSizePercent") or 0),
        interval_seconds=int(raw.get("intervalSeconds") or 0),
        max_surge_percent=FULL if surge is None else int(surge),
        gateway_class_name=str(raw.get("gatewayClassName") or ""),
    )


@dataclass(frozen=True, slots=True)
class Side:
    """What the status says of one cluster (`activeServiceStatus` or `pendingServiceStatus`)."""

    target_capacity: int | None = None
    traffic: int | None = None
    last_migrated: datetime.datetime | None = None

    def traffic_or(self, default: int) -> int:
        """`trafficRoutedPercent`, or `default` while the status has none."""
        return default if self.traffic is None else self.traffic

    @classmethod
    def of(cls, entry: Object | None) -> Side:
        entry = entry or {}
        capacity, traffic = entry.get("targetCapacity"), entry.get("trafficRoutedPercent")
        return cls(
            target_capacity=capacity if isinstance(capacity, int) else None,
            traffic=traffic if isinstance(traffic, int) else None,
            last_migrated=parse_time(entry.get("lastTrafficMigratedTime")),
        )


class Role(Enum):
    ACTIVE = "active"
    PENDING = "pending"


@dataclass(frozen=True, slots=True)
class CapacityChange:
    """Set Serve's `target_capacity` of one cluster to `goal` (percent)."""

    role: Role
    goal: int


def initial_pending_capacity(active_cluster_name: str) -> int:
    """Target capacity of a new pending cluster: 0 during an upgrade, 100 for the first one."""
    return FULL if not active_cluster_name else 0


def needs_capacity_update(active: Side, pending: Side, *, rolling_back: bool) -> bool:
    """Whether the capacities still have to move (KubeRay's `checkIfNeedTargetCapacityUpdate`,
    once the Gateway and the route are ready)."""
    if None in (active.target_capacity, active.traffic, pending.target_capacity, pending.traffic):
        return True
    if rolling_back:
        return not (active.target_capacity == FULL and pending.target_capacity == 0)
    return not (active.target_capacity == 0 and pending.target_capacity == FULL)


def capacity_change(
    active: Side, pending: Side, options: Options, *, role: Role, rolling_back: bool
) -> CapacityChange | None:
    """The new target capacity of the cluster in `role`, if it should change now (KubeRay's
    `reconcileServeTargetCapacity` for that cluster; unset capacities count as 100 and 0)."""
    capacity = {
        Role.ACTIVE: FULL if active.target_capacity is None else active.target_capacity,
        Role.PENDING: 0 if pending.target_capacity is None else pending.target_capacity,
    }
    traffic = {Role.ACTIVE: active.traffic or 0, Role.PENDING: pending.traffic or 0}
    # Forward, the pending cluster grows and the active one shrinks; a rollback is the reverse.
    grows, shrinks = (Role.ACTIVE, Role.PENDING) if rolling_back else (Role.PENDING, Role.ACTIVE)
    if capacity[grows] != traffic[grows]:
        return None  # traffic is still moving to the cluster that grows
    total, current = sum(capacity.values()), capacity[role]
    if total > FULL and role is shrinks:
        return _changed(role, current, max(0, current - options.max_surge_percent))
    if total <= FULL and role is grows:
        return _changed(role, current, min(FULL, current + options.max_surge_percent))
    return None


def _changed(role: Role, current: int, goal: int) -> CapacityChange | None:
    return CapacityChange(role, goal) if goal != current else None


def with_capacity(active: Side, pending: Side, change: CapacityChange) -> tuple[Side, Side]:
    """The two sides once `change` was applied."""
    if change.role is Role.ACTIVE:
        return replace(active, target_capacity=change.goal), pending
    return active, replace(pending, target_capacity=change.goal)


def weights(
    active: Side,
    pending: Side,
    options: Options,
    *,
    pending_ready: bool,
    rolling_back: bool,
    now: datetime.datetime,
) -> tuple[int, int]:
    """The route's weights for the active and the pending cluster now (KubeRay's
    `calculateTrafficRoutedPercent`)."""
    active_weight = FULL if active.traffic is None else active.traffic
    pending_weight = 0 if pending.traffic is None else pending.traffic
    pending_capacity = 0 if pending.target_capacity is None else pending.target_capacity
    active_capacity = FULL if active.target_capacity is None else active.target_capacity
    if rolling_back:
        if active_weight == active_capacity:
            return active_weight, pending_weight
        if _interval_passed(active.last_migrated, options, now):
            active_weight = min(FULL, active_weight + options.step_size_percent, active_capacity)
            return active_weight, FULL - active_weight
        return active_weight, pending_weight
    if pending_weight == pending_capacity or not pending_ready:
        return active_weight, pending_weight
    if _interval_passed(pending.last_migrated, options, now):
        pending_weight = min(FULL, pending_weight + options.step_size_percent, pending_capacity)
        return FULL - pending_weight, pending_weight
    return active_weight, pending_weight


def _interval_passed(
    last: datetime.datetime | None, options: Options, now: datetime.datetime
) -> bool:
    return last is None or (now - last).total_seconds() >= options.interval_seconds


def next_migration(
    active: Side, pending: Side, options: Options, *, rolling_back: bool
) -> datetime.datetime | None:
    """When traffic may move next (None: it may move now, or nothing waits on the clock): the
    reconcile is requeued for then rather than polling every 2 s."""
    last = active.last_migrated if rolling_back else pending.last_migrated
    if last is None:
        return None
    return last + datetime.timedelta(seconds=options.interval_seconds)


def observed_traffic(side: Side, weight: int | None, *, now: datetime.datetime) -> Side:
    """The side once the route's weight for it is known: `lastTrafficMigratedTime` moves to
    `now` when the weight changed (KubeRay's `calculateStatus`)."""
    if weight is None:
        return side
    if weight == side.traffic:
        return side
    return replace(side, traffic=weight, last_migrated=now)


def upgrade_complete(active: Side, pending: Side) -> bool:
    """The pending cluster may be promoted: the active one has no capacity left and the pending
    one has all the traffic (KubeRay's `IsIncrementalUpgradeComplete`)."""
    return active.target_capacity == 0 and pending.traffic == FULL


def rolling_back(*, goal_hash: str, active_hash: str, pending_hash: str) -> bool:
    """Whether a rollback is under way (KubeRay's `reconcileRollbackState`): the spec went back
    to the active cluster's, or moved on to a third config that the pending cluster does not
    match either (traffic returns first; a fresh upgrade starts after). A spec matching the
    pending cluster again cancels a rollback."""
    if goal_hash == active_hash:
        return True
    return goal_hash != pending_hash


def rollback_complete(active: Side, pending: Side, *, pending_healthy: bool) -> bool:
    """The rollback is over: the active cluster is back at capacity and traffic 100, and the
    pending one is at 0 (or unhealthy: it cannot be asked to scale down)."""
    back = active.target_capacity == FULL and active.traffic == FULL
    drained = pending.target_capacity == 0 and pending.traffic == 0
    return back and (drained or not pending_healthy)


@dataclass(frozen=True, slots=True)
class Plan:
    """One reconcile's moves: the capacity changes to PUT in order (the pending cluster's first,
    as KubeRay reconciles it first), then the route's weights."""

    capacity_changes: tuple[CapacityChange, ...]
    active_weight: int
    pending_weight: int


def plan(
    active: Side,
    pending: Side,
    options: Options,
    *,
    routing_ready: bool,
    pending_ready: bool,
    reachable: frozenset[Role] = frozenset(Role),
    rolling_back: bool,
    now: datetime.datetime,
) -> Plan:
    """What to do now. `reachable`: the clusters whose dashboard can be asked this reconcile (a
    cluster whose head is not ready gets no capacity change, as in KubeRay)."""
    changes: list[CapacityChange] = []
    if routing_ready and needs_capacity_update(active, pending, rolling_back=rolling_back):
        for role in (Role.PENDING, Role.ACTIVE):
            if role not in reachable:
                continue
            change = capacity_change(active, pending, options, role=role, rolling_back=rolling_back)
            if change is not None:
                changes.append(change)
                active, pending = with_capacity(active, pending, change)
    active_weight, pending_weight = weights(
        active, pending, options, pending_ready=pending_ready, rolling_back=rolling_back, now=now
    )
    return Plan(tuple(changes), active_weight, pending_weight)
