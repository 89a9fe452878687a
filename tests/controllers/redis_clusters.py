"""A RayCluster with GCS fault tolerance on Redis, and a wait for the Redis cleanup finalizer the
operator puts on it."""

from __future__ import annotations

from typing import Any

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness
from tests.controllers.lookups import named_or_none

FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"


def redis_cluster(name: str = "redis-ft", **annotations: str) -> dict[str, Any]:
    cluster = scalable_cluster(name, gcsFaultToleranceOptions={"redisAddress": "redis:6379"})
    if annotations:
        cluster["metadata"]["annotations"] = annotations
    return cluster


async def cluster_or_none(harness: Harness, name: str) -> dict[str, Any] | None:
    return await named_or_none(harness, "rayclusters", name)


async def with_finalizer(harness: Harness, name: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        cluster = await cluster_or_none(harness, name)
        return (
            cluster if cluster and FINALIZER in cluster["metadata"].get("finalizers", []) else None
        )

    found: dict[str, Any] = await harness.eventually(check, what=f"{FINALIZER} on {name}")
    return found
