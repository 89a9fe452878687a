"""On the real control plane: a failing reconcile whose own writes come back through the watches
(a Pod it created, being scheduled and started by KWOK; the status it wrote) is still retried only
on its backoff schedule (issue 12, finding 9: 13 retries in 180 s where backoff allows 11).

The virtual-clock specification is test_retries_respect_backoff.py; this is the same rule with
real watch echoes arriving at real times.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ray_operator.metrics import Metrics
from ray_operator.runtime import (
    POD,
    RAY_CLUSTER,
    Kind,
    KubeClient,
    ObjectKey,
    Result,
    cluster_key_from_label,
    own_key,
)
from ray_operator.runtime.queue import Backoff, WorkQueue
from ray_operator.runtime.store import Store
from ray_operator.runtime.workers import Workers

from tests.conftest import Kubectl
from tests.runtime.marked_clusters import ray_cluster
from tests.runtime.running import watching
from tests.runtime.waiting import eventually

BACKOFF = Backoff(base=0.2, cap=300.0)
WINDOW = 10.0


class FailsAfterWriting:
    """Each attempt creates a worker Pod and writes the cluster's status, then fails."""

    kind = RAY_CLUSTER

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self.calls: list[float] = []

    def keys_for(self, kind: Kind, obj: Mapping[str, Any]) -> Iterable[ObjectKey]:
        return own_key(kind, obj, of=RAY_CLUSTER) + cluster_key_from_label(obj)

    async def reconcile(self, key: ObjectKey) -> Result:
        self.calls.append(time.monotonic())
        attempt = len(self.calls)
        await self._client.create(POD, worker_pod(key, attempt), namespace=key.namespace)
        await self._client.patch_status(
            RAY_CLUSTER,
            key.name,
            {"status": {"reason": f"attempt {attempt} failed"}},
            namespace=key.namespace,
        )
        raise RuntimeError("the next step keeps failing")


def worker_pod(key: ObjectKey, attempt: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{key.name}-worker-{attempt}",
            "labels": {
                "app.kubernetes.io/created-by": "ray-operator",
                "ray.io/cluster": key.name,
            },
        },
        "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]},
    }


def attempts_allowed(within: float) -> int:
    started, attempts = 0.0, 0
    while started < within:
        attempts += 1
        started += BACKOFF.delay(attempts - 1)
    return attempts


async def test_a_failing_cluster_is_retried_on_its_backoff_despite_its_own_pod_and_status_events(
    client: KubeClient, metrics: Metrics, kubectl: Kubectl, namespace: str
) -> None:
    store = Store()
    controller = FailsAfterWriting(client)
    queue: WorkQueue[ObjectKey] = WorkQueue(backoff=BACKOFF)
    workers = Workers([controller], queue, metrics=metrics, concurrency=2, sync=store.sync)
    async with watching(client, store, workers, metrics=metrics, namespace=namespace):
        kubectl("apply", "-n", namespace, "-f", "-", input_text=ray_cluster("failing"))
        await eventually(lambda: controller.calls, within=30)
        await asyncio.sleep(WINDOW)
    first = controller.calls[0]
    in_window = [when for when in controller.calls if when - first < WINDOW]
    # Each attempt takes a few API round trips, which only pushes later attempts out.
    assert attempts_allowed(WINDOW) - 1 <= len(in_window) <= attempts_allowed(WINDOW)
    echoes = metrics.registry.get_sample_value(
        "ray_operator_watch_events_total", {"kind": "Pod", "type": "MODIFIED"}
    )
    assert echoes is not None, "the Pods' own events never came back"
    assert echoes >= len(in_window)
