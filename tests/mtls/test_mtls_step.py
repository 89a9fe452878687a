"""Specification: while the leaf certificates are not issued, the scaling plan keeps its
deletions and loses its creates without leaving "more work for the next batch" behind (which
would requeue at once, in a loop); the soonest requeue wins."""

from __future__ import annotations

from ray_operator.controllers.mtls import requeue_sooner, without_creates
from ray_operator.planning.scaling import GroupPlan, PodDeletion, ScalingPlan


def test_holding_creates_keeps_deletions_and_wants_no_pod() -> None:
    deletion = PodDeletion(name="w-1", reason="scale down")
    plan = ScalingPlan(
        create_head=True,
        delete=(deletion,),
        groups=(
            GroupPlan(
                "workers", create_replica_indices=(0, 1), missing_replicas=5, delete=(deletion,)
            ),
        ),
    )
    held = without_creates(plan)
    assert held.missing_pods == 0
    assert not held.create_head
    assert held.delete == (deletion,)
    assert held.groups[0].delete == (deletion,)
    assert held.groups[0].create_replica_indices == ()


def test_the_soonest_requeue_wins() -> None:
    assert requeue_sooner(None, None) is None
    assert requeue_sooner(30.0, None, 5.0) == 5.0
    assert requeue_sooner(0.0, 5.0) == 0.0
