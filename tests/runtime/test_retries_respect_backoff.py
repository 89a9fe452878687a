"""A failing key is retried on its backoff schedule, whatever its own writes stir up (issue 12,
finding 9: "the cluster's own Pod/status events re-enqueue it immediately, bypassing backoff —
13 retries in 180 s where backoff allows 11"); a spec change or a deletion still runs it at once.

On a virtual clock (looptime); the changes are dispatched as the watchers would dispatch them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
from ray_operator.metrics import Metrics
from ray_operator.runtime import POD, RAY_CLUSTER, Kind, ObjectKey, Result
from ray_operator.runtime.controller import cluster_key_from_label, own_key
from ray_operator.runtime.queue import Backoff, WorkQueue
from ray_operator.runtime.store import Change
from ray_operator.runtime.workers import Workers

pytestmark = pytest.mark.looptime

KEY = ObjectKey("RayCluster", "ns", "a")
BACKOFF = Backoff(base=0.1, cap=300.0)


def cluster(*, generation: int, state: str = "", deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": "ns", "name": "a", "generation": generation}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "RayCluster", "metadata": metadata, "status": {"state": state}}


def worker_pod(number: int, *, phase: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "namespace": "ns",
            "name": f"a-worker-{number}",
            "labels": {"ray.io/cluster": "a"},
        },
        "status": {"phase": phase},
    }


class FailingWriter:
    """Fails every reconcile of `KEY` after writing, as a controller stuck on an error does:
    each attempt creates a Pod and writes the cluster's status, and the watch echoes both back
    while the reconcile is still in flight."""

    kind = RAY_CLUSTER

    def __init__(self) -> None:
        self.workers: Workers | None = None
        self.calls: list[float] = []
        self._pods = itertools.count()
        self.failing = True

    def keys_for(self, kind: Kind, obj: Mapping[str, Any]) -> Iterable[ObjectKey]:
        return own_key(kind, obj, of=RAY_CLUSTER) + cluster_key_from_label(obj)

    async def reconcile(self, key: ObjectKey) -> Result:
        assert self.workers is not None
        self.calls.append(asyncio.get_running_loop().time())
        attempt = len(self.calls)
        self.workers.dispatch(Change(POD, None, worker_pod(next(self._pods), phase="Pending")))
        self.workers.dispatch(
            Change(
                RAY_CLUSTER,
                cluster(generation=1, state=f"failed {attempt - 1}"),
                cluster(generation=1, state=f"failed {attempt}"),
            )
        )
        await asyncio.sleep(0.01)  # the API round trip
        if self.failing:
            raise RuntimeError("the head Pod's image cannot be pulled")
        return Result()


@asynccontextmanager
async def running(controller: FailingWriter) -> AsyncIterator[Workers]:
    queue: WorkQueue[ObjectKey] = WorkQueue(backoff=BACKOFF)
    workers = Workers([controller], queue, metrics=Metrics(), concurrency=2)
    controller.workers = workers
    task = asyncio.create_task(workers.run(), name="workers")
    try:
        yield workers
    finally:
        queue.shut_down()
        await task


async def pod_events_every(seconds: float, workers: Workers, *, until: float) -> None:
    """Pods of the cluster changing state now and then (Ray starting, probes flipping)."""
    loop = asyncio.get_running_loop()
    for number in itertools.count():
        if loop.time() >= until:
            return
        phase = "Running" if number % 2 else "Pending"
        workers.dispatch(Change(POD, worker_pod(0, phase="Pending"), worker_pod(0, phase=phase)))
        await asyncio.sleep(seconds)


def attempts_allowed_by_backoff(within: float) -> int:
    """Attempts at 0, 0.1, 0.3, 0.7, …: how many start before `within` seconds."""
    started, attempts = 0.0, 0
    while started < within:
        attempts += 1
        started += BACKOFF.delay(attempts - 1)
    return attempts


async def test_own_writes_and_pod_events_do_not_retry_a_failing_key_before_its_backoff() -> None:
    controller = FailingWriter()
    async with running(controller) as workers:
        start = asyncio.get_running_loop().time()
        workers.queue.add(KEY)
        await pod_events_every(0.5, workers, until=start + 180)
    gaps = [later - earlier for earlier, later in itertools.pairwise(controller.calls)]
    assert len(controller.calls) == attempts_allowed_by_backoff(180) == 11
    assert gaps == pytest.approx([BACKOFF.delay(n) + 0.01 for n in range(10)], abs=0.02)


async def test_a_spec_change_runs_a_key_in_backoff_at_once() -> None:
    controller = FailingWriter()
    async with running(controller) as workers:
        workers.queue.add(KEY)
        await asyncio.sleep(60)  # attempt 10 at ~51 s; the next is due at ~102 s
        attempts = len(controller.calls)
        fixed = asyncio.get_running_loop().time()
        controller.failing = False
        workers.dispatch(Change(RAY_CLUSTER, cluster(generation=1), cluster(generation=2)))
        await asyncio.sleep(1)
    assert len(controller.calls) == attempts + 1
    assert controller.calls[-1] == pytest.approx(fixed, abs=0.01)


async def test_a_deletion_runs_a_key_in_backoff_at_once() -> None:
    controller = FailingWriter()
    async with running(controller) as workers:
        workers.queue.add(KEY)
        await asyncio.sleep(60)
        deleted = asyncio.get_running_loop().time()
        controller.failing = False
        workers.dispatch(
            Change(RAY_CLUSTER, cluster(generation=1), cluster(generation=1, deleting=True))
        )
        await asyncio.sleep(1)
    assert controller.calls[-1] == pytest.approx(deleted, abs=0.01)


async def test_a_delete_event_runs_a_key_in_backoff_at_once() -> None:
    controller = FailingWriter()
    async with running(controller) as workers:
        workers.queue.add(KEY)
        await asyncio.sleep(60)
        deleted = asyncio.get_running_loop().time()
        controller.failing = False
        workers.dispatch(Change(RAY_CLUSTER, cluster(generation=1), None))
        await asyncio.sleep(1)
    assert controller.calls[-1] == pytest.approx(deleted, abs=0.01)


async def test_a_spec_change_during_a_failing_attempt_runs_the_key_again_right_after() -> None:
    controller = FailingWriter()
    async with running(controller) as workers:
        start = asyncio.get_running_loop().time()
        workers.queue.add(KEY)
        await asyncio.sleep(0.005)  # the first attempt is in flight
        workers.dispatch(Change(RAY_CLUSTER, cluster(generation=1), cluster(generation=2)))
        await asyncio.sleep(0.05)
    assert len(controller.calls) == 2
    assert controller.calls[1] == pytest.approx(start + 0.01, abs=0.005)
