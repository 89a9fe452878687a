"""The legacy operator's two published examples convert into exactly these RayClusters, with no
warning: everything they say, KubeRay says too (the keep-alive command, `ray stop`, the default
`ulimit`, `--head`, `--no-monitor` and the worker's `--address` are what KubeRay does itself)."""

from __future__ import annotations

from typing import Any

import pytest
from ray_operator.legacy.conversion import convert_legacy_cluster

from tests.legacy.legacy_clusters import load_example


def ray_node_container(*, head: bool) -> dict[str, Any]:
    """The examples' Ray container, without its keep-alive command."""
    container: dict[str, Any] = {
        "name": "ray-node",
        "imagePullPolicy": "Always",
        "image": "rayproject/ray:nightly",
    }
    if head:
        container["ports"] = [
            {"containerPort": 6379},
            {"containerPort": 10001},
            {"containerPort": 8265},
        ]
    container["volumeMounts"] = [{"mountPath": "/dev/shm", "name": "dshm"}]
    container["resources"] = {
        "requests": {"cpu": "1000m", "memory": "512Mi"},
        "limits": {"memory": "512Mi"},
    }
    return container


def expected_cluster(name: str, *, min_workers: int, resources: str) -> dict[str, Any]:
    """What both examples become: they differ in their name, minWorkers and rayResources."""
    pod_spec = {
        "restartPolicy": "Never",
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "enableInTreeAutoscaling": True,
            "autoscalerOptions": {"idleTimeoutSeconds": 300, "upscalingMode": "Conservative"},
            "upgradeStrategy": {"type": "Recreate"},
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": {
                    "spec": {**pod_spec, "containers": [ray_node_container(head=True)]},
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "worker-node",
                    "replicas": min_workers,
                    "minReplicas": min_workers,
                    "maxReplicas": 3,
                    "rayStartParams": {"resources": resources},
                    "template": {
                        "spec": {**pod_spec, "containers": [ray_node_container(head=False)]},
                    },
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [
        pytest.param(
            "example_cluster.yaml",
            expected_cluster(
                "example-cluster", min_workers=2, resources='"{\\"bar\\": 1, \\"foo\\": 1}"'
            ),
            id="example_cluster.yaml",
        ),
        pytest.param(
            "example_cluster2.yaml",
            expected_cluster(
                "example-cluster2", min_workers=1, resources='"{\\"baz\\": 5, \\"quux\\": 17}"'
            ),
            id="example_cluster2.yaml",
        ),
    ],
)
def test_a_published_example_converts_exactly_and_silently(
    file_name: str, expected: dict[str, Any]
) -> None:
    conversion = convert_legacy_cluster(load_example(file_name))
    assert conversion.cluster == expected
    assert conversion.warnings == ()
