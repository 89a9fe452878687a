"""The work queue and the worker loop, on a virtual clock (looptime): no real sleeps.

Specifies client-go's keyed model: coalescing, one reconcile per key at a time, dirty re-add,
a bounded number of concurrent reconciles, per-key exponential backoff, requeue-after.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from ray_operator.metrics import Metrics
from ray_operator.runtime import POD, RAY_CLUSTER, ObjectKey
from ray_operator.runtime.queue import Backoff, WorkQueue
from ray_operator.runtime.store import Change
from ray_operator.runtime.workers import Workers

from tests.runtime.controllers import Script, ScriptedController

pytestmark = pytest.mark.looptime

A = ObjectKey("RayCluster", "ns", "a")
B = ObjectKey("RayCluster", "ns", "b")


def make_workers(controller: ScriptedController, *, concurrency: int = 2) -> Workers:
    queue: WorkQueue[ObjectKey] = WorkQueue(backoff=Backoff(base=0.1, cap=300.0))
    return Workers([controller], queue, metrics=Metrics(), concurrency=concurrency)


@asynccontextmanager
async def running(workers: Workers) -> AsyncIterator[None]:
    task = asyncio.create_task(workers.run(), name="workers")
    try:
        yield
    finally:
        workers.queue.shut_down()
        await task


async def settle() -> None:
    """Let every ready callback and task run (costs no virtual time)."""
    for _ in range(50):
        await asyncio.sleep(0)


async def test_a_burst_of_adds_for_one_key_coalesces_into_one_reconcile() -> None:
    controller = ScriptedController()
    workers = make_workers(controller)
    for _ in range(100):
        workers.queue.add(A)
    assert len(workers.queue) == 1
    async with running(workers):
        await asyncio.sleep(1)
    assert len(controller.times(A)) == 1


async def test_a_key_added_while_in_flight_runs_exactly_once_more_afterwards() -> None:
    gate = asyncio.Event()
    controller = ScriptedController(scripts={A: Script(gate=gate)})
    workers = make_workers(controller, concurrency=4)
    workers.queue.add(A)
    async with running(workers):
        await settle()
        assert controller.running == {A}
        for _ in range(5):
            workers.queue.add(A)
        await settle()
        assert len(workers.queue) == 0  # held back while in flight, not handed to another worker
        controller.scripts[A] = Script()
        gate.set()
        await asyncio.sleep(1)
    assert len(controller.times(A)) == 2
    assert not controller.overlapped


async def test_no_more_keys_run_at_once_than_there_are_workers() -> None:
    gate = asyncio.Event()
    keys = [ObjectKey("RayCluster", "ns", f"c{number}") for number in range(10)]
    controller = ScriptedController(scripts={key: Script(gate=gate) for key in keys})
    workers = make_workers(controller, concurrency=3)
    for key in keys:
        workers.queue.add(key)
    async with running(workers):
        await settle()
        assert len(controller.running) == 3
        gate.set()
        await asyncio.sleep(1)
    assert sorted(key for key, _ in controller.calls) == sorted(keys)
    assert controller.max_running == 3


async def test_different_keys_run_concurrently() -> None:
    gate = asyncio.Event()
    controller = ScriptedController(scripts={A: Script(gate=gate), B: Script(gate=gate)})
    workers = make_workers(controller, concurrency=2)
    workers.queue.add(A)
    workers.queue.add(B)
    async with running(workers):
        await settle()
        assert controller.running == {A, B}
        gate.set()


async def test_failures_are_retried_with_per_key_exponential_backoff() -> None:
    controller = ScriptedController(scripts={A: Script(failures=4)})
    workers = make_workers(controller)
    workers.queue.add(A)
    async with running(workers):
        await asyncio.sleep(10)
    times = controller.times(A)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert gaps == pytest.approx([0.1, 0.2, 0.4, 0.8], abs=0.01)
    assert workers.queue.failures(A) == 0  # the fifth attempt succeeded: backoff forgotten


async def test_a_failing_key_does_not_delay_other_keys() -> None:
    controller = ScriptedController(scripts={A: Script(failures=10)})
    workers = make_workers(controller, concurrency=1)
    workers.queue.add(A)
    async with running(workers):
        await asyncio.sleep(1)
        started = asyncio.get_running_loop().time()
        workers.queue.add(B)
        await settle()
        assert controller.times(B) == [pytest.approx(started, abs=0.01)]
        controller.scripts[A].failures = 0
        await asyncio.sleep(60)


async def test_success_resets_the_backoff() -> None:
    controller = ScriptedController(scripts={A: Script(failures=3)})
    workers = make_workers(controller)
    workers.queue.add(A)
    async with running(workers):
        await asyncio.sleep(5)
        controller.scripts[A] = Script(failures=1)
        before = len(controller.calls)
        workers.queue.add(A)
        await asyncio.sleep(5)
    times = controller.times(A)[before:]
    assert times[1] - times[0] == pytest.approx(0.1, abs=0.01)


async def test_requeue_after_reconciles_again_after_the_delay() -> None:
    controller = ScriptedController(scripts={A: Script(requeue_after=30.0)})
    workers = make_workers(controller)
    workers.queue.add(A)
    wall_clock = time.monotonic()
    async with running(workers):
        await asyncio.sleep(65)
    # A canary: if something unhooks looptime (an asyncio.run() elsewhere in the session
    # resets the policy's loop), these tests silently run on the real clock.
    assert time.monotonic() - wall_clock < 5, "looptime is off: the queue tests sleep for real"
    times = controller.times(A)
    assert len(times) == 3
    assert times[1] - times[0] == pytest.approx(30.0, abs=0.01)


async def test_of_several_delayed_adds_for_a_key_the_earliest_wins() -> None:
    controller = ScriptedController()
    workers = make_workers(controller)
    async with running(workers):
        started = asyncio.get_running_loop().time()
        workers.queue.add_after(A, 10)
        workers.queue.add_after(A, 5)
        workers.queue.add_after(A, 20)
        await asyncio.sleep(30)
    assert controller.times(A) == [pytest.approx(started + 5, abs=0.01)]


async def test_after_shut_down_no_key_is_handed_out() -> None:
    queue: WorkQueue[ObjectKey] = WorkQueue()
    queue.add(A)
    queue.shut_down()
    queue.add(B)
    assert await queue.get() is None


async def test_shut_down_lets_in_flight_reconciles_finish() -> None:
    gate = asyncio.Event()
    controller = ScriptedController(scripts={A: Script(gate=gate)})
    workers = make_workers(controller)
    workers.queue.add(A)
    task = asyncio.create_task(workers.run(), name="workers")
    await settle()
    workers.queue.shut_down()
    workers.queue.add(B)
    await settle()
    assert not task.done()
    gate.set()
    await task
    assert [key for key, _ in controller.calls] == [A]


def test_backoff_is_capped() -> None:
    backoff = Backoff(base=0.1, cap=300.0)
    assert [backoff.delay(n) for n in range(3)] == [0.1, 0.2, 0.4]
    assert backoff.delay(30) == 300.0
    assert backoff.delay(10_000) == 300.0


def test_a_pod_change_enqueues_its_cluster_and_a_relabelled_pod_both_clusters() -> None:
    controller = ScriptedController()
    workers = make_workers(controller)
    old = {
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": "p", "labels": {"ray.io/cluster": "a"}},
    }
    new = {
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": "p", "labels": {"ray.io/cluster": "b"}},
    }
    workers.dispatch(Change(POD, None, old))
    assert len(workers.queue) == 1
    workers.dispatch(Change(POD, old, new))
    assert len(workers.queue) == 2  # a (coalesced) and b


def test_a_cluster_change_enqueues_the_cluster_itself() -> None:
    controller = ScriptedController()
    workers = make_workers(controller)
    cluster = {"kind": "RayCluster", "metadata": {"namespace": "ns", "name": "a"}}
    workers.dispatch(Change(RAY_CLUSTER, cluster, None))
    assert len(workers.queue) == 1
