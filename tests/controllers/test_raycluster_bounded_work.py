"""Bounded work per reconcile and deletes that win (issue 12). Fairness between clusters (a small
cluster's first Pod while four 1000-worker clusters scale) is measured on a separate operator
process in tests/robustness/test_head_of_line.py, where the test's own work does not share the
operator's event loop.

Against the real control plane with the operator in-process (no webhook: a spec the webhook
would refuse reaches the controller as it would after a webhook outage). A watch started before
the test's first write records every Pod create with its resourceVersion, so "created after the
delete" is decided by the API server's own ordering, not by when our watch happened to deliver.
"""

from __future__ import annotations

import asyncio
import functools
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from ray_operator.app import Operator
from ray_operator.controllers.raycluster import PODS_PER_RECONCILE, RayClusterController
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.errors import TransportError
from ray_operator.spec.kinds import POD, RAY_CLUSTER
from ray_operator.validation.limits import ClusterLimits

from tests.controllers.clusters import scalable_cluster, worker_names
from tests.controllers.conftest import Harness, running_operator

INT32_MAX = 2**31 - 1
CLUSTER = "ray.io/cluster"
# How long the last Pod of a deleted cluster may take to go (before: 157 s for 4000 workers).
ALL_GONE_WITHIN = 60.0


@dataclass
class Creates:
    """Every Pod created in the namespace, as (the cluster it belongs to, its creation
    resourceVersion, when our watch saw it)."""

    seen: list[tuple[str, int, float]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def of(self, cluster: str) -> list[tuple[str, int, float]]:
        return [entry for entry in self.seen if entry[0] == cluster]

    def after(self, cluster: str, resource_version: int) -> int:
        return sum(1 for _, version, _ in self.of(cluster) if version > resource_version)

    async def wait_for(self, cluster: str, count: int, *, within: float = 60.0) -> None:
        async def enough() -> None:
            while len(self.of(cluster)) < count:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(enough(), timeout=within)


@pytest.fixture
async def operator_without_pod_bound(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> AsyncIterator[Operator]:
    """The operator with `--max-pods-per-cluster` above int32: nothing refuses 2^31-1 replicas,
    as before admission bounds existed (or with a bound an administrator raised)."""
    unbounded = ClusterLimits(max_pods_per_cluster=2**32)
    controller = functools.partial(RayClusterController, limits=unbounded)
    async with running_operator(control_plane.kubeconfig, namespace, [controller]) as replica:
        yield replica


@pytest.fixture
async def pod_creates(harness: Harness) -> AsyncIterator[Creates]:
    """Pod creates, by the RayCluster named in their `ray.io/cluster` label."""
    creates = Creates()
    listed = await harness.client.list(POD, namespace=harness.namespace)
    task = asyncio.create_task(_record(harness, creates, listed.resource_version))
    try:
        yield creates
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _record(harness: Harness, creates: Creates, resource_version: str) -> None:
    while True:
        try:
            async for event in harness.client.watch(
                POD, namespace=harness.namespace, resource_version=resource_version
            ):
                metadata = event.object.get("metadata") or {}
                resource_version = metadata.get("resourceVersion", resource_version)
                if event.type == "ADDED":
                    cluster = (metadata.get("labels") or {}).get(CLUSTER, "")
                    creates.seen.append((cluster, int(resource_version), time.monotonic()))
                    creates.changed.set()
        except TransportError:
            await asyncio.sleep(0.2)


async def _delete_committed_at(harness: Harness, name: str) -> int:
    """Delete the RayCluster; the resourceVersion (etcd revision) at which the API server
    committed the deletion, as its watch event reports it."""
    listed = await harness.client.list(RAY_CLUSTER, namespace=harness.namespace)
    watch = harness.client.watch(
        RAY_CLUSTER, namespace=harness.namespace, resource_version=listed.resource_version
    )
    await harness.client.delete(RAY_CLUSTER, name, namespace=harness.namespace)
    async for event in watch:
        metadata = event.object.get("metadata") or {}
        # DELETED, or (another finalizer holds it) the update that set deletionTimestamp.
        if metadata.get("name") == name and (
            event.type == "DELETED" or metadata.get("deletionTimestamp")
        ):
            await watch.aclose()
            return int(metadata["resourceVersion"])
    raise AssertionError(f"no deletion event for RayCluster {name}")


async def _delete_and_count_late_creates(
    harness: Harness, creates: Creates, name: str
) -> tuple[int, float]:
    """Delete the RayCluster; how many of its Pods the API server created after it committed
    the delete, and how long until the last of them was gone."""
    started = time.monotonic()
    deleted_at = await _delete_committed_at(harness, name)
    await _wait_until_gone(harness, name)
    return creates.after(name, deleted_at), time.monotonic() - started


async def _wait_until_gone(harness: Harness, name: str) -> None:
    async def all_gone() -> bool:
        listed = await harness.client.list(
            POD, namespace=harness.namespace, label_selector=f"ray.io/cluster={name}"
        )
        return not listed.items

    await harness.eventually(all_gone, within=ALL_GONE_WITHIN, what=f"every Pod of {name} gone")


async def _delete_and_wait_until_gone(harness: Harness, names: list[str]) -> None:
    for name in names:
        await harness.client.delete(RAY_CLUSTER, name, namespace=harness.namespace)

    async def all_gone() -> bool:
        listed = await harness.client.list(POD, namespace=harness.namespace)
        return not listed.items

    await harness.eventually(all_gone, within=2 * ALL_GONE_WITHIN, what="every Pod gone")


def _reconciles(operator: Operator, result: str) -> float:
    return sum(
        sample.value
        for metric in operator.metrics.registry.collect()
        if metric.name == "ray_operator_reconcile"
        for sample in metric.samples
        if sample.name.endswith("_total")
        and sample.labels.get("kind") == "RayCluster"
        and sample.labels.get("result") == result
    )


async def test_delete_stops_creation_within_one_batch(
    harness: Harness, operator: Operator, pod_creates: Creates
) -> None:
    await harness.apply(scalable_cluster("big", replicas=4000, max_replicas=4000))
    await pod_creates.wait_for("big", 20)
    started = time.monotonic()
    await pod_creates.wait_for("big", 300)
    print(f"\none cluster alone: {280 / (time.monotonic() - started):.0f} Pods/s")
    late, gone_after = await _delete_and_count_late_creates(harness, pod_creates, "big")
    created = len(pod_creates.of("big"))
    print(f"\ncreated {created} Pods; {late} after the delete; all gone {gone_after:.1f}s after")
    assert late <= PODS_PER_RECONCILE  # before: 1358 more creates, the last Pod gone after 157 s
    assert created < 4000


async def test_a_cluster_held_by_another_finalizer_stops_creating_once_deleted(
    harness: Harness, operator: Operator, pod_creates: Creates
) -> None:
    held = scalable_cluster("held", replicas=4000, max_replicas=4000)
    held["metadata"]["finalizers"] = ["example.com/keep-until-archived"]
    await harness.apply(held)
    await pod_creates.wait_for("held", 100)
    deleting_since = await _delete_committed_at(harness, "held")
    await asyncio.sleep(2.0)  # creation would go on at tens of Pods per second
    late = pod_creates.after("held", deleting_since)
    await harness.kubectl(
        "patch",
        "raycluster/held",
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/metadata/finalizers"}]',
    )

    await _wait_until_gone(harness, "held")
    print(f"\n{late} creates after deletionTimestamp was set")
    assert late <= PODS_PER_RECONCILE


async def test_int32_max_replicas_are_created_in_batches_in_bounded_memory_until_deleted(
    harness: Harness, operator_without_pod_bound: Operator, pod_creates: Creates
) -> None:
    operator = operator_without_pod_bound
    await harness.apply(scalable_cluster("huge", replicas=INT32_MAX, max_replicas=INT32_MAX))
    await pod_creates.wait_for("huge", 50)
    requeues_before = _reconciles(operator, "requeue")
    # Everything this process allocates while the operator creates 300 more Pods (this test's
    # watches and kubectl output included): the cached Pods themselves, and no more than a
    # batch's worth of plans and builders. The old plan listed 2^31 replica indices at once.
    tracemalloc.start()
    try:
        await pod_creates.wait_for("huge", 350)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    batches = _reconciles(operator, "requeue") - requeues_before
    late, gone_after = await _delete_and_count_late_creates(harness, pod_creates, "huge")
    print(
        f"\npeak traced memory {peak / 2**20:.1f} MiB over 300 creates in {batches:.0f} requeued"
        f" reconciles; {late} creates after the delete; all gone {gone_after:.1f}s after"
    )
    assert peak < 64 * 2**20
    # One bounded batch per reconcile (the reconciles running at either end of the window may
    # not be counted); before, one reconcile tried to plan all 2^31-1 at once and never ended.
    assert batches >= 300 / PODS_PER_RECONCILE - 2
    assert late <= PODS_PER_RECONCILE


async def test_work_beyond_one_batch_converges_exactly_and_workers_to_delete_all_go_at_once(
    harness: Harness, operator: Operator
) -> None:
    workers = 3 * PODS_PER_RECONCILE  # several batches each way
    cluster = scalable_cluster("batched", replicas=workers, max_replicas=workers)
    await harness.apply(cluster)
    pods = await harness.pods_settled("batched", head=1, workers=workers, within=120)
    # workersToDelete names more Pods than one batch holds: the list is cleared after the
    # reconcile that acts on it, so every named Pod goes in that reconcile, none other.
    doomed = sorted(worker_names(pods))[: PODS_PER_RECONCILE + 4]
    survivors = worker_names(pods) - set(doomed)
    group = cluster["spec"]["workerGroupSpecs"][0]
    group["replicas"] = len(survivors)
    group["scaleStrategy"] = {"workersToDelete": doomed}
    await harness.apply(cluster)

    async def only_survivors_left() -> bool:
        return worker_names(await harness.pods("batched")) == survivors

    await harness.eventually(only_survivors_left, what="exactly the survivors left")
    # The operator's clearing of workersToDelete made it a field manager of the groups: a
    # JSON patch, as Ray's autoscaler writes, rather than a conflicting server-side apply.
    await harness.kubectl(
        "patch",
        "raycluster/batched",
        "--type=json",
        "-p",
        '[{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2}]',
    )
    await harness.pods_settled("batched", head=1, workers=2, within=120)
    assert len(harness.created_pods) == workers + 1  # batches never create one Pod too many
    await _delete_and_wait_until_gone(harness, ["batched"])
