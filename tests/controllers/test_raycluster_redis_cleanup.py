"""Redis-backed GCS fault tolerance: deleting the cluster cleans its data out of Redis first.

Issue 13, section 2, as KubeRay does it: a RayCluster with GCS FT on Redis gets the finalizer
`ray.io/gcs-ft-redis-cleanup-finalizer` before anything is created; on delete its Pods go, and
once the head is gone the Job `<cluster>-redis-cleanup` (built from the head Pod, running Ray's
`cleanup_redis_storage`) runs; when it has finished — completed, or failed (a Warning) — or the
deletion timeout passed, the finalizer goes. Same names as KubeRay, so a cluster whose deletion
KubeRay began is finished here. No Job controller runs on the test control plane: the tests
play it, writing the Job's outcome into its status as the Job controller would.
"""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.app import Operator

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness, StartClusterOperator
from tests.controllers.redis_clusters import (
    FINALIZER,
    cluster_or_none,
    redis_cluster,
    with_finalizer,
)


async def events(harness: Harness, reason: str) -> list[dict[str, Any]]:
    listed = await harness.get_json("events", "--field-selector", f"reason={reason}")
    items: list[dict[str, Any]] = listed["items"]
    return items


async def job(harness: Harness, name: str) -> dict[str, Any] | None:
    listed = await harness.get_json("jobs", "--field-selector", f"metadata.name={name}")
    items: list[dict[str, Any]] = listed["items"]
    return items[0] if items else None


