"""The converted examples on the real control plane: `kubectl apply --validate=strict` with our
CRDs and our webhook accepts them, and our operator then runs the Pods the mapping promises."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ray_operator.app import Operator
from ray_operator.legacy.conversion import convert_legacy_cluster

from tests.controllers.conftest import Harness
from tests.legacy.legacy_clusters import load_example

EXPECTED = {
    "example_cluster.yaml": (2, '--resources="{\\"bar\\": 1, \\"foo\\": 1}"'),
    "example_cluster2.yaml": (1, '--resources="{\\"baz\\": 5, \\"quux\\": 17}"'),
}


def ray_start(pod: dict[str, Any]) -> str:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    return str(env["KUBERAY_GEN_RAY_START_CMD"])


@pytest.mark.parametrize("file_name", sorted(EXPECTED))
async def test_a_converted_example_is_accepted_and_runs_as_promised(
    file_name: str, webhook_namespace: str, harness: Harness, operator: Operator
) -> None:
    cluster = convert_legacy_cluster(load_example(file_name)).cluster
    workers, resources_flag = EXPECTED[file_name]

    await harness.kubectl(
        "apply", "--validate=strict", "-f", "-", input_text=yaml.safe_dump(cluster)
    )

    pods = await harness.pods_settled(cluster["metadata"]["name"], head=1, workers=workers)
    for pod in pods:
        for container in pod["spec"]["containers"]:
            assert "sleep infinity" not in " ".join(
                [*container.get("command", []), *container.get("args", [])]
            )
        if pod["metadata"]["labels"]["ray.io/node-type"] == "head":
            assert "--dashboard-host=0.0.0.0" in ray_start(pod)
        else:
            assert pod["metadata"]["labels"]["ray.io/group"] == "worker-node"
            assert resources_flag in ray_start(pod)
