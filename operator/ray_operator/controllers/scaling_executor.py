"""Carrying out a RayCluster's scaling plan: the Pod creates and deletes, their Events.

The plan is pure (`planning/scaling.py` decides which Pods to create and delete); this step only
executes it against the API, within one reconcile's `Batch`: deletions first, then creates, and
creates only once every planned deletion was issued (the plan counted on them). Before each
create the cache is asked whether the RayCluster is still wanted (same uid, not being deleted),
so a delete stops a scale-up within the writes already in flight.

A Pod create whose answer was lost (timeout, reset, 5xx) is kept as "maybe created" under its
name until the cache shows it or the entry expires, so no duplicate is made. What was done is
told in one Event per kind of action (a 100-Pod scale-up is one Event), and the handled
`workersToDelete` lists are cleared with a compare-and-clear JSON patch, as KubeRay clears them.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ray_operator.builders.pods import PodOptions, build_head_pod, build_worker_pod
from ray_operator.controllers.owned_objects import Batch, OwnedObjects, run_bounded
from ray_operator.planning.scaling import GroupPlan, PodDeletion, ScalingPlan
from ray_operator.runtime.client import PatchType
from ray_operator.runtime.errors import (
    ApiError,
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
    TransportError,
)
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import POD, RAY_CLUSTER, ObjectKey
from ray_operator.spec.object_names import random_suffix, replica_group_name
from ray_operator.status import raycluster as cluster_status

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]

# Pod names listed in one summarising Event before "and N more".
NAMES_PER_EVENT = 10
# The length of `random_suffix()`, the end of every Pod name we generate.
RANDOM_SUFFIX_LENGTH = 5

T = TypeVar("T")


@dataclass
class Outcome:
    """What one reconcile did: what the status must reflect and the Events must tell."""

    failure: cluster_status.ReplicaFailure | None = None
    # Event reason -> what happened, e.g. "CreatedWorkerPod" -> ["ns/a", "ns/b"]
    done: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def record(self, reason: str, noun: str, name: str) -> None:
        self.done.setdefault((reason, noun), []).append(name)


class ScalingExecutor:
    """Creates and deletes a RayCluster's Pods as its scaling plan says; one per controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        events: EventRecorder,
        objects: OwnedObjects,
        pod_options: PodOptions,
        is_wanted: Callable[[ObjectKey, str], bool],
    ) -> None:
        self._client = client
        self._events = events
        self._objects = objects
        self._pod_options = pod_options
        self._is_wanted = is_wanted
        """Whether the cache still shows this RayCluster (key, uid) and not being deleted."""

    async def carry_out_scaling_plan(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        plan: ScalingPlan,
        outcome: Outcome,
        *,
        batch: Batch | None = None,
    ) -> None:
        """Deletions first, then creates, within one batch; creates only once every planned
        deletion was issued (the plan counted on them), and only while the cluster is wanted."""
        batch = batch or Batch()
        if plan.extra_head_pods:
            message = (
                f"found {len(plan.extra_head_pods)} head Pods "
                f"({', '.join(plan.extra_head_pods)}); expected exactly one"
            )
            self._events.record(cluster, reason="MultipleHeadPods", message=message, type="Warning")
        pods = {p["metadata"]["name"]: p for p in self._objects.observed_pods(key, cluster)}
        deletions = [
            d for d in (*plan.delete, *(d for g in plan.groups for d in g.delete)) if d.name in pods
        ]
        # workersToDelete is cleared after this reconcile: its Pods all go now (they exist, so
        # they are bounded); the other deletions are re-planned batch by batch.
        requested = [d for d in deletions if d.requested]
        batch.spend(len(requested))
        chosen = [*requested, *batch.take([d for d in deletions if not d.requested])]
        await run_bounded(self._delete_pod(key, cluster, pods[d.name], d, outcome) for d in chosen)
        self.report_unknown_workers_to_delete(cluster, plan)
        if batch.work_left:
            return  # Creates wait for the planned deletions: the plan counted on them.
        head, replicas = _creates_that_fit(plan, batch)
        creates: list[Iterable[Callable[[], Object]]] = []
        if head:
            creates.append(
                [lambda: build_head_pod(cluster, suffix=random_suffix(), options=self._pod_options)]
            )
        creates += (self._worker_pod_builders(cluster, group, [index]) for group, index in replicas)
        await run_bounded(
            self._create_pod(key, cluster, build, outcome)
            for build in self._while_wanted(
                key, cluster["metadata"]["uid"], itertools.chain.from_iterable(creates)
            )
        )

    def _while_wanted(self, key: ObjectKey, uid: str, items: Iterable[T]) -> Iterator[T]:
        """`items`, asking the cache before each one whether the RayCluster is still wanted:
        a delete stops a scale-up within the creates already in flight."""
        for item in items:
            if not self._is_wanted(key, uid):
                logger.info("%s: deleted or being deleted; creating nothing more", key)
                return
            yield item

    def report_unknown_workers_to_delete(self, cluster: RayCluster, plan: ScalingPlan) -> None:
        """One Warning Event per cluster naming at most NAMES_PER_EVENT of the ignored names.

        The same list gives the same message on every reconcile, so the recorder bumps one
        Event's count instead of writing one Event per name and retry (issue 12, finding 9).
        """
        total = sum(len(group.unknown_workers_to_delete) for group in plan.groups)
        if not total:
            return
        shown = list(
            itertools.islice(
                (
                    f"{group.group_name}/{unknown}"
                    for group in plan.groups
                    for unknown in group.unknown_workers_to_delete
                ),
                NAMES_PER_EVENT,
            )
        )
        more = f" and {total - len(shown)} more" if total > len(shown) else ""
        self._events.record(
            cluster,
            reason="UnknownWorkerToDelete",
            type="Warning",
            message=f"scaleStrategy.workersToDelete names {total} Pods that are not workers "
            f"of their group (group/name: {', '.join(shown)}{more}); ignored",
        )

    def record_what_was_done(self, cluster: RayCluster, outcome: Outcome) -> None:
        """One Event per kind of action, naming the Pods (a 100-Pod scale-up is one Event)."""
        for (reason, noun), names_done in outcome.done.items():
            if len(names_done) == 1:
                message = f"{reason_verb(reason)} {noun} {names_done[0]}"
            else:
                shown = ", ".join(names_done[:NAMES_PER_EVENT])
                more = len(names_done) - NAMES_PER_EVENT
                shown += f" and {more} more" if more > 0 else ""
                message = f"{reason_verb(reason)} {len(names_done)} {noun}s: {shown}"
            self._events.record(cluster, reason=reason, message=message)

    async def clear_workers_to_delete(
        self, key: ObjectKey, cluster: RayCluster, plan: ScalingPlan
    ) -> None:
        """Empty `workersToDelete` of groups whose listed Pods were handled (as KubeRay does).

        Compare-and-clear: the patch tests that each list still holds exactly the names we acted
        on. Ray's autoscaler may have written a new list since our cache read (issue 12, finding
        11); clearing that one would lose its terminate request, and the shrunk `replicas`
        would then delete Pods it did not choose. When the test fails the API refuses the whole
        patch, and the autoscaler's write re-enqueues the cluster: the next reconcile acts on
        the new list.
        """
        operations = workers_to_delete_clearing(cluster, plan)
        if not operations:
            return
        try:
            await self._client.patch(
                RAY_CLUSTER,
                key.name,
                operations,
                namespace=key.namespace,
                patch_type=PatchType.JSON,
            )
        except (Conflict, NotFound, Invalid) as error:
            # 422: a test failed (the list or the groups changed); 409/404: a concurrent write.
            logger.info("%s: workersToDelete changed meanwhile, not cleared: %s", key, error)

    def _worker_pod_builders(
        self, cluster: RayCluster, group: GroupPlan, indices: Iterable[int]
    ) -> Iterator[Callable[[], Object]]:
        """Builders of the Pods of these replicas, made one at a time as they are taken (a
        replica of `numOfHosts` Pods never exists as a list)."""
        for index in indices:
            replica = (
                replica_group_name(group.group_name, suffix=random_suffix())
                if group.hosts_per_replica > 1
                else None
            )
            for host in range(group.hosts_per_replica):
                yield _worker_builder(
                    cluster,
                    group.group_name,
                    index=index,
                    replica=replica,
                    host=host,
                    options=self._pod_options,
                )

    async def _create_pod(
        self, key: ObjectKey, cluster: RayCluster, build: Callable[[], Object], outcome: Outcome
    ) -> None:
        pod = build()
        name = pod["metadata"]["name"]
        head = pod["metadata"]["labels"].get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        kind_word = "head" if head else "worker"
        try:
            created = await self._client.create(POD, pod, namespace=key.namespace)
        except (TransportError, ServerError) as error:
            # No answer, or the server failed possibly after writing (a timeout while etcd
            # commits): the Pod may exist. Counted as existing under its name until the cache
            # shows it or the expectation expires, so no duplicate is made (finding 5).
            self._objects.expect_maybe_created(key, POD, pod)
            self._report_failed_pod_action(
                cluster, outcome, verb="create", head=head, pod=name, error=error, generated=True
            )
            return
        except ApiError as error:
            self._report_failed_pod_action(
                cluster, outcome, verb="create", head=head, pod=name, error=error, generated=True
            )
            return
        self._objects.expect_created(key, POD, created)
        logger.info("%s: created %s Pod %s", key, kind_word, name)
        outcome.record(
            f"Created{kind_word.title()}Pod", f"{kind_word} Pod", f"{key.namespace}/{name}"
        )

    async def _delete_pod(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        pod: Pod,
        deletion: PodDeletion,
        outcome: Outcome,
    ) -> None:
        head = pod["metadata"].get("labels", {}).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        kind_word = "head" if head else "worker"
        try:
            await self._objects.delete(key, POD, pod)
        except ApiError as error:
            self._report_failed_pod_action(
                cluster, outcome, verb="delete", head=head, pod=deletion.name, error=error
            )
            return
        logger.info("%s: deleted %s Pod %s (%s)", key, kind_word, deletion.name, deletion.reason)
        outcome.record(
            f"Deleted{kind_word.title()}Pod",
            f"{kind_word} Pod",
            f"{key.namespace}/{deletion.name} ({deletion.reason})",
        )

    def _report_failed_pod_action(
        self,
        cluster: RayCluster,
        outcome: Outcome,
        *,
        verb: str,
        head: bool,
        pod: str,
        error: KubeError,
        generated: bool = False,
    ) -> None:
        """The ReplicaFailure condition (KubeRay's reasons) and a Warning Event quoting the API.

        A Pod we failed to create has a fresh random name on every retry; with `generated` that
        suffix is masked in the message (the API quotes the name too), so retries produce the
        same message: one Event with a growing count, and a status that does not change.
        """
        reasons = {
            ("create", True): cluster_status.FAILED_CREATE_HEAD_POD,
            ("create", False): cluster_status.FAILED_CREATE_WORKER_POD,
            ("delete", True): cluster_status.FAILED_DELETE_HEAD_POD,
            ("delete", False): cluster_status.FAILED_DELETE_WORKER_POD,
        }
        role = "head" if head else "worker"
        namespace = cluster["metadata"].get("namespace", "")
        message = f"Failed to {verb} {role} Pod {namespace}/{pod}: {error}"
        if generated:
            message = message.replace(pod, masked_pod_name(pod))
        outcome.failure = cluster_status.ReplicaFailure(reasons[(verb, head)], message)
        self._events.record(
            cluster,
            reason=f"FailedTo{verb.title()}{role.title()}Pod",
            message=message,
            type="Warning",
        )