async def cleanup_job(harness: Harness, name: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        return await job(harness, f"{name}-redis-cleanup")

    found: dict[str, Any] = await harness.eventually(check, what="the Redis cleanup Job")
    return found


async def cluster_gone(harness: Harness, name: str) -> None:
    async def check() -> bool:
        return await cluster_or_none(harness, name) is None

    await harness.eventually(check, what=f"RayCluster {name} gone")


async def finish_job(harness: Harness, name: str, outcome: str) -> None:
    """Record the Job's end as the Job controller would ("Complete" or "Failed")."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if outcome == "Complete":
        status = (
            f'{{"startTime": "{now}", "completionTime": "{now}", "succeeded": 1, "conditions": '
            f'[{{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "{now}"}}, '
            f'{{"type": "Complete", "status": "True", "lastTransitionTime": "{now}"}}]}}'
        )
    else:
        status = (
            f'{{"startTime": "{now}", "failed": 1, "conditions": '
            f'[{{"type": "FailureTarget", "status": "True", "lastTransitionTime": "{now}", '
            f'"reason": "BackoffLimitExceeded"}}, {{"type": "Failed", "status": "True", '
            f'"lastTransitionTime": "{now}", "reason": "BackoffLimitExceeded"}}]}}'
        )
    await harness.kubectl(
        "patch", "job", name, "--subresource=status", "--type=merge",
        "-p", f'{{"status": {status}}}',
    )  # fmt: skip


async def delete_when_running(harness: Harness, name: str) -> dict[str, Any]:
    """Wait until the cluster has its Pods, then ask for its deletion; the cluster as it was."""
    await harness.pods_settled(name, head=1, workers=1)
    cluster = await harness.cluster(name)
    await harness.kubectl("delete", "raycluster", name, "--wait=false")
    return cluster


async def test_redis_ft_cluster_is_finalized_and_non_ft_cluster_is_not(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(redis_cluster())
    await harness.apply(scalable_cluster("plain"))
    await with_finalizer(harness, "redis-ft")
    await harness.pods_settled("redis-ft", head=1, workers=1)
    await harness.pods_settled("plain", head=1, workers=1)
    assert (await harness.cluster("plain"))["metadata"].get("finalizers") is None


async def test_delete_cleans_redis_after_the_head_is_gone_then_lets_the_cluster_go(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(redis_cluster())
    cluster = await delete_when_running(harness, "redis-ft")
    found = await cleanup_job(harness, "redis-ft")
    assert await harness.pods("redis-ft") == []  # the head went first
    labels = found["metadata"]["labels"]
    assert labels["ray.io/cluster"] == "redis-ft"
    assert labels["ray.io/node-type"] == "redis-cleanup"
    assert labels["app.kubernetes.io/created-by"] == "ray-operator"
    assert found["metadata"]["ownerReferences"][0]["uid"] == cluster["metadata"]["uid"]
    [created] = await events(harness, "CreatedRedisCleanupJob")
    assert (
        created["message"]
        == f"Created Redis cleanup Job {harness.namespace}/redis-ft-redis-cleanup"
    )
    assert await cluster_or_none(harness, "redis-ft") is not None  # held until the Job ends

    await finish_job(harness, "redis-ft-redis-cleanup", "Complete")
    await cluster_gone(harness, "redis-ft")

    async def job_deleted() -> bool:
        left = await job(harness, "redis-ft-redis-cleanup")
        return left is None or bool(left["metadata"].get("deletionTimestamp"))

    # No garbage collector here: the operator deletes the Job with its cluster.
    await harness.eventually(job_deleted, what="the cleanup Job deleted with its cluster")
    assert len(await events(harness, "CreatedRedisCleanupJob")) == 1


async def test_a_failed_cleanup_still_lets_the_cluster_go_with_a_warning(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(redis_cluster())
    await delete_when_running(harness, "redis-ft")
    await cleanup_job(harness, "redis-ft")
    await finish_job(harness, "redis-ft-redis-cleanup", "Failed")
    await cluster_gone(harness, "redis-ft")
    [warning] = await events(harness, "RedisCleanupJobFailed")
    assert warning["type"] == "Warning"
    assert "delete the storage namespace" in warning["message"]


async def test_a_cleanup_that_outlasts_the_deletion_timeout_is_given_up(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(redis_cluster(**{"ray.io/gcs-ft-deletion-timeout": "3"}))
    await delete_when_running(harness, "redis-ft")
    await cluster_gone(harness, "redis-ft")  # the Job never finishes
    [warning] = await events(harness, "ForceDeletedStuckCluster")
    assert warning["type"] == "Warning"
    assert "Force-removed GCS FT finalizer after 3s" in warning["message"]


async def test_with_cleanup_disabled_no_finalizer_is_added(
    harness: Harness,
    start_cluster_operator: StartClusterOperator,
) -> None:
    await start_cluster_operator(redis_cleanup=False)
    await harness.apply(redis_cluster())
    await harness.pods_settled("redis-ft", head=1, workers=1)
    assert (await harness.cluster("redis-ft"))["metadata"].get("finalizers") is None


async def test_a_stale_finalizer_on_an_embedded_backend_cluster_is_removed_on_delete(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster("embedded", gcsFaultToleranceOptions={"backend": "rocksdb"})
    cluster["metadata"]["finalizers"] = [FINALIZER]
    await harness.apply(cluster)
    await harness.eventually(
        lambda: job_or_pods(harness, "embedded"), what="the cluster reconciled"
    )
    await harness.kubectl("delete", "raycluster", "embedded", "--wait=false")
    await cluster_gone(harness, "embedded")
    assert await job(harness, "embedded-redis-cleanup") is None


async def job_or_pods(harness: Harness, name: str) -> bool:
    return bool(await harness.pods(name))


async def test_a_deletion_kuberay_began_is_finished_with_its_own_job(
    harness: Harness,
    start_cluster_operator: StartClusterOperator,
) -> None:
    # KubeRay ran here: it finalized the cluster, deleted its Pods on delete and started its
    # cleanup Job (KubeRay's labels: the head Pod's, `created-by: kuberay-operator`), then
    # stopped before the Job finished.
    cluster = redis_cluster()
    cluster["metadata"]["finalizers"] = [FINALIZER]
    await harness.apply(cluster)
    uid = (await harness.cluster("redis-ft"))["metadata"]["uid"]
    await harness.apply(kuberays_cleanup_job("redis-ft", uid))
    await harness.kubectl("delete", "raycluster", "redis-ft", "--wait=false")
    before = await cleanup_job(harness, "redis-ft")

    await start_cluster_operator()
    await finish_job(harness, "redis-ft-redis-cleanup", "Complete")
    await cluster_gone(harness, "redis-ft")
    assert harness.created_pods == {}
    assert await events(harness, "CreatedRedisCleanupJob") == []
    after = await job(harness, "redis-ft-redis-cleanup")
    assert after is None or after["metadata"]["uid"] == before["metadata"]["uid"]


def kuberays_cleanup_job(cluster: str, uid: str) -> dict[str, Any]:
    labels = {
        "ray.io/cluster": cluster,
        "ray.io/node-type": "redis-cleanup",
        "ray.io/group": "headgroup",
        "ray.io/identifier": f"{cluster}-head",
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{cluster}-redis-cleanup",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": cluster,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 300,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}],
                },
            },
        },
    }
