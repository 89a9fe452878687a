"""The harness's own eyes: a watch that timestamps every ADDED object, grouped by cluster.

Pods carry a second-granular `creationTimestamp`, too coarse for latencies of milliseconds, so the
time an object came to exist is the (monotonic) arrival of its ADDED event on this watch. The same
record counts ADDED events per `ray.io/cluster`, which exposes a duplicate create (one Pod too
many) even if the operator deleted it again later.

    watch = ArrivalWatch(client, POD, namespace="ns", label_selector=OWNED_SELECTOR)
    await watch.start()
    at = await watch.wait_for("cluster-7", count=5, within=10)   # monotonic arrival time
    await watch.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict

from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import Gone, KubeError, error_from_status
from ray_operator.spec.kinds import Kind
from ray_operator.spec.kuberay_names import CLUSTER_LABEL

logger = logging.getLogger(__name__)

ANY_CLUSTER = ""
"""The key of the running total over every cluster, for `wait_for`."""

RETRY_SECONDS = 0.2


class ArrivalWatch:
    """Arrival times of ADDED objects of one kind in one namespace, by `ray.io/cluster` label."""

    def __init__(
        self, client: KubeClient, kind: Kind, *, namespace: str, label_selector: str | None = None
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self._client = client
        self._label_selector = label_selector
        self._arrivals: dict[str, list[float]] = defaultdict(list)  # cluster -> arrival times
        self._seen: set[str] = set()  # uids, so a relist does not count an object twice
        self._waiters: dict[str, list[tuple[int, asyncio.Future[float]]]] = defaultdict(list)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """List (what exists counts as arrived now), then watch in the background."""
        resource_version = await self._list()
        self._task = asyncio.create_task(
            self._run(resource_version), name=f"bench-watch:{self.kind}:{self.namespace}"
        )

    async def stop(self) -> None:
        """Stop watching; pending waiters are cancelled."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for waiters in self._waiters.values():
            for _, future in waiters:
                future.cancel()
        self._waiters.clear()

    def count(self, cluster: str = ANY_CLUSTER) -> int:
        """ADDED objects seen so far for `cluster` (or in total)."""
        return len(self._arrivals.get(cluster, ()))

    def counts_by_cluster(self) -> dict[str, int]:
        """ADDED objects seen per cluster label (objects without the label are left out)."""
        return {
            cluster: len(times)
            for cluster, times in self._arrivals.items()
            if cluster != ANY_CLUSTER
        }

    async def wait_for(self, cluster: str, *, count: int, within: float) -> float:
        """The monotonic arrival time of the `count`-th object of `cluster` (waiting for it)."""
        times = self._arrivals.get(cluster, [])
        if len(times) >= count:
            return times[count - 1]
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters[cluster].append((count, future))
        try:
            return await asyncio.wait_for(future, timeout=within)
        except TimeoutError:
            raise TimeoutError(
                f"{self.kind} of {cluster or 'all clusters'} in {self.namespace}: "
                f"{self.count(cluster)} of {count} after {within:.0f}s"
            ) from None
        finally:
            waiters = self._waiters.get(cluster, [])
            if (count, future) in waiters:
                waiters.remove((count, future))

    async def _list(self) -> str:
        listed = await self._client.list(
            self.kind, namespace=self.namespace, label_selector=self._label_selector
        )
        now = time.monotonic()
        for item in listed.items:
            self._arrived(item, now)
        return listed.resource_version

    async def _run(self, resource_version: str | None) -> None:
        while True:
            try:
                if resource_version is None:
                    resource_version = await self._list()
                async for event in self._client.watch(
                    self.kind,
                    namespace=self.namespace,
                    resource_version=resource_version,
                    label_selector=self._label_selector,
                ):
                    # Timestamp first: everything after this line is the harness's own cost.
                    now = time.monotonic()
                    if event.type == "ERROR":
                        # Mostly 410 Gone in-stream: the resume point expired; list again.
                        raise error_from_status(
                            int(event.object.get("code") or 500), event.object, what="bench watch"
                        )
                    metadata = event.object.get("metadata") or {}
                    resource_version = str(metadata.get("resourceVersion") or resource_version)
                    if event.type == "ADDED":
                        self._arrived(event.object, now)
            except Gone:
                resource_version = None
            except KubeError as error:
                logger.warning("bench watch of %s restarts: %s", self.kind, error)
                await asyncio.sleep(RETRY_SECONDS)

    def _arrived(self, obj: dict[str, object], now: float) -> None:
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            return
        uid = str(metadata.get("uid", ""))
        if uid in self._seen:
            return
        self._seen.add(uid)
        cluster = str((metadata.get("labels") or {}).get(CLUSTER_LABEL, ""))
        keys = (ANY_CLUSTER, cluster) if cluster else (ANY_CLUSTER,)
        for key in keys:
            times = self._arrivals[key]
            times.append(now)
            self._wake(key, times)

    def _wake(self, key: str, times: list[float]) -> None:
        waiters = self._waiters.get(key)
        if not waiters:
            return
        for count, future in list(waiters):
            if len(times) >= count and not future.done():
                future.set_result(times[count - 1])
                waiters.remove((count, future))
