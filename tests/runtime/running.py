"""A runtime assembled in the test process: watchers feeding a `Workers` pool, for tests that
drive the runtime's parts directly against the real API server (not a whole operator process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from ray_operator.metrics import Metrics
from ray_operator.runtime import POD, RAY_CLUSTER, Kind, KubeClient
from ray_operator.runtime.store import Store
from ray_operator.runtime.watcher import Watcher
from ray_operator.runtime.workers import Workers
from ray_operator.spec.kinds import watch_selectors

SYNC_TIMEOUT_SECONDS = 30


@asynccontextmanager
async def watching(
    client: KubeClient,
    store: Store,
    workers: Workers,
    *,
    metrics: Metrics,
    namespace: str,
    kinds: Iterable[Kind] = (RAY_CLUSTER, POD),
) -> AsyncIterator[list[Watcher]]:
    """Watchers of `kinds` (selected as the operator selects them) and `workers`, running for the
    block; entered once every watcher has listed, stopped (queue shut down) on exit."""
    watchers = [
        Watcher(
            client,
            store,
            kind,
            on_change=workers.dispatch,
            metrics=metrics,
            namespace=namespace,
            label_selector=selector,
        )
        for kind in kinds
        for selector in watch_selectors(kind)
    ]
    tasks: list[asyncio.Task[Any]] = [asyncio.create_task(w.run(), name=w.name) for w in watchers]
    tasks.append(asyncio.create_task(workers.run(), name="workers"))
    try:
        synced = asyncio.gather(*(watcher.synced.wait() for watcher in watchers))
        await asyncio.wait_for(synced, SYNC_TIMEOUT_SECONDS)
        yield watchers
    finally:
        workers.queue.shut_down()
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
