"""RayCluster manifests for the robustness tests: a healthy one, and the shapes that hurt.

Worker Pods of the large and hostile clusters name a scheduler that does not exist
(`UNSCHEDULED`): they sit in etcd, and neither kube-scheduler nor KWOK spends the two shared cores
on thousands of them. What is measured is the operator's own work: creating and deleting.
"""

from __future__ import annotations

import copy
import json
from typing import Any

INT32_MAX = 2**31 - 1
IMAGE = "rayproject/ray:2.52.0"
UNSCHEDULED = "nobody"
HOSTILE_LABEL = "robustness.ray-operator.io/hostile"


def container(name: str, *, limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"limits": limits} if limits else {}
    return {"name": name, "image": IMAGE, "resources": resources}


def ray_cluster(
    name: str,
    *,
    replicas: int = 1,
    max_replicas: int | None = None,
    worker_limits: dict[str, str] | None = None,
    scheduler: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A head and one group of `replicas` workers (unscheduled workers if `scheduler` says so)."""
    worker_pod: dict[str, Any] = {"containers": [container("ray-worker", limits=worker_limits)]}
    if scheduler:
        worker_pod["schedulerName"] = scheduler
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("ray-head")]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": replicas,
                    "minReplicas": 0,
                    "maxReplicas": replicas if max_replicas is None else max_replicas,
                    "rayStartParams": {},
                    "template": {"spec": worker_pod},
                }
            ],
        },
    }


def huge_cluster(name: str) -> dict[str, Any]:
    """replicas = maxReplicas = 2^31 - 1: the CRD's int32 allows it."""
    return ray_cluster(name, replicas=INT32_MAX, scheduler=UNSCHEDULED)


def huge_quantity_cluster(name: str) -> dict[str, Any]:
    """A worker limit of `cpu: 1e10000000`: matches the CRD's quantity pattern."""
    return ray_cluster(name, worker_limits={"cpu": "1e10000000"})


def as_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest)


def with_replicas(manifest: dict[str, Any], replicas: int) -> dict[str, Any]:
    changed = copy.deepcopy(manifest)
    group = changed["spec"]["workerGroupSpecs"][0]
    group["replicas"] = group["maxReplicas"] = replicas
    return changed
