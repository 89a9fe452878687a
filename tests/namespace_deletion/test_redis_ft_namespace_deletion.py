"""Deleting a namespace never waits on a Redis cleanup Job that can never be created there.

The namespace controller deletes everything in a namespace being terminated, and the API server
refuses anything new in it — the cleanup Job and Events alike (403 with the
`NamespaceTerminating` cause). Retrying that create kept a namespace holding a Redis-FT
RayCluster in Terminating until the finalizer's deletion timeout (300 s; KubeRay's #3388).
"""

from __future__ import annotations

import logging
import time

import pytest
from ray_operator.app import Operator

from tests.conftest import Kubectl
from tests.controllers.conftest import Harness
from tests.controllers.redis_clusters import redis_cluster, with_finalizer

WITHIN_SECONDS = 30.0


async def test_deleting_the_namespace_of_a_redis_ft_cluster_finishes_within_30_seconds(
    kubectl: Kubectl, harness: Harness, operator: Operator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ray_operator")
    await harness.apply(redis_cluster())
    await with_finalizer(harness, "redis-ft")
    await harness.pods_settled("redis-ft", head=1, workers=1)

    started = time.monotonic()
    kubectl("delete", "namespace", harness.namespace, "--wait=false")

    async def namespace_gone() -> bool:
        return not kubectl("get", "namespace", harness.namespace, "--ignore-not-found").strip()

    await harness.eventually(
        namespace_gone, within=WITHIN_SECONDS, what=f"namespace {harness.namespace} gone"
    )
    assert time.monotonic() - started < WITHIN_SECONDS
    told = [
        r.getMessage() for r in caplog.records if "no Redis cleanup Job can run" in r.getMessage()
    ]
    assert len(told) == 1, told
    assert "the cluster's keys stay in Redis" in told[0]
