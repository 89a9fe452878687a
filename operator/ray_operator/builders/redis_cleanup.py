"""The Redis cleanup Job of a deleted Redis-backed GCS FT cluster (KubeRay: buildRedisCleanupJob).

A head with GCS fault tolerance on Redis keeps the cluster's metadata under a storage namespace
in Redis; when the RayCluster is deleted that data would stay forever. KubeRay holds the cluster
with the finalizer `ray.io/gcs-ft-redis-cleanup-finalizer` and, once the head Pod is gone, runs
a Job built from the head Pod (same image, env, Redis address and credentials) whose only
container calls Ray's own `cleanup_redis_storage`. Same name (`<cluster>-redis-cleanup`) and
labels (`ray.io/cluster`, `ray.io/node-type: redis-cleanup`) here, so a Job started by either
operator is found by the other after a takeover. Also here: when a Job counts as finished and how
long deletion may wait for it (KubeRay's `ray.io/gcs-ft-deletion-timeout`, default 300 s).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.containers import shell_command
from ray_operator.builders.metadata import owner_references
from ray_operator.builders.pods import PodOptions, build_head_pod
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import check_label
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    cluster_annotations,
    cluster_name,
    cluster_namespace,
    is_gcs_ft_embedded,
    is_gcs_ft_enabled,
    spec,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster


REDIS_CLEANUP_NODE: Final = "redis-cleanup"
"""The `ray.io/node-type` of the cleanup Job and its Pod (KubeRay's `RedisCleanupNode`)."""
DELETION_TIMEOUT_ANNOTATION: Final = "ray.io/gcs-ft-deletion-timeout"
"""Seconds after the deletion request when the finalizer goes even if the cleanup has not."""
DEFAULT_DELETION_TIMEOUT_S: Final = 300
# KubeRay's TLS init container; the cleanup Pod's IP is never in the head certificate.
_TLS_WAIT_INIT_CONTAINER: Final = "wait-for-tls-ip-san"
_DOCS: Final = "https://docs.ray.io/en/master/cluster/kubernetes/user-guides/kuberay-gcs-ft.html"
# Ray's cleanup, given the first address of RAY_REDIS_ADDRESS and the storage namespace; it
# exits 1 when Ray reports that nothing could be deleted. The same script as KubeRay's.
_CLEANUP_PREFIX: Final = (
    'echo "To get more information about manually deleting the storage namespace in Redis and '
    "removing the RayCluster's finalizer, please check " + _DOCS + ' for more details." && '
    'python -c "from ray._private.gcs_utils import cleanup_redis_storage; '
    "from urllib.parse import urlparse; "
    "import os; "
    "import sys; "
    "redis_address = os.getenv('RAY_REDIS_ADDRESS', '').split(',')[0]; "
    "redis_address = redis_address if '://' in redis_address else 'redis://' + redis_address; "
    "parsed = urlparse(redis_address); "
)
_CLEANUP_CALL: Final = (
    "sys.exit(1) if not cleanup_redis_storage(host=parsed.hostname, port=parsed.port, {user}"
    "password=os.getenv('REDIS_PASSWORD', parsed.password or ''), "
    "use_ssl=parsed.scheme=='rediss', "
    "storage_namespace=os.getenv('RAY_external_storage_namespace')) else None\""
)
_USERNAME_ARGUMENT: Final = "username=os.getenv('REDIS_USERNAME', parsed.username), "
# Fixed: the cleanup is small, and must not take the head's GPUs.
_RESOURCES: Final = {"cpu": "200m", "memory": "256Mi"}
# Ray's defaults give a Redis that is slow to answer about 10 s; give it a minute.
_CONNECT_RETRY_ENV: Final = (
    {"name": "RAY_redis_db_connect_retries", "value": "120"},
    {"name": "RAY_redis_db_connect_wait_milliseconds", "value": "500"},
)
# Best effort: the Job gives up after 5 minutes, with no retry.
_ACTIVE_DEADLINE_S: Final = 300


def needs_redis_cleanup(cluster: RayCluster) -> bool:
    """Whether deleting the cluster must clean Redis: GCS FT on, with the Redis backend (asked
    every reconcile: no copy made)."""
    return is_gcs_ft_enabled(cluster) and not is_gcs_ft_embedded(spec(cluster))


def redis_cleanup_job_name(cluster: RayCluster) -> str:
    """`<cluster>-redis-cleanup`, clipped to a label value as KubeRay's `TrimJobName` does."""
    return check_label(f"{cluster_name(cluster)}-redis-cleanup")


def is_redis_cleanup_job(job: Mapping[str, Any]) -> bool:
    return (job["metadata"].get("labels") or {}).get(names.NODE_TYPE_LABEL) == REDIS_CLEANUP_NODE


def build_redis_cleanup_job(cluster: ClusterLike, *, options: PodOptions | None = None) -> JSON:
    """The Job: the head Pod's labels, annotations and Ray container, running Ray's cleanup."""
    manifest = as_cluster_manifest(cluster)
    pod = build_head_pod(manifest, suffix="cleanup", options=options)
    labels = {**pod["metadata"]["labels"], names.NODE_TYPE_LABEL: REDIS_CLEANUP_NODE}
    annotations = dict(pod["metadata"].get("annotations") or {})
    pod_spec = pod["spec"]
    container = pod_spec["containers"][0]
    pod_spec["containers"] = [container]
    init_containers = [
        c for c in pod_spec.get("initContainers") or () if c.get("name") != _TLS_WAIT_INIT_CONTAINER
    ]
    if init_containers:
        pod_spec["initContainers"] = init_containers
    else:
        pod_spec.pop("initContainers", None)
    login_shell = options.login_shell if options is not None else False
    container["command"] = shell_command(login_shell=login_shell)
    container["args"] = [cleanup_script(container)]
    container.pop("livenessProbe", None)
    container.pop("readinessProbe", None)
    container["env"] = [*(container.get("env") or []), *(dict(e) for e in _CONNECT_RETRY_ENV)]
    container["resources"] = {"limits": dict(_RESOURCES), "requests": dict(_RESOURCES)}
    pod_spec["restartPolicy"] = "Never"
    meta: JSON = {
        "name": redis_cleanup_job_name(manifest),
        "namespace": cluster_namespace(manifest),
        "labels": labels,
        "annotations": annotations,
    }
    owners = owner_references(manifest)
    if owners:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": _ACTIVE_DEADLINE_S,
            "template": {
                "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
                "spec": pod_spec,
            },
        },
    }


