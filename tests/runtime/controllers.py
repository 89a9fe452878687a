"""Test-only controllers (fakes live in tests/, never in the package).

`ScriptedController` records every reconcile and does what a test scripts for a key (wait for a
gate, fail a number of times, ask for a requeue). `MarkingController` is the trivial real one
the process tests plug into `ray-operator run`: it stamps each RayCluster with the replica that
reconciled it, which is how a test sees *who* reconciles.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_operator.runtime import (
    RAY_CLUSTER,
    ControllerContext,
    Kind,
    ObjectKey,
    Result,
    cluster_key_from_label,
    own_key,
)

RECONCILED_BY_ANNOTATION = "test.ray.io/reconciled-by"
REPLICA_ENV = "TEST_REPLICA_NAME"


@dataclass
class Script:
    """What `ScriptedController` does for one key."""

    gate: asyncio.Event | None = None
    """Wait for this before returning."""
    failures: int = 0
    """Raise this many times first."""
    requeue_after: float | None = None
    """Return `Result(requeue_after=...)`."""


@dataclass
class ScriptedController:
    """Reconciles RayCluster keys by recording them; behaviour scripted per key."""

    kind: Kind = RAY_CLUSTER
    reads: tuple[Kind, ...] | None = None  # None: every watched kind (see runtime.workers)
    scripts: dict[ObjectKey, Script] = field(default_factory=dict)
    calls: list[tuple[ObjectKey, float]] = field(default_factory=list)
    running: set[ObjectKey] = field(default_factory=set)
    max_running: int = 0
    overlapped: bool = False

    def keys_for(self, kind: Kind, obj: Mapping[str, Any]) -> Iterable[ObjectKey]:
        return own_key(kind, obj, of=RAY_CLUSTER) + cluster_key_from_label(obj)

    async def reconcile(self, key: ObjectKey) -> Result:
        self.overlapped = self.overlapped or key in self.running
        self.running.add(key)
        self.max_running = max(self.max_running, len(self.running))
        self.calls.append((key, asyncio.get_running_loop().time()))
        try:
            script = self.scripts.get(key, Script())
            if script.gate is not None:
                await script.gate.wait()
            if script.failures > 0:
                script.failures -= 1
                raise RuntimeError(f"scripted failure of {key}")
            return Result(requeue_after=script.requeue_after)
        finally:
            self.running.discard(key)

    def times(self, key: ObjectKey) -> list[float]:
        """When `key` was reconciled (loop time)."""
        return [when for called, when in self.calls if called == key]


class MarkingController:
    """Annotates each RayCluster with `$TEST_REPLICA_NAME`: proof of who reconciled it."""

    kind = RAY_CLUSTER

    def __init__(self, context: ControllerContext) -> None:
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._replica = os.environ.get(REPLICA_ENV, "unnamed")

    def keys_for(self, kind: Kind, obj: Mapping[str, Any]) -> Iterable[ObjectKey]:
        return own_key(kind, obj, of=RAY_CLUSTER)

    async def reconcile(self, key: ObjectKey) -> Result:
        cluster = self._store.get(RAY_CLUSTER, key.namespace, key.name)
        if cluster is None:
            return Result()
        annotations = cluster["metadata"].get("annotations") or {}
        if annotations.get(RECONCILED_BY_ANNOTATION) == self._replica:
            return Result()
        await self._client.patch(
            RAY_CLUSTER,
            key.name,
            namespace=key.namespace,
            patch={"metadata": {"annotations": {RECONCILED_BY_ANNOTATION: self._replica}}},
        )
        self._events.record(cluster, reason="Marked", message=f"by {self._replica}")
        return Result()
