"""The scaling decision: which Pods to create and delete for a spec and the observed Pods."""

from __future__ import annotations

import tracemalloc
from typing import Any

from ray_io.v1 import RayCluster
from ray_operator.planning.scaling import DEFAULT_MAX_POD_CREATES, ScalingPlan, plan_scaling
from ray_operator.spec.hashing import pod_template_hash

from tests.builders.clusters import raycluster, worker_group
from tests.status.observed import head, pod


def _group(plan: ScalingPlan, name: str = "workers") -> Any:
    return next(g for g in plan.groups if g.group_name == name)


def _deleted(plan: ScalingPlan, name: str = "workers") -> set[str]:
    return {d.name for d in _group(plan, name).delete}


def _workers(count: int, *, group: str = "workers", **kwargs: Any) -> list[dict[str, Any]]:
    return [
        pod(f"w{i}", group=group, labels={"ray.io/worker-group-replica-index": str(i)}, **kwargs)
        for i in range(count)
    ]


def test_new_cluster_creates_head_and_workers() -> None:
    plan = plan_scaling(raycluster(groups=[worker_group(replicas=3)]), pods=[])
    assert plan.create_head
    assert _group(plan).create_replica_indices == (0, 1, 2)


def test_converged_cluster_is_a_noop() -> None:
    assert plan_scaling(raycluster(), pods=[head(), *_workers(1)]).is_noop


def test_replicas_are_clamped_into_min_and_max() -> None:
    above = plan_scaling(
        raycluster(groups=[worker_group(replicas=10, max_replicas=3)]), pods=[head()]
    )
    assert len(_group(above).create_replica_indices) == 3
    below = plan_scaling(
        raycluster(groups=[worker_group(replicas=0, min_replicas=2)]), pods=[head()]
    )
    assert len(_group(below).create_replica_indices) == 2


def test_new_workers_fill_the_lowest_free_replica_indices() -> None:
    pods = [head(), pod("w1", labels={"ray.io/worker-group-replica-index": "1"})]
    plan = plan_scaling(raycluster(groups=[worker_group(replicas=3)]), pods=pods)
    assert _group(plan).create_replica_indices == (0, 2)


def test_scale_down_deletes_exactly_the_workers_to_delete() -> None:
    group = worker_group(replicas=1, scaleStrategy={"workersToDelete": ["w0", "w2"]})
    plan = plan_scaling(
        raycluster(groups=[group], enableInTreeAutoscaling=True), pods=[head(), *_workers(3)]
    )
    assert _deleted(plan) == {"w0", "w2"}
    assert _group(plan).clear_workers_to_delete
    assert _group(plan).create_replica_indices == ()


def test_workers_to_delete_are_deleted_even_if_replicas_did_not_drop() -> None:
    group = worker_group(replicas=2, scaleStrategy={"workersToDelete": ["w1"]})
    plan = plan_scaling(raycluster(groups=[group]), pods=[head(), *_workers(2)])
    assert _deleted(plan) == {"w1"}
    assert _group(plan).create_replica_indices == (1,)


def test_unknown_workers_to_delete_are_reported_not_deleted() -> None:
    group = worker_group(replicas=1, scaleStrategy={"workersToDelete": ["somebody-else"]})
    plan = plan_scaling(raycluster(groups=[group]), pods=[head(), *_workers(1)])
    assert _deleted(plan) == set()
    assert _group(plan).unknown_workers_to_delete == ("somebody-else",)


def test_scale_down_without_autoscaler_prefers_not_ready_pods() -> None:
    pods = [head(), *_workers(2), pod("sick", ready=False)]
    plan = plan_scaling(raycluster(groups=[worker_group(replicas=2)]), pods=pods)
    assert _deleted(plan) == {"sick"}


def test_scale_down_then_prefers_the_newest_pods() -> None:
    pods = [head()] + [
        pod(f"w{i}", metadata={"creationTimestamp": f"2026-11-23T05:0{i}:00Z"}) for i in range(4)
    ]
    plan = plan_scaling(raycluster(groups=[worker_group(replicas=2)]), pods=pods)
    assert _deleted(plan) == {"w3", "w2"}


def test_autoscaler_alone_decides_which_pods_to_remove() -> None:
    plan = plan_scaling(
        raycluster(groups=[worker_group(replicas=1)], enableInTreeAutoscaling=True),
        pods=[head(), *_workers(3)],
    )
    assert _deleted(plan) == set()


def test_failed_workers_are_replaced() -> None:
    pods = [head(), pod("w0", phase="Failed", ready=False)]
    plan = plan_scaling(raycluster(), pods=pods)
    assert _deleted(plan) == {"w0"}
    assert _group(plan).create_replica_indices == (0,)


def test_dead_ray_container_with_restart_never_is_replaced() -> None:
    dead = pod(
        "w0",
        spec={"restartPolicy": "Never"},
        status={
            "containerStatuses": [{"name": "ray", "state": {"terminated": {"reason": "OOMKilled"}}}]
        },
    )
    assert _deleted(plan_scaling(raycluster(), pods=[head(), dead])) == {"w0"}