def cleanup_script(container: JSON) -> str:
    """The shell line that runs Ray's `cleanup_redis_storage` (with a username when one is set)."""
    has_username = any(
        e.get("name") == names.ENV_REDIS_USERNAME for e in container.get("env") or ()
    )
    return _CLEANUP_PREFIX + _CLEANUP_CALL.format(user=_USERNAME_ARGUMENT if has_username else "")


def job_outcome(job: Mapping[str, Any]) -> str | None:
    """ "Complete" or "Failed" once the Job has finished, else None (KubeRay's `IsJobFinished`).

    `FailureTarget` counts as failed: it comes tens of seconds before `Failed` when the
    deadline passes, and waiting for the latter gains nothing.
    """
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
        if condition.get("type") == "FailureTarget":
            return "Failed"
    return None


def deletion_timeout_s(cluster: RayCluster) -> int:
    """How long after its deletion request the cluster waits for the cleanup (the annotation, if
    a positive integer, else 300 s)."""
    text = cluster_annotations(cluster).get(DELETION_TIMEOUT_ANNOTATION, "")
    # Digits only, and at most 9 of them: int() never sees a huge user-written number.
    if text.isascii() and text.isdigit() and len(text) <= 9 and int(text) > 0:
        return int(text)
    return DEFAULT_DELETION_TIMEOUT_S
