"""The Redis cleanup Job of a Redis-backed GCS FT cluster, as KubeRay's `buildRedisCleanupJob`."""

from __future__ import annotations

from typing import Any

from ray_operator.builders.redis_cleanup import (
    build_redis_cleanup_job,
    deletion_timeout_s,
    job_outcome,
    needs_redis_cleanup,
    redis_cleanup_job_name,
)

from tests.builders.clusters import env_of, raycluster


def _redis(**options: Any) -> dict[str, Any]:
    return raycluster(
        gcsFaultToleranceOptions={"redisAddress": "redis:6379", **options},
    )


def test_redis_backed_fault_tolerance_needs_the_cleanup() -> None:
    assert needs_redis_cleanup(_redis())
    legacy = raycluster()
    legacy["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    assert needs_redis_cleanup(legacy)
    assert not needs_redis_cleanup(raycluster())
    assert not needs_redis_cleanup(raycluster(gcsFaultToleranceOptions={"backend": "rocksdb"}))


def test_job_has_kuberays_name_and_node_type_and_is_owned_by_the_cluster() -> None:
    job = build_redis_cleanup_job(_redis())
    meta = job["metadata"]
    assert meta["name"] == "demo-redis-cleanup"
    assert meta["labels"]["ray.io/cluster"] == "demo"
    assert meta["labels"]["ray.io/node-type"] == "redis-cleanup"
    assert meta["labels"]["app.kubernetes.io/created-by"] == "ray-operator"
    assert job["spec"]["template"]["metadata"]["labels"] == meta["labels"]
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert meta["annotations"]["ray.io/external-storage-namespace"] == "uid-1"


def test_job_runs_once_for_at_most_five_minutes_without_restarts() -> None:
    spec = build_redis_cleanup_job(_redis())["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 300
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_only_the_ray_container_runs_rays_cleanup_without_probes() -> None:
    cluster = _redis()
    cluster["spec"]["enableInTreeAutoscaling"] = True  # the head also gets the autoscaler
    pod_spec = build_redis_cleanup_job(cluster)["spec"]["template"]["spec"]
    [container] = pod_spec["containers"]
    assert container["command"] == ["/bin/bash", "-c", "--"]
    [script] = container["args"]
    assert "from ray._private.gcs_utils import cleanup_redis_storage" in script
    assert "storage_namespace=os.getenv('RAY_external_storage_namespace')" in script
    assert "username=" not in script
    assert "livenessProbe" not in container
    assert "readinessProbe" not in container
    limits = {"cpu": "200m", "memory": "256Mi"}
    assert container["resources"] == {"limits": limits, "requests": limits}


def test_job_has_the_heads_redis_address_namespace_and_a_minute_of_retries() -> None:
    container = build_redis_cleanup_job(_redis())["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert env["RAY_REDIS_ADDRESS"] == "redis:6379"
    assert env["RAY_external_storage_namespace"] == "uid-1"
    assert env["RAY_redis_db_connect_retries"] == "120"
    assert env["RAY_redis_db_connect_wait_milliseconds"] == "500"


def test_a_redis_username_is_passed_to_the_cleanup() -> None:
    secret = {"valueFrom": {"secretKeyRef": {"name": "redis", "key": "user"}}}
    container = build_redis_cleanup_job(_redis(redisUsername=secret))["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "username=os.getenv('REDIS_USERNAME', parsed.username)" in container["args"][0]


def test_a_long_cluster_name_is_clipped_to_a_label_value() -> None:
    cluster = raycluster(name="c" * 60)
    assert redis_cleanup_job_name(cluster) == ("c" * 60 + "-redis-cleanup")[-63:]


def test_job_outcome_follows_its_conditions() -> None:
    def job(*conditions: tuple[str, str]) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}

    assert job_outcome(job()) is None
    assert job_outcome(job(("Complete", "True"))) == "Complete"
    assert job_outcome(job(("Failed", "True"))) == "Failed"
    assert job_outcome(job(("FailureTarget", "True"))) == "Failed"
    assert job_outcome(job(("Complete", "False"))) is None


def test_deletion_timeout_is_five_minutes_unless_annotated_with_positive_seconds() -> None:
    def annotated(value: str) -> dict[str, Any]:
        cluster = raycluster()
        cluster["metadata"]["annotations"] = {"ray.io/gcs-ft-deletion-timeout": value}
        return cluster

    assert deletion_timeout_s(raycluster()) == 300
    assert deletion_timeout_s(annotated("30")) == 30
    for invalid in ("0", "-5", "soon", "9" * 100_000, "１２"):
        assert deletion_timeout_s(annotated(invalid)) == 300
