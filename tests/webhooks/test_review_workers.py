"""The worker processes that answer large reviews off the event loop: none until a large review
comes, they answer like the inline code, stop when idle, survive the death of one of them, and
the webhook component gives them the operator's bounds.

The pool is tested directly (real processes) and inside the real `ray-operator run`, whose child
processes and RSS are read from /proc and whose webhooks are called over HTTPS.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, cast

from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.store import Store
from ray_operator.settings import Settings
from ray_operator.validation.limits import ClusterLimits
from ray_operator.webhooks import WebhookOptions, webhook_component
from ray_operator.webhooks.handlers import INLINE_REVIEW_BYTES
from ray_operator.webhooks.review import validate_review
from ray_operator.webhooks.workers import ReviewWorkers

from tests.webhooks.conftest import load_sample
from tests.webhooks.operator_process import (
    MIB,
    is_running,
    operator_with_webhooks,
    wait_for,
)
from tests.webhooks.reviews import RAYCLUSTER, insecure_context, pool_pids, review_bytes

# Below Kubernetes' 256 KiB bound on all annotations, so the padding changes no verdict.
PADDING_BYTES = 200_000


def _invalid_cluster(*, padding: int = 0) -> dict[str, Any]:
    """The mini sample with minReplicas > maxReplicas, padded with an annotation of `padding`."""
    cluster = load_sample("ray-cluster.mini.yaml")
    group = cluster["spec"]["workerGroupSpecs"][0]
    group["minReplicas"], group["maxReplicas"] = 5, 3
    if padding:
        cluster["metadata"]["annotations"] = {"example.com/padding": "x" * padding}
    return cluster


async def test_no_worker_process_exists_until_the_first_review() -> None:
    workers = ReviewWorkers()
    running_before = workers.running
    try:
        status, body = await workers.answer(
            review_bytes(load_sample("ray-cluster.mini.yaml")), RAYCLUSTER, validate_review
        )
        assert not running_before
        assert workers.running
        assert len(pool_pids(workers)) == 1  # a second only while the first is busy
        assert status == 200
        assert json.loads(body)["response"] == {"uid": "u-1", "allowed": True}
        status, body = await workers.answer(b"[]", RAYCLUSTER, validate_review)
        assert (status, body) == (400, b"the body is not a JSON object\n")
    finally:
        workers.stop()


async def test_the_pool_stops_after_its_idle_time_and_a_new_review_starts_another() -> None:
    workers = ReviewWorkers(idle_seconds=0.5)
    review = review_bytes(load_sample("ray-cluster.mini.yaml"))
    try:
        await workers.answer(review, RAYCLUSTER, validate_review)
        [pid] = pool_pids(workers)
        # Polled from a thread: the loop stays free to run the idle timer.
        await asyncio.to_thread(wait_for, lambda: not workers.running, "pool let go", 5)
        await asyncio.to_thread(wait_for, lambda: not is_running(pid), "worker exited", 10)
        status, _ = await workers.answer(review, RAYCLUSTER, validate_review)
        assert status == 200
        assert workers.running
    finally:
        workers.stop()


async def test_a_dead_worker_fails_one_review_and_the_next_is_answered() -> None:
    workers = ReviewWorkers(processes=1)
    review = review_bytes(load_sample("ray-cluster.mini.yaml"))
    try:
        await workers.answer(review, RAYCLUSTER, validate_review)
        [pid] = pool_pids(workers)
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would

        async def first_failure() -> BaseException:
            for _ in range(50):  # the pool notices the death within a few submissions
                try:
                    await workers.answer(review, RAYCLUSTER, validate_review)
                except BrokenProcessPool as error:
                    return error
                await asyncio.sleep(0.1)
            raise AssertionError("the dead worker was never noticed")

        assert isinstance(await first_failure(), BrokenProcessPool)
        status, _ = await workers.answer(review, RAYCLUSTER, validate_review)
        assert status == 200
    finally:
        workers.stop()


def component_context(settings: Settings) -> Any:
    """What `app.run` hands a component factory, without a client (these build, never call)."""
    context = cast(Any, type("Context", (), {}))()
    context.client = cast(Any, None)
    context.store = Store()
    context.metrics = Metrics()
    context.settings = settings
    return context


def test_the_webhook_component_validates_with_the_operators_pods_per_cluster_bound() -> None:
    context = component_context(Settings(identity="test", max_pods_per_cluster=7))
    webhooks = webhook_component(WebhookOptions())(context)
    assert webhooks.limits == ClusterLimits(max_pods_per_cluster=7)


def test_the_webhook_component_holds_specs_to_the_limits_the_operator_built_once() -> None:
    context = component_context(Settings(identity="test", max_pods_per_cluster=7))
    limits = ClusterLimits(max_pods_per_cluster=3)
    webhooks = webhook_component(WebhookOptions(), limits=limits)(context)
    assert webhooks.limits is limits


def post(port: int, path: str, body: bytes) -> dict[str, Any]:
    """POST a review to the webhook over HTTPS; its AdmissionReview answer (must be 200)."""
    connection = http.client.HTTPSConnection(
        "127.0.0.1", port, timeout=60, context=insecure_context()
    )
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        assert response.status == 200, answer[:200]
    finally:
        connection.close()
    return cast(dict[str, Any], json.loads(answer))


def test_an_operator_starts_a_worker_only_for_a_large_review_and_answers_it_as_inline(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    small = review_bytes(_invalid_cluster())
    large = review_bytes(_invalid_cluster(padding=PADDING_BYTES))
    assert len(small) <= INLINE_REVIEW_BYTES < len(large)
    mini = review_bytes(load_sample("ray-cluster.mini.yaml"))
    validate, mutate = "/validate-ray-io-v1-raycluster", "/mutate-ray-io-v1-raycluster"
    with operator_with_webhooks(control_plane.kubeconfig, namespace, tmp_path / "log") as running:
        assert running.child_pids() == []
        inline_answer = post(running.webhook_port, validate, small)
        assert post(running.webhook_port, validate, mini)["response"]["allowed"]
        assert post(running.webhook_port, mutate, mini)["response"]["allowed"]
        assert running.child_pids() == []
        idle_rss = running.rss_bytes()

        pooled_answer = post(running.webhook_port, validate, large)
        workers = running.child_pids()
        assert workers  # the pool (and multiprocessing's resource tracker)
        print(  # the figures for the record (pytest -s)
            f"\noperator RSS at idle {idle_rss / MIB:.0f} MiB, no child process; after one large "
            f"review {running.rss_bytes() / MIB:.0f} MiB + {len(workers)} children"
        )
    assert not inline_answer["response"]["allowed"]
    assert (
        "must be less than or equal to maxReplicas"
        in inline_answer["response"]["status"]["message"]
    )
    assert pooled_answer == inline_answer
    wait_for(lambda: not any(map(is_running, workers)), "the workers stopped with the operator", 10)
