"""Our Redis cleanup Job is the one KubeRay would build for the same cluster.

KubeRay builds it from the head Pod (`buildRedisCleanupJob`). The fixture
(../shared/fixtures/kuberay-created/ray-cluster.external-redis.yaml) holds the head Pod KubeRay
made for the Redis sample; applying KubeRay's own transformation to it must give our Job's Pod:
the same labels (node type `redis-cleanup`), annotations, image, env, mounts and ports, apart
from the one intended difference, `app.kubernetes.io/created-by`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ray_operator.builders.redis_cleanup import build_redis_cleanup_job

CREATED = (
    Path(__file__).resolve().parents[2].parent
    / "shared/fixtures/kuberay-created/ray-cluster.external-redis.yaml"
)
# Filled in by the API server in every container; not ours to build.
CONTAINER_DEFAULTS = ("imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy")
CREATED_BY = "app.kubernetes.io/created-by"


def _fixture() -> tuple[dict[str, Any], dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(CREATED.read_text()) if d]
    (cluster,) = [d for d in documents if d["kind"] == "RayCluster"]
    (head,) = [
        d
        for d in documents
        if d["kind"] == "Pod" and d["metadata"]["labels"]["ray.io/node-type"] == "head"
    ]
    cluster["metadata"]["uid"] = head["metadata"]["ownerReferences"][0]["uid"]
    return cluster, head


def kuberays_cleanup_container(head: dict[str, Any]) -> dict[str, Any]:
    """KubeRay's transformation of its head Pod's Ray container, restated."""
    container = {
        k: v for k, v in head["spec"]["containers"][0].items() if k not in CONTAINER_DEFAULTS
    }
    container.pop("livenessProbe", None)
    container.pop("readinessProbe", None)
    container["env"] = [
        *container.get("env", []),
        {"name": "RAY_redis_db_connect_retries", "value": "120"},
        {"name": "RAY_redis_db_connect_wait_milliseconds", "value": "500"},
    ]
    limits = {"cpu": "200m", "memory": "256Mi"}
    container["resources"] = {"limits": limits, "requests": dict(limits)}
    container["command"] = ["/bin/bash", "-c", "--"]
    return container


def without_api_defaults(container: dict[str, Any]) -> dict[str, Any]:
    """The container without what the API server defaults (a port's TCP, a fieldRef's v1)."""
    result = dict(container)
    result["ports"] = [
        {k: v for k, v in port.items() if (k, v) != ("protocol", "TCP")}
        for port in container.get("ports", [])
    ]
    result["env"] = []
    for env in container.get("env", []):
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if field_ref is not None:
            field_ref = {k: v for k, v in field_ref.items() if (k, v) != ("apiVersion", "v1")}
            env = {**env, "valueFrom": {"fieldRef": field_ref}}
        result["env"].append(env)
    return result


def test_cleanup_pod_is_kuberays_head_pod_transformed_as_kuberay_does() -> None:
    cluster, head = _fixture()
    job = build_redis_cleanup_job(cluster)
    pod_spec = job["spec"]["template"]["spec"]
    [ours] = pod_spec["containers"]
    expected = kuberays_cleanup_container(head)
    assert ours.pop("args")[0].startswith('echo "To get more information')
    expected.pop("args", None)
    assert without_api_defaults(ours) == without_api_defaults(expected)


def test_labels_and_annotations_are_the_head_pods_with_the_cleanup_node_type() -> None:
    cluster, head = _fixture()
    job = build_redis_cleanup_job(cluster)
    expected_labels = {**head["metadata"]["labels"], "ray.io/node-type": "redis-cleanup"}
    labels = job["metadata"]["labels"]
    assert labels[CREATED_BY] == "ray-operator"
    assert expected_labels[CREATED_BY] == "kuberay-operator"
    assert {k: v for k, v in labels.items() if k != CREATED_BY} == {
        k: v for k, v in expected_labels.items() if k != CREATED_BY
    }
    assert job["metadata"]["annotations"] == head["metadata"]["annotations"]
    assert job["metadata"]["name"] == "raycluster-external-redis-redis-cleanup"


def test_the_cleanup_pod_keeps_the_heads_volumes() -> None:
    cluster, head = _fixture()
    pod_spec = build_redis_cleanup_job(cluster)["spec"]["template"]["spec"]
    assert pod_spec["volumes"] == head["spec"]["volumes"]
