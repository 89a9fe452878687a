"""A small scalable RayCluster manifest for the controller tests, and what they read back: worker
names, the operator's reconcile count."""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.app import Operator


def scalable_cluster(
    name: str = "scaling", *, replicas: int = 1, max_replicas: int = 20, **spec_extra: Any
) -> dict[str, Any]:
    container = {
        "name": "ray",
        "image": "rayproject/ray:2.52.0",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "small",
                    "replicas": replicas,
                    "minReplicas": 0,
                    "maxReplicas": max_replicas,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [copy.deepcopy(container)]}},
                }
            ],
            **spec_extra,
        },
    }


def worker_names(pods: list[dict[str, Any]]) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in pods
        if p["metadata"]["labels"]["ray.io/node-type"] == "worker"
    }


def reconcile_count(operator: Operator) -> float:
    return sum(
        sample.value
        for metric in operator.metrics.registry.collect()
        if metric.name == "ray_operator_reconcile"
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("kind") == "RayCluster"
    )
