"""The objects a benchmark creates: RayClusters, the bare-client twins of their Pods, strays.

- `bench_cluster`: 1 head + one worker group (3 workers by default), roomy `maxReplicas` so M2
  can scale it up without touching the limits.
- `raw_pod_and_service_bodies`: what the operator would create for such a cluster, built by the
  operator's own builders (same size on the wire), but neither labelled as ours nor owned, so an
  operator watching that namespace leaves them alone. The bare client creates these for the
  ceiling of M1.
- `unrelated_pod`: a bare Pod without any Ray label (M4), never scheduled (a scheduler name no
  scheduler claims), so it costs the control plane nothing after its create.
- `cached_stray_pod`: a worker Pod exactly as the operator builds one, labelled as ours, for a
  RayCluster that does not exist and without owner (M4: what one more cached Pod costs). It is
  scheduled and run like the operator's own, so its status is as large as theirs.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from ray_operator.builders.pods import build_head_pod, build_worker_pod
from ray_operator.builders.services import build_head_service
from ray_operator.spec import kuberay_names as names

Object = dict[str, Any]

WORKER_GROUP = "workers"
IMAGE = "rayproject/ray:2.52.0"
RAW_CREATOR = "ray-operator-bench-raw"
UNSCHEDULED = "ray-operator-bench-no-scheduler"


def bench_cluster(
    name: str, *, namespace: str, workers: int = 3, max_replicas: int = 10_000
) -> Object:
    """A RayCluster with one head and `workers` workers in group `workers`."""
    container = {
        "name": "ray",
        "image": IMAGE,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": WORKER_GROUP,
                    "replicas": workers,
                    "minReplicas": 0,
                    "maxReplicas": max_replicas,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [copy.deepcopy(container)]}},
                }
            ],
        },
    }


def scale_patch(replicas: int) -> list[Object]:
    """A JSON patch setting the worker group's replicas (merge patches would replace the list)."""
    return [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas}]


def raw_pod_and_service_bodies(
    name: str, *, namespace: str, workers: int = 3
) -> tuple[list[Object], Object]:
    """The head + worker Pods and head Service the operator would create, made anonymous."""
    cluster = bench_cluster(name, namespace=namespace, workers=workers)
    cluster["metadata"]["uid"] = str(uuid.uuid4())
    pods = [build_head_pod(cluster, suffix="head0")]
    pods += [
        build_worker_pod(cluster, WORKER_GROUP, suffix=f"w{index:04d}", replica_index=index)
        for index in range(workers)
    ]
    service = build_head_service(cluster)
    for body in (*pods, service):
        _anonymize(body)
    return pods, service


def unrelated_pod(name: str, *, namespace: str) -> Object:
    """A small bare Pod no operator label selects and no scheduler binds."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "unrelated"}},
        "spec": {
            "schedulerName": UNSCHEDULED,
            "containers": [
                {"name": "app", "image": "busybox:1.37", "command": ["sleep", "infinity"]}
            ],
        },
    }


def _anonymize(body: Object) -> None:
    metadata = body["metadata"]
    metadata.pop("ownerReferences", None)
    labels = metadata.setdefault("labels", {})
    # Same number of labels, but not ours: the operator's label selector must not match them.
    labels[names.CREATED_BY_LABEL] = RAW_CREATOR


def cached_stray_pod(name: str, *, namespace: str, cluster: str) -> Object:
    """A worker Pod of the (absent) RayCluster `cluster`, as the operator would build it."""
    owner = bench_cluster(cluster, namespace=namespace)
    owner["metadata"]["uid"] = str(uuid.uuid4())
    pod = build_worker_pod(owner, WORKER_GROUP, suffix=name, replica_index=0)
    pod["metadata"].pop("generateName", None)
    pod["metadata"].pop("ownerReferences", None)  # no garbage collector may take it away
    pod["metadata"]["name"] = name
    return pod
