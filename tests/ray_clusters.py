"""The RayCluster manifest the suite builds when a test needs "a small cluster": a head and one
worker group of KubeRay's samples' shape, with the sizes, labels and scheduler a test asks for.

Robustness, adversarial and batch-scheduling tests all start from `ray_cluster`; what they change
(a hostile quantity, an unscheduled worker, a gang of workers) is said by its arguments.
"""

from __future__ import annotations

from typing import Any

IMAGE = "rayproject/ray:2.52.0"
RAY_VERSION = "2.52.0"


def container(name: str, *, limits: dict[str, str] | None = None) -> dict[str, Any]:
    """A Ray container of `IMAGE`, with resource limits if given."""
    resources = {"limits": limits} if limits else {}
    return {"name": name, "image": IMAGE, "resources": resources}


def ray_cluster(
    name: str,
    *,
    replicas: int = 1,
    min_replicas: int = 0,
    max_replicas: int | None = None,
    group: str = "workers",
    head_limits: dict[str, str] | None = None,
    worker_limits: dict[str, str] | None = None,
    scheduler: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A head and one group of `replicas` workers (`maxReplicas` = `replicas` unless given;
    workers left unscheduled if `scheduler` names a scheduler that does not exist)."""
    worker_pod: dict[str, Any] = {"containers": [container("ray-worker", limits=worker_limits)]}
    if scheduler:
        worker_pod["schedulerName"] = scheduler
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "rayVersion": RAY_VERSION,
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("ray-head", limits=head_limits)]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": group,
                    "replicas": replicas,
                    "minReplicas": min_replicas,
                    "maxReplicas": replicas if max_replicas is None else max_replicas,
                    "rayStartParams": {},
                    "template": {"spec": worker_pod},
                }
            ],
        },
    }
