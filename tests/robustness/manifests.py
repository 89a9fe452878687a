"""RayCluster manifests for the robustness tests: a healthy one, and the shapes that hurt.

Worker Pods of the large and hostile clusters name a scheduler that does not exist
(`UNSCHEDULED`): they sit in etcd, and neither kube-scheduler nor KWOK spends the two shared cores
on thousands of them. What is measured is the operator's own work: creating and deleting.
"""

from __future__ import annotations

import copy
import json
from typing import Any

# The suite's one cluster builder (tests/ray_clusters.py), still importable from here.
from tests.ray_clusters import IMAGE as IMAGE
from tests.ray_clusters import container as container
from tests.ray_clusters import ray_cluster

INT32_MAX = 2**31 - 1
UNSCHEDULED = "nobody"
HOSTILE_LABEL = "robustness.ray-operator.io/hostile"


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
