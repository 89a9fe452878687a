"""Replica arithmetic of worker groups: desired, min and max Pod counts (KubeRay's `utils/util.go`).

`replicas` is always clamped into [`minReplicas`, `maxReplicas`] (the autoscaler and users may write
values outside it), a suspended group wants none, and each replica of a multi-host group is
`numOfHosts` Pods. Counts are in Pods unless a name says replicas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray_io.v1_views import WorkerGroupSpec


INT32_MAX = 2**31 - 1


def hosts_per_replica(group: WorkerGroupSpec) -> int:
    """`numOfHosts`, at least 1 (a zero would otherwise delete every worker, as KubeRay notes)."""
    return max(1, int(group.get("numOfHosts") or 1))


def is_group_suspended(group: WorkerGroupSpec) -> bool:
    return group.get("suspend") is True


def desired_group_replicas(group: WorkerGroupSpec) -> int:
    """Replicas (not Pods) the group should have: `replicas` clamped into [min, max]."""
    if is_group_suspended(group):
        return 0
    minimum = int(group.get("minReplicas") or 0)
    maximum = _max_replicas(group)
    replicas = group.get("replicas")
    if replicas is None or int(replicas) < minimum:
        return minimum
    return min(int(replicas), maximum)


def desired_group_pods(group: WorkerGroupSpec) -> int:
    return desired_group_replicas(group) * hosts_per_replica(group)


def min_group_pods(group: WorkerGroupSpec) -> int:
    return (
        0
        if is_group_suspended(group)
        else int(group.get("minReplicas") or 0) * hosts_per_replica(group)
    )


def max_group_pods(group: WorkerGroupSpec) -> int:
    return 0 if is_group_suspended(group) else _max_replicas(group) * hosts_per_replica(group)


def _max_replicas(group: WorkerGroupSpec) -> int:
    maximum = group.get("maxReplicas")
    return INT32_MAX if maximum is None else int(maximum)


def clamp_int32(value: int) -> int:
    """Keep a count within int32 (the CRD's type): unbounded maxima add up to more than that."""
    return max(-(2**31), min(INT32_MAX, value))