def test_dead_ray_container_that_will_restart_is_kept() -> None:
    restarting = pod(
        "w0",
        status={
            "containerStatuses": [{"name": "ray", "state": {"terminated": {"reason": "Error"}}}]
        },
    )
    assert _deleted(plan_scaling(raycluster(), pods=[head(), restarting])) == set()


def test_terminating_pods_are_not_counted_nor_deleted_again() -> None:
    going = pod("w0", metadata={"deletionTimestamp": "2026-11-23T05:00:00Z"})
    plan = plan_scaling(raycluster(), pods=[head(), going])
    assert _deleted(plan) == set()
    assert _group(plan).create_replica_indices == (0,)


def test_failed_head_is_deleted_and_not_recreated_in_the_same_pass() -> None:
    plan = plan_scaling(raycluster(), pods=[head(phase="Failed", ready=False), *_workers(1)])
    assert [d.name for d in plan.delete] == ["demo-head-aaaaa"]
    assert not plan.create_head


def test_new_head_waits_until_the_old_one_is_gone() -> None:
    going = head(metadata={"deletionTimestamp": "2026-11-23T05:00:00Z"})
    assert not plan_scaling(raycluster(), pods=[going]).create_head


def test_of_two_head_pods_the_ready_one_is_kept_and_the_other_deleted() -> None:
    plan = plan_scaling(raycluster(), pods=[head("h1", ready=False), head("h2")])
    assert plan.extra_head_pods == ("h1", "h2")
    assert [d.name for d in plan.delete] == ["h1"]
    assert "keeping h2" in plan.delete[0].reason
    assert not plan.create_head


def test_suspend_deletes_everything_and_creates_nothing() -> None:
    plan = plan_scaling(raycluster(suspend=True), pods=[head(), *_workers(2)])
    assert plan.delete_all_reason == "spec.suspend is true"
    assert {d.name for d in plan.delete} == {"demo-head-aaaaa", "w0", "w1"}
    assert not plan_scaling(raycluster(suspend=True), pods=[]).create_head


def test_suspended_group_deletes_its_pods() -> None:
    plan = plan_scaling(
        raycluster(groups=[worker_group(suspend=True)]), pods=[head(), *_workers(2)]
    )
    assert _deleted(plan) == {"w0", "w1"}


def test_recreate_strategy_deletes_all_pods_when_the_template_changed() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    stale = head(metadata={"annotations": {"ray.io/upgrade-strategy-recreate-hash": "OLD"}})
    assert plan_scaling(cluster, pods=[stale, *_workers(1)]).delete_all_reason is not None
    current = head(
        metadata={
            "annotations": {"ray.io/upgrade-strategy-recreate-hash": pod_template_hash(cluster)}
        }
    )
    assert plan_scaling(cluster, pods=[current, *_workers(1)]).delete_all_reason is None


def test_default_strategy_leaves_running_pods_alone() -> None:
    stale = head(metadata={"annotations": {"ray.io/upgrade-strategy-recreate-hash": "OLD"}})
    assert plan_scaling(raycluster(), pods=[stale, *_workers(1)]).delete_all_reason is None


def test_restart_annotation_restarts_pods_that_lack_the_new_value() -> None:
    cluster = raycluster()
    cluster["metadata"]["annotations"] = {"ray.io/restart": "2"}
    old = [head(metadata={"annotations": {"ray.io/restart": "1"}}), *_workers(1)]
    assert (
        plan_scaling(cluster, pods=old).delete_all_reason
        == "annotation ray.io/restart changed to '2'"
    )
    new = [
        head(metadata={"annotations": {"ray.io/restart": "2"}}),
        pod("w0", metadata={"annotations": {"ray.io/restart": "2"}}),
    ]
    assert plan_scaling(cluster, pods=new).delete_all_reason is None


def _replica(name: str, index: int, hosts: int, **kwargs: Any) -> list[dict[str, Any]]:
    labels = {
        "ray.io/worker-group-replica-name": name,
        "ray.io/worker-group-replica-index": str(index),
    }
    return [pod(f"{name}-{h}", labels=labels, **kwargs) for h in range(hosts)]


def test_multi_host_group_creates_whole_replicas() -> None:
    plan = plan_scaling(
        raycluster(groups=[worker_group(replicas=2, numOfHosts=4)]),
        pods=[head(), *_replica("r0", 0, 4)],
    )
    group = _group(plan)
    assert (group.create_replica_indices, group.hosts_per_replica) == ((1,), 4)


def test_multi_host_replica_missing_a_host_is_deleted_whole() -> None:
    pods = [head(), *_replica("r0", 0, 2), *_replica("r1", 1, 1)]
    plan = plan_scaling(raycluster(groups=[worker_group(replicas=2, numOfHosts=2)]), pods=pods)
    assert _deleted(plan) == {"r1-0"}
    assert _group(plan).create_replica_indices == (1,)


