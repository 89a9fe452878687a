"""The scaling decision: from the spec and the observed Pods, which Pods to create and delete.

Pure: it returns a `ScalingPlan`; the reconciler executes it (and records expectations so that a
stale cache never turns one plan into duplicate creates). The rules follow KubeRay's
`reconcilePods`:
- `suspend: true` deletes every Pod; a suspended group deletes its own;
- `upgradeStrategy.type: Recreate` deletes every Pod when the head's template hash is stale, and so
  does a changed `ray.io/restart` annotation (ours);
- a head or worker Pod that failed (or whose Ray container died under restartPolicy Never) is
  replaced;
- `scaleStrategy.workersToDelete` is deleted exactly, then cleared;
- the group is brought to `replicas` clamped into [min, max]; with the in-tree autoscaler on,
  only the autoscaler picks Pods to remove, so surplus Pods stay (KubeRay's default).
Ours, beyond KubeRay: a broken worker's replacement is planned in the same pass as its deletion
(KubeRay waits a pass); scale-down removes not-ready Pods first, then the newest; Pods already
terminating are neither counted nor deleted again; workers of a group removed from the spec are
deleted; `workersToDelete` names that are not Pods of the group are reported rather than deleted
(KubeRay deletes any Pod of that name in the namespace).

Bounded: a plan costs O(observed Pods + `max_pod_creates`), never O(replicas). It counts the
missing replicas of a group as a number and names replica indices only for the first Pods to
create, at most `max_pod_creates` of them (rounded up to whole multi-host replicas), so
`replicas: 2147483647` plans as cheaply as `replicas: 3`; the reconciler plans again after each
batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ray_operator.spec import kuberay_names as names
from ray_operator.spec import pods as observed
from ray_operator.spec.hashing import GoDecodeError, pod_template_hash
from ray_operator.spec.raycluster import (
    ClusterLike,
    as_cluster_manifest,
    cluster_annotations,
    is_autoscaling_enabled,
    is_suspended,
    spec,
    worker_groups,
)
from ray_operator.spec.replicas import desired_group_pods, hosts_per_replica, is_group_suspended

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster, WorkerGroupSpec

# KubeRay's annotation for RayJob-owned clusters: once provisioned, a lost head is not recreated.
DISABLE_PROVISIONED_HEAD_RESTART = "ray.io/disable-provisioned-head-restart"
# How many Pods a plan names for creation when the caller gives no bound (the reconciler passes
# its batch size): a plan never lists one entry per missing replica.
DEFAULT_MAX_POD_CREATES = 1000
WORKERS_TO_DELETE_REASON = "listed in scaleStrategy.workersToDelete"


@dataclasses.dataclass(frozen=True)
class PodDeletion:
    """One Pod to delete, with the reason an Event should give.

    `requested`: named in `scaleStrategy.workersToDelete`. The list is cleared once acted on, so
    these deletions are issued together (they are bounded by the Pods that exist); the others
    may be spread over several batches, each re-planned from the cache.
    """

    name: str
    reason: str
    requested: bool = False


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    """What to do in one worker group.

    `missing_replicas` replicas are missing in all; `create_replica_indices` names the lowest
    free indices for the first of them, only as many as the plan's `max_pod_creates` allows.
    Each entry is one replica: a Pod for single-host groups, `hosts_per_replica` Pods
    (host 0..n-1) for multi-host ones.
    """

    group_name: str
    hosts_per_replica: int = 1
    create_replica_indices: tuple[int, ...] = ()
    missing_replicas: int = 0
    delete: tuple[PodDeletion, ...] = ()
    clear_workers_to_delete: bool = False
    unknown_workers_to_delete: tuple[str, ...] = ()

    @property
    def missing_pods(self) -> int:
        return self.missing_replicas * self.hosts_per_replica


@dataclasses.dataclass(frozen=True)
class ScalingPlan:
    """Everything the reconciler should create and delete in this pass."""

    delete_all_reason: str | None = None
    create_head: bool = False
    delete: tuple[PodDeletion, ...] = ()
    extra_head_pods: tuple[str, ...] = ()
    groups: tuple[GroupPlan, ...] = ()

    @property
    def missing_pods(self) -> int:
        """Every Pod this plan wants created, also those beyond the ones it names (a count)."""
        return int(self.create_head) + sum(g.missing_pods for g in self.groups)

    @property
    def is_noop(self) -> bool:
        return (
            self.delete_all_reason is None
            and not self.create_head
            and not self.delete
            and all(
                not g.missing_replicas and not g.delete and not g.clear_workers_to_delete
                for g in self.groups
            )
        )


def plan_scaling(
    cluster: ClusterLike,
    *,
    pods: Sequence[Pod],
    provisioned: bool = False,
    max_pod_creates: int = DEFAULT_MAX_POD_CREATES,
) -> ScalingPlan:
    """The plan for `cluster` given all its observed Pods; `provisioned`: RayClusterProvisioned.

    It names at most `max_pod_creates` Pods to create (the head first, then the groups in
    order; a multi-host replica is never split, so a group's first replica may exceed it).
    """
    manifest = as_cluster_manifest(cluster)
    live = [pod for pod in pods if not observed.is_terminating(pod)]
    reason = _delete_all_reason(manifest, live)
    if reason is not None:
        deletions = tuple(PodDeletion(observed.pod_name(pod), reason) for pod in live)
        return ScalingPlan(delete_all_reason=reason, delete=deletions)
    plan = _plan_head(manifest, pods, provisioned=provisioned)
    room = max_pod_creates - int(plan.create_head)
    groups = []
    for group in worker_groups(manifest):
        members = [pod for pod in live if observed.in_group(pod, group["groupName"])]
        group_plan = _plan_group(manifest, group, members, room=room)
        room -= len(group_plan.create_replica_indices) * group_plan.hosts_per_replica
        groups.append(group_plan)
    return dataclasses.replace(
        plan, groups=tuple(groups), delete=plan.delete + _orphans(manifest, live)
    )


def _orphans(cluster: RayCluster, live: Sequence[Pod]) -> tuple[PodDeletion, ...]:
    """Workers of a group that was removed from the spec (KubeRay leaves them running forever)."""
    known = {str(group.get("groupName")) for group in worker_groups(cluster)}
    return tuple(
        PodDeletion(observed.pod_name(pod), f"worker group {group} is no longer in the spec")
        for pod in live
        if observed.is_worker(pod)
        and (group := observed.pod_labels(pod).get(names.GROUP_LABEL, "")) not in known
    )


def _delete_all_reason(cluster: RayCluster, live: Sequence[Pod]) -> str | None:
    if is_suspended(spec(cluster)):
        # Checked even with no Pods left: a suspended cluster must not get a new head.
        return "spec.suspend is true"
    if not live:
        return None
    heads = [pod for pod in live if observed.is_head(pod)]
    if _recreate_upgrade_due(cluster, heads):
        return "the Pod template changed and upgradeStrategy.type is Recreate"
    wanted = cluster_annotations(cluster).get(names.RESTART_ANNOTATION)
    pod_values = {
        ((p.get("metadata") or {}).get("annotations") or {}).get(names.RESTART_ANNOTATION)
        for p in live
    }
    if wanted is not None and pod_values != {wanted}:
        return f"annotation {names.RESTART_ANNOTATION} changed to {wanted!r}"
    return None


def _recreate_upgrade_due(cluster: RayCluster, heads: Sequence[Pod]) -> bool:
    """KubeRay's `shouldRecreatePodsForUpgrade`: the first head's recorded hash differs from the
    spec's. A head without the annotation predates it: left be. A head stamped by another KubeRay
    version is not recreated either (KubeRay re-stamps it instead: its hash may differ only because
    that version's Go types write the spec differently)."""
    strategy = (spec(cluster).get("upgradeStrategy") or {}).get("type")
    if strategy != "Recreate" or not heads:
        return False
    annotations = (heads[0].get("metadata") or {}).get("annotations") or {}
    version = annotations.get(names.KUBERAY_VERSION_ANNOTATION, "")
    if version and version != names.KUBERAY_VERSION:
        return False
    recorded = str(annotations.get(names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION) or "")
    if not recorded:
        return False
    try:
        return recorded != pod_template_hash(cluster)
    except GoDecodeError:
        return False  # KubeRay logs the error and skips the comparison


def _head_to_keep_first(pod: Pod) -> tuple[bool, str, str]:
    # No creationTimestamp: a create not yet confirmed by the cache, the newest of all.
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "~")
    return not observed.is_running_and_ready(pod), created, observed.pod_name(pod)


def _plan_head(cluster: RayCluster, pods: Sequence[Pod], *, provisioned: bool) -> ScalingPlan:
    heads = [pod for pod in pods if observed.is_head(pod) and not observed.is_terminating(pod)]
    terminating = any(observed.is_head(pod) and observed.is_terminating(pod) for pod in pods)
    if len(heads) > 1:
        # Both owned by this cluster: a create whose answer was lost across an operator restart,
        # or a cache that lagged (issue 12, finding 5). The head Service would send workers to
        # either, so one is kept — a ready one, else the oldest — and the others are deleted.
        keep, *extra = sorted(heads, key=_head_to_keep_first)
        reason = f"a second head Pod of this cluster (keeping {observed.pod_name(keep)})"
        return ScalingPlan(
            extra_head_pods=tuple(observed.pod_name(p) for p in heads),
            delete=tuple(PodDeletion(observed.pod_name(p), reason) for p in extra),
        )
    if len(heads) == 1:
        verdict = observed.replacement_verdict(heads[0])
        deletions = (
            (PodDeletion(observed.pod_name(heads[0]), verdict.reason),) if verdict.delete else ()
        )
        return ScalingPlan(delete=deletions)
    skip = (
        provisioned and cluster_annotations(cluster).get(DISABLE_PROVISIONED_HEAD_RESTART) == "true"
    )
    # While the old head is still terminating, a new one would briefly make two.
    return ScalingPlan(create_head=not skip and not terminating)


def _plan_group(
    cluster: RayCluster, group: WorkerGroupSpec, pods: Sequence[Pod], *, room: int
) -> GroupPlan:
    """The group's plan; `room`: how many more Pods the plan may name for creation."""
    name = str(group["groupName"])
    if is_group_suspended(group):
        deletions = tuple(
            PodDeletion(observed.pod_name(p), f"worker group {name} is suspended") for p in pods
        )
        return GroupPlan(group_name=name, delete=deletions)
    if hosts_per_replica(group) > 1:
        return _plan_multi_host_group(cluster, group, pods, room=room)
    return _plan_single_host_group(cluster, group, pods, room=room)


def _plan_single_host_group(
    cluster: RayCluster, group: WorkerGroupSpec, pods: Sequence[Pod], *, room: int
) -> GroupPlan:
    """Replace broken Pods, honour workersToDelete, then create or remove Pods to the target."""
    name = str(group["groupName"])
    deletions = {
        observed.pod_name(p): v.reason
        for p in pods
        if (v := observed.replacement_verdict(p)).delete
    }
    requested = list(group.get("scaleStrategy", {}).get("workersToDelete") or [])
    by_name = {observed.pod_name(p): p for p in pods}
    for pod_name in requested:
        if pod_name in by_name:
            deletions.setdefault(pod_name, WORKERS_TO_DELETE_REASON)
    remaining = [p for p in pods if observed.pod_name(p) not in deletions]
    surplus = len(remaining) - desired_group_pods(group)
    if surplus > 0 and not is_autoscaling_enabled(spec(cluster)):
        for pod in _scale_down_order(remaining)[:surplus]:
            deletions[observed.pod_name(pod)] = (
                f"scaling worker group {name} down to {desired_group_pods(group)} Pods"
            )
    in_use = _replica_indices(p for p in remaining if observed.pod_name(p) not in deletions)
    missing = max(0, -surplus)
    listed = set(requested)
    return GroupPlan(
        group_name=name,
        create_replica_indices=_free_indices(in_use, _replicas_that_fit(missing, 1, room)),
        missing_replicas=missing,
        delete=tuple(
            PodDeletion(pod, why, requested=pod in listed) for pod, why in deletions.items()
        ),
        clear_workers_to_delete=bool(requested),
        unknown_workers_to_delete=tuple(p for p in requested if p not in by_name),
    )


def _plan_multi_host_group(
    cluster: RayCluster, group: WorkerGroupSpec, pods: Sequence[Pod], *, room: int
) -> GroupPlan:
    """As for single-host groups, but a replica of `numOfHosts` Pods lives and dies as one."""
    name, hosts = str(group["groupName"]), hosts_per_replica(group)
    replicas: dict[str, list[Pod]] = {}
    for pod in pods:
        replicas.setdefault(_replica_name(pod), []).append(pod)
    doomed = _broken_replicas(replicas, hosts=hosts)
    requested = list(group.get("scaleStrategy", {}).get("workersToDelete") or [])
    by_name = {observed.pod_name(p): p for p in pods}
    for pod_name in (p for p in requested if p in by_name):
        doomed.setdefault(_replica_name(by_name[pod_name]), WORKERS_TO_DELETE_REASON)
    healthy = {replica: members for replica, members in replicas.items() if replica not in doomed}
    wanted = desired_group_pods(group) // hosts
    surplus = len(healthy) - wanted
    if surplus > 0 and not is_autoscaling_enabled(spec(cluster)):
        for replica in sorted(healthy, key=lambda r: _replica_scale_down_key(healthy[r]))[:surplus]:
            doomed[replica] = f"scaling worker group {name} down to {wanted} replicas"
    in_use = _replica_indices(members[0] for r, members in healthy.items() if r not in doomed)
    deletions = [
        PodDeletion(observed.pod_name(p), why, requested=why == WORKERS_TO_DELETE_REASON)
        for r, why in doomed.items()
        for p in replicas[r]
    ]
    missing = max(0, -surplus)
    return GroupPlan(
        group_name=name,
        hosts_per_replica=hosts,
        create_replica_indices=_free_indices(in_use, _replicas_that_fit(missing, hosts, room)),
        missing_replicas=missing,
        delete=tuple(deletions),
        clear_workers_to_delete=bool(requested),
        unknown_workers_to_delete=tuple(p for p in requested if p not in by_name),
    )


def _replica_name(pod: Pod) -> str:
    return observed.pod_labels(pod).get(names.WORKER_REPLICA_NAME_LABEL, "")


def _broken_replicas(replicas: Mapping[str, list[Pod]], *, hosts: int) -> dict[str, str]:
    """Replicas to delete whole: incomplete ones (a host was lost) and those with a failed host.

    Pods without a replica name cannot belong to a replica at all; KubeRay ignores them, we
    count them as one broken replica so they do not linger forever.
    """
    broken = {}
    for replica, members in replicas.items():
        if not replica or len(members) != hosts:
            label = replica or "(unlabelled)"
            broken[replica] = f"multi-host replica {label} has {len(members)} of {hosts} hosts"
            continue
        verdicts = [observed.replacement_verdict(p) for p in members]
        failed = next((v for v in verdicts if v.delete), None)
        if failed is not None:
            broken[replica] = f"multi-host replica {replica} lost a host: {failed.reason}"
    return broken


def _scale_down_order(pods: Sequence[Pod]) -> list[Pod]:
    """Not-ready Pods first, then the newest (they hold the least work), then by name."""
    return sorted(pods, key=_pod_scale_down_key)


def _pod_scale_down_key(pod: Pod) -> tuple[bool, str, str]:
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    # Negate the ordering of strings by inverting characters: newest (largest) timestamp first.
    newest_first = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return observed.is_running_and_ready(pod), newest_first, observed.pod_name(pod)


def _replica_scale_down_key(members: Sequence[Pod]) -> tuple[bool, int]:
    ready = all(observed.is_running_and_ready(p) for p in members)
    return ready, -_replica_index(members[0], default=0)


def _replica_indices(pods: Any) -> set[int]:
    return {index for pod in pods if (index := _replica_index(pod, default=-1)) >= 0}


def _replica_index(pod: Pod, *, default: int) -> int:
    try:
        return int(observed.pod_labels(pod).get(names.WORKER_REPLICA_INDEX_LABEL, default))
    except ValueError:
        return default


def _replicas_that_fit(missing: int, hosts: int, room: int) -> int:
    """How many of `missing` replicas of `hosts` Pods to name within `room` Pods: whole replicas,
    and at least one while there is any room (a multi-host replica lives and dies whole)."""
    if room <= 0:
        return 0
    return min(missing, max(1, room // hosts))


def _free_indices(in_use: set[int], count: int) -> tuple[int, ...]:
    """The `count` lowest replica indices not in use (KubeRay fills gaps from 0)."""
    result: list[int] = []
    candidate = 0
    while len(result) < count:
        if candidate not in in_use:
            result.append(candidate)
        candidate += 1
    return tuple(result)
