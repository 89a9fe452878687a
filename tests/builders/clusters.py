"""Small RayCluster manifests for unit tests, built as plain dicts (what the watch cache holds)."""

from __future__ import annotations

import copy
from typing import Any


def ray_container(
    name: str = "ray", *, cpu: str = "1", memory: str = "2Gi", **extra: Any
) -> dict[str, Any]:
    limits = {"cpu": cpu, "memory": memory}
    return {
        "name": name,
        "image": "rayproject/ray:2.52.0",
        "resources": {"limits": limits, "requests": dict(limits)},
        **extra,
    }


def worker_group(
    name: str = "workers",
    *,
    replicas: int = 1,
    min_replicas: int = 0,
    max_replicas: int = 5,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "rayStartParams": {},
        "template": {"spec": {"containers": [ray_container("ray-worker")]}},
        **extra,
    }


def raycluster(
    name: str = "demo",
    *,
    namespace: str = "ns1",
    groups: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A valid RayCluster with one head and the given worker groups (one small group by default)."""
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [ray_container("ray-head")]}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-1", "generation": 1},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": head,
            "workerGroupSpecs": copy.deepcopy(groups) if groups is not None else [worker_group()],
            **spec,
        },
    }


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """Env var name → value (or valueFrom), last definition winning as in Kubernetes."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}