def test_multi_host_workers_to_delete_removes_the_whole_replica() -> None:
    group = worker_group(replicas=1, numOfHosts=2, scaleStrategy={"workersToDelete": ["r1-1"]})
    plan = plan_scaling(
        raycluster(groups=[group], enableInTreeAutoscaling=True),
        pods=[head(), *_replica("r0", 0, 2), *_replica("r1", 1, 2)],
    )
    assert _deleted(plan) == {"r1-0", "r1-1"}


def test_multi_host_scale_down_removes_the_highest_replica() -> None:
    pods = [head(), *_replica("r0", 0, 2), *_replica("r1", 1, 2)]
    plan = plan_scaling(raycluster(groups=[worker_group(replicas=1, numOfHosts=2)]), pods=pods)
    assert _deleted(plan) == {"r1-0", "r1-1"}


def test_typed_clusters_plan_like_their_manifests() -> None:
    cluster = raycluster(groups=[worker_group(replicas=3)])
    pods = [head(), *_workers(1)]
    assert plan_scaling(RayCluster.model_validate(cluster), pods=pods) == plan_scaling(
        cluster, pods=pods
    )


def test_workers_of_a_removed_group_are_deleted() -> None:
    pods = [head(), *_workers(1), pod("old-1", group="retired")]
    plan = plan_scaling(raycluster(), pods=pods)
    assert [(d.name, d.reason) for d in plan.delete] == [
        ("old-1", "worker group retired is no longer in the spec")
    ]


# --- bounds: a plan costs O(observed Pods + its creation bound), never O(replicas) -----------

INT32_MAX = 2**31 - 1


def _peak_bytes_of(action: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = action()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_int32_max_replicas_plan_only_a_bounded_number_of_pods() -> None:
    group = worker_group(replicas=INT32_MAX, max_replicas=INT32_MAX)
    plan, peak = _peak_bytes_of(
        lambda: plan_scaling(raycluster(groups=[group]), pods=[], max_pod_creates=32)
    )
    assert plan.create_head
    assert _group(plan).create_replica_indices == tuple(range(31))  # the head takes one
    assert _group(plan).missing_replicas == INT32_MAX
    assert plan.missing_pods == INT32_MAX + 1
    assert peak < 256 * 1024  # the old plan listed 2^31 indices: tens of gigabytes


def test_without_a_bound_a_plan_still_names_at_most_the_default_number_of_pods() -> None:
    group = worker_group(replicas=INT32_MAX, max_replicas=INT32_MAX)
    plan = plan_scaling(raycluster(groups=[group]), pods=[head()])
    assert len(_group(plan).create_replica_indices) == DEFAULT_MAX_POD_CREATES
    assert _group(plan).missing_replicas == INT32_MAX


def test_int32_max_multi_host_replicas_plan_whole_replicas_within_the_bound() -> None:
    group = worker_group(replicas=INT32_MAX, max_replicas=INT32_MAX, numOfHosts=8)
    plan = plan_scaling(raycluster(groups=[group]), pods=[head()], max_pod_creates=32)
    assert _group(plan).create_replica_indices == (0, 1, 2, 3)
    assert plan.missing_pods == INT32_MAX * 8


def test_a_multi_host_replica_larger_than_the_bound_is_planned_whole() -> None:
    group = worker_group(replicas=2, numOfHosts=100)
    plan = plan_scaling(raycluster(groups=[group]), pods=[head()], max_pod_creates=32)
    assert (_group(plan).create_replica_indices, _group(plan).hosts_per_replica) == ((0,), 100)
    assert _group(plan).missing_replicas == 2


def test_the_creation_bound_is_shared_by_the_head_and_the_groups_in_order() -> None:
    groups = [
        worker_group("first", replicas=20, max_replicas=20),
        worker_group("second", replicas=20, max_replicas=20),
        worker_group("third", replicas=20, max_replicas=20),
    ]
    plan = plan_scaling(raycluster(groups=groups), pods=[], max_pod_creates=32)
    named = [len(_group(plan, g["groupName"]).create_replica_indices) for g in groups]
    assert named == [20, 11, 0]
    assert plan.missing_pods == 61


def test_a_bounded_plan_still_fills_the_lowest_free_indices_first() -> None:
    pods = [head(), pod("w1", labels={"ray.io/worker-group-replica-index": "1"})]
    plan = plan_scaling(
        raycluster(groups=[worker_group(replicas=INT32_MAX, max_replicas=INT32_MAX)]),
        pods=pods,
        max_pod_creates=3,
    )
    assert _group(plan).create_replica_indices == (0, 2, 3)
    assert _group(plan).missing_replicas == INT32_MAX - 1


def test_deletions_named_in_workers_to_delete_are_marked_requested() -> None:
    group = worker_group(replicas=1, scaleStrategy={"workersToDelete": ["w0"]})
    plan = plan_scaling(raycluster(groups=[group]), pods=[head(), *_workers(3)])
    assert {(d.name, d.requested) for d in _group(plan).delete} == {("w0", True), ("w1", False)}