def _creates_that_fit(plan: ScalingPlan, batch: Batch) -> tuple[bool, list[tuple[GroupPlan, int]]]:
    """The head (if planned) and the replicas (group, index) this batch has room for, in plan
    order; a replica is taken whole. Marks the batch when planned Pods were left for later."""
    head = plan.create_head and batch.room > 0
    batch.spend(int(head))
    replicas: list[tuple[GroupPlan, int]] = []
    taken = int(head)
    for group in plan.groups:
        for index in group.create_replica_indices:
            if batch.room <= 0:
                break
            replicas.append((group, index))
            batch.spend(group.hosts_per_replica)
            taken += group.hosts_per_replica
    if taken < plan.missing_pods:
        batch.work_left = True
    return head, replicas


def workers_to_delete_clearing(cluster: RayCluster, plan: ScalingPlan) -> list[dict[str, Any]]:
    """JSON patch operations emptying the handled `workersToDelete` lists, each guarded by
    `test` operations on the group's name and on the exact list the plan was made from."""
    groups = cluster.get("spec", {}).get("workerGroupSpecs") or []
    index_of = {g.get("groupName"): i for i, g in enumerate(groups)}
    operations: list[dict[str, Any]] = []
    for group_plan in plan.groups:
        index = index_of.get(group_plan.group_name)
        if not group_plan.clear_workers_to_delete or index is None:
            continue
        listed = (groups[index].get("scaleStrategy") or {}).get("workersToDelete") or []
        path = f"/spec/workerGroupSpecs/{index}"
        operations += [
            # The groups may have been reordered since our cache read...
            {"op": "test", "path": f"{path}/groupName", "value": group_plan.group_name},
            # ...and the autoscaler may have asked for other workers since.
            {"op": "test", "path": f"{path}/scaleStrategy/workersToDelete", "value": listed},
            {"op": "replace", "path": f"{path}/scaleStrategy/workersToDelete", "value": []},
        ]
    return operations


def masked_pod_name(name: str) -> str:
    """`c-small-worker-x7k2p` -> `c-small-worker-*****`: the name without its random suffix."""
    return name[:-RANDOM_SUFFIX_LENGTH] + "*" * RANDOM_SUFFIX_LENGTH


def reason_verb(reason: str) -> str:
    """`CreatedWorkerPod` -> `Created`: the verb an Event message starts with."""
    return "Created" if reason.startswith("Created") else "Deleted"


def _worker_builder(
    cluster: RayCluster,
    group_name: str,
    *,
    index: int,
    replica: str | None,
    host: int,
    options: PodOptions,
) -> Callable[[], Object]:
    return lambda: build_worker_pod(
        cluster,
        group_name,
        suffix=random_suffix(),
        replica_index=index,
        replica_name=replica,
        host_index=host,
        options=options,
    )
