"""Specification of the incremental upgrade's state machine, on a fake clock (`now` is an
argument): capacity grows by maxSurgePercent, traffic follows by stepSizePercent every
intervalSeconds, the old cluster shrinks, the new one is promoted; and the way back when the
spec changes back mid-upgrade."""

from __future__ import annotations

import datetime
import itertools

import pytest
from ray_operator.status.incremental_upgrade import (
    CapacityChange,
    Options,
    Role,
    Side,
    initial_pending_capacity,
    next_migration,
    observed_traffic,
    options_of,
    plan,
    rollback_complete,
    rolling_back,
    upgrade_complete,
    weights,
    with_capacity,
)

T0 = datetime.datetime(2026, 11, 26, 22, 0, 0, tzinfo=datetime.UTC)
OPTIONS = Options(step_size_percent=10, interval_seconds=30, max_surge_percent=20)


def later(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def reconcile(
    active: Side,
    pending: Side,
    options: Options,
    *,
    now: datetime.datetime,
    back: bool = False,
    pending_ready: bool = True,
) -> tuple[Side, Side, tuple[CapacityChange, ...]]:
    """One reconcile as the controller applies a plan: capacities PUT, route written, weights
    read back into the status."""
    step = plan(
        active,
        pending,
        options,
        routing_ready=True,
        pending_ready=pending_ready,
        rolling_back=back,
        now=now,
    )
    for change in step.capacity_changes:
        active, pending = with_capacity(active, pending, change)
    active = observed_traffic(active, step.active_weight, now=now)
    pending = observed_traffic(pending, step.pending_weight, now=now)
    return active, pending, step.capacity_changes


def test_options_are_read_with_kuberays_default_surge() -> None:
    rayservice = {
        "spec": {
            "upgradeStrategy": {
                "type": "NewClusterWithIncrementalUpgrade",
                "clusterUpgradeOptions": {
                    "gatewayClassName": "istio",
                    "stepSizePercent": 5,
                    "intervalSeconds": 60,
                },
            }
        }
    }
    assert options_of(rayservice) == Options(5, 60, 100, "istio")
    assert options_of({"spec": {}}) is None


def test_a_first_cluster_starts_at_full_capacity_and_an_upgrade_at_none() -> None:
    assert initial_pending_capacity("") == 100
    assert initial_pending_capacity("svc-abcde") == 0


def test_the_pending_cluster_grows_by_max_surge_before_any_traffic_moves() -> None:
    active, pending = Side(100, 100), Side(0, 0)
    step = plan(
        active, pending, OPTIONS, routing_ready=True, pending_ready=True, rolling_back=False, now=T0
    )
    assert step.capacity_changes == (CapacityChange(Role.PENDING, 20),)
    # Traffic follows in the same pass: the pending cluster has capacity now.
    assert (step.active_weight, step.pending_weight) == (90, 10)


def test_nothing_moves_until_the_gateway_and_route_are_ready() -> None:
    step = plan(
        Side(100, 100),
        Side(0, 0),
        OPTIONS,
        routing_ready=False,
        pending_ready=True,
        rolling_back=False,
        now=T0,
    )
    assert step.capacity_changes == ()
    assert (step.active_weight, step.pending_weight) == (100, 0)


def test_traffic_moves_one_step_per_interval_and_never_beyond_capacity() -> None:
    active, pending = Side(100, 90, T0), Side(20, 10, T0)
    assert weights(
        active, pending, OPTIONS, pending_ready=True, rolling_back=False, now=later(29)
    ) == (90, 10)
    assert weights(
        active, pending, OPTIONS, pending_ready=True, rolling_back=False, now=later(30)
    ) == (80, 20)
    capped = Side(25, 20, T0)
    assert weights(
        active, capped, OPTIONS, pending_ready=True, rolling_back=False, now=later(60)
    ) == (75, 25)


def test_traffic_waits_while_the_pending_apps_are_not_ready() -> None:
    active, pending = Side(100, 90, T0), Side(20, 10, T0)
    assert weights(
        active, pending, OPTIONS, pending_ready=False, rolling_back=False, now=later(300)
    ) == (90, 10)


def test_capacity_waits_for_traffic_to_catch_up() -> None:
    active, pending = Side(100, 90, T0), Side(20, 10, T0)
    step = plan(
        active,
        pending,
        OPTIONS,
        routing_ready=True,
        pending_ready=True,
        rolling_back=False,
        now=later(1),
    )
    assert step.capacity_changes == ()


def test_a_full_upgrade_step_by_step() -> None:
    active, pending = Side(100, 100), Side(initial_pending_capacity("old"), None)
    history = []
    now = T0
    for _ in range(200):
        active, pending, _changes = reconcile(active, pending, OPTIONS, now=now)
        history.append(
            (active.target_capacity, active.traffic, pending.target_capacity, pending.traffic)
        )
        if upgrade_complete(active, pending):
            break
        now += datetime.timedelta(seconds=2)  # the controller's requeue
    assert upgrade_complete(active, pending)
    # Capacity moves only when traffic caught up; the sum never exceeds 100 + maxSurgePercent.
    assert all(a + p <= 100 + OPTIONS.max_surge_percent for a, _, p, _ in history)
    # Traffic always adds up to 100 and never exceeds the capacity behind it.
    assert all(at + pt == 100 and pt <= p for _, at, p, pt in history)
    # Each traffic step is at most stepSizePercent, and at least intervalSeconds apart.
    pending_traffic = [pt for *_, pt in history]
    assert all(0 <= b - a <= 10 for a, b in itertools.pairwise(pending_traffic))
    changes_at = [i for i, (a, b) in enumerate(itertools.pairwise(pending_traffic)) if b != a]
    assert all((j - i) * 2 >= 30 for i, j in itertools.pairwise(changes_at))
    assert history[-1] == (0, 0, 100, 100)
    # The capacities passed through every maxSurgePercent step.
    assert sorted({p for _, _, p, _ in history}) == [20, 40, 60, 80, 100]
    assert sorted({a for a, _, _, _ in history}) == [0, 20, 40, 60, 80, 100]


def test_max_surge_of_100_and_a_full_step_upgrade_in_one_interval() -> None:
    options = Options(step_size_percent=100, interval_seconds=5, max_surge_percent=100)
    active, pending = Side(100, 100), Side(0, None)
    active, pending, changes = reconcile(active, pending, options, now=T0)
    assert changes == (CapacityChange(Role.PENDING, 100),)
    assert (active.traffic, pending.traffic) == (0, 100)
    active, pending, changes = reconcile(active, pending, options, now=later(2))
    assert changes == (CapacityChange(Role.ACTIVE, 0),)
    assert upgrade_complete(active, pending)


def test_the_next_migration_is_one_interval_after_the_last() -> None:
    pending = Side(20, 10, T0)
    assert next_migration(Side(100, 90), pending, OPTIONS, rolling_back=False) == later(30)
    assert next_migration(Side(100, 90), Side(20, 0), OPTIONS, rolling_back=False) is None


def test_a_weight_unchanged_keeps_its_migration_time() -> None:
    side = Side(20, 10, T0)
    assert observed_traffic(side, 10, now=later(5)) == side
    assert observed_traffic(side, 20, now=later(5)) == Side(20, 20, later(5))
    assert observed_traffic(side, None, now=later(5)) == side


@pytest.mark.parametrize(
    ("goal", "expected"),
    [("old", True), ("new", False), ("third", True)],
)
def test_a_spec_changed_mid_upgrade_rolls_back_unless_it_matches_the_new_cluster(
    goal: str, expected: bool
) -> None:
    assert rolling_back(goal_hash=goal, active_hash="old", pending_hash="new") is expected


def test_a_rollback_returns_traffic_then_capacity_to_the_active_cluster() -> None:
    # Mid-upgrade: capacities 80/40, traffic 70/30.
    active, pending = Side(80, 70, T0), Side(40, 30, T0)
    now = T0
    history = []
    for _ in range(200):
        active, pending, _ = reconcile(
            active, pending, OPTIONS, now=now, back=True, pending_ready=False
        )
        history.append(
            (active.target_capacity, active.traffic, pending.target_capacity, pending.traffic)
        )
        if rollback_complete(active, pending, pending_healthy=True):
            break
        now += datetime.timedelta(seconds=2)
    assert rollback_complete(active, pending, pending_healthy=True)
    assert history[-1] == (100, 100, 0, 0)
    assert all(at + pt == 100 and at <= a for a, at, _, pt in history)
    assert not upgrade_complete(active, pending)


def test_a_rollback_with_an_unhealthy_pending_cluster_ends_once_the_active_one_is_whole() -> None:
    assert rollback_complete(Side(100, 100), Side(40, 0), pending_healthy=False)
    assert not rollback_complete(Side(100, 100), Side(40, 0), pending_healthy=True)
    assert not rollback_complete(Side(90, 90), Side(10, 10), pending_healthy=False)


def test_capacity_never_leaves_0_to_100() -> None:
    options = Options(step_size_percent=30, interval_seconds=1, max_surge_percent=70)
    active, pending = Side(100, 100), Side(0, None)
    now = T0
    for _ in range(100):
        active, pending, _ = reconcile(active, pending, options, now=now)
        for side in (active, pending):
            assert side.target_capacity is None or 0 <= side.target_capacity <= 100
            assert side.traffic is None or 0 <= side.traffic <= 100
        if upgrade_complete(active, pending):
            break
        now += datetime.timedelta(seconds=1)
    assert upgrade_complete(active, pending)


def test_a_zero_step_never_moves_traffic() -> None:
    options = Options(step_size_percent=0, interval_seconds=1, max_surge_percent=0)
    active, pending = Side(100, 100), Side(0, 0)
    for second in range(10):
        active, pending, changes = reconcile(active, pending, options, now=later(second))
        assert changes == ()
    assert (active.traffic, pending.traffic) == (100, 0)
