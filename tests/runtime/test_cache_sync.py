"""Reconciles wait for the caches they read to be complete (issue 12, finding 5), on a virtual
clock; the real API-server restart is in test_apiserver_restart.py.

A part of the cache (a kind in a namespace, or in all) is unsynced from the moment its watch
breaks until its next LIST is applied. Keys whose controller reads such a kind are parked —
holding no worker — and run as soon as it syncs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from ray_operator.metrics import Metrics
from ray_operator.runtime import POD, RAY_CLUSTER, SERVICE, ObjectKey
from ray_operator.runtime.queue import WorkQueue
from ray_operator.runtime.store import CacheSync, Store
from ray_operator.runtime.workers import Workers

from tests.runtime.controllers import ScriptedController

pytestmark = pytest.mark.looptime

A = ObjectKey("RayCluster", "ns", "a")
OTHER = ObjectKey("RayCluster", "other", "b")


@asynccontextmanager
async def running(
    controller: ScriptedController, sync: CacheSync, *, concurrency: int = 1
) -> AsyncIterator[Workers]:
    queue: WorkQueue[ObjectKey] = WorkQueue()
    workers = Workers([controller], queue, metrics=Metrics(), concurrency=concurrency, sync=sync)
    task = asyncio.create_task(workers.run(), name="workers")
    try:
        yield workers
    finally:
        queue.shut_down()
        await task


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_a_key_waits_while_a_kind_it_reads_relists_and_runs_once_it_synced() -> None:
    sync = CacheSync()
    sync.mark_unsynced(POD, "ns")  # the Pod watch of `ns` broke
    controller = ScriptedController()
    async with running(controller, sync) as workers:
        workers.queue.add(A)
        await asyncio.sleep(30)
        assert controller.calls == []
        assert workers.parked == {A}
        synced_at = asyncio.get_running_loop().time()
        sync.mark_synced(POD, "ns")  # its LIST was applied
        await settle()
    assert controller.times(A) == [pytest.approx(synced_at, abs=0.01)]
    assert workers.parked == set()


async def test_a_parked_key_holds_no_worker() -> None:
    sync = CacheSync()
    sync.mark_unsynced(POD, "ns")
    controller = ScriptedController()
    async with running(controller, sync, concurrency=1) as workers:
        workers.queue.add(A)
        workers.queue.add(OTHER)  # another namespace: its Pod cache is complete
        await settle()
        assert [key for key, _ in controller.calls] == [OTHER]
        sync.mark_synced(POD, "ns")
        await settle()
    assert [key for key, _ in controller.calls] == [OTHER, A]


async def test_a_watch_of_all_namespaces_holds_back_keys_of_every_namespace() -> None:
    sync = CacheSync()
    sync.mark_unsynced(SERVICE, None)
    controller = ScriptedController()
    async with running(controller, sync) as workers:
        workers.queue.add(A)
        workers.queue.add(OTHER)
        await settle()
        assert workers.parked == {A, OTHER}
        sync.mark_synced(SERVICE, None)
        await settle()
    assert sorted(key for key, _ in controller.calls) == [A, OTHER]


async def test_a_controller_that_declares_what_it_reads_waits_only_for_those_kinds() -> None:
    sync = CacheSync()
    sync.mark_unsynced(POD, "ns")
    controller = ScriptedController(reads=(RAY_CLUSTER,))
    async with running(controller, sync) as workers:
        workers.queue.add(A)
        await settle()
        assert [key for key, _ in controller.calls] == [A]
        sync.mark_unsynced(RAY_CLUSTER, "ns")
        workers.queue.add(A)
        await settle()
        assert workers.parked == {A}
        sync.mark_synced(RAY_CLUSTER, "ns")
        await settle()
    assert len(controller.calls) == 2


def test_the_store_reports_a_kind_unsynced_until_every_watch_of_it_listed() -> None:
    store = Store()
    store.sync.mark_unsynced(POD, "a")
    store.sync.mark_unsynced(POD, "b")
    assert not store.synced(POD, "a")
    assert store.synced(POD, "c")  # nobody watches it there: nothing to wait for
    store.sync.mark_synced(POD, "a")
    assert store.synced(POD, "a")
    assert not store.synced(POD, "b")
    assert store.sync.unsynced_kinds() == [POD]
    store.sync.mark_synced(POD, "b")
    assert store.sync.unsynced_kinds() == []
