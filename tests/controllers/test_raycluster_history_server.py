"""Specification, on the real control plane: an operator whose RayCluster controller has the
RayClusterHistoryServer gate on gives every Pod of the history-server sample
KubeRay's collector sidecar, the shared /tmp/ray volume and the Ray event env vars, and keeps
KubeRay's hash of the spec on the head; without the gate, it creates no Pod for such a
cluster (written here without the webhook) and says why in the InvalidSpec condition and a
Warning event that name the flag.
"""

from __future__ import annotations

from typing import Any

import yaml
from ray_operator.features import parse_feature_gates
from ray_operator.spec.hashing import pod_template_hash

from tests.conftest import REPO_ROOT
from tests.controllers.conftest import Harness, StartClusterOperator

SAMPLE_FILE = REPO_ROOT / "samples" / "feature-gates" / "ray-cluster.history-server.yaml"
COLLECTOR = "ray-history-collector"
GATE_ON = parse_feature_gates("RayClusterHistoryServer=true")


def sample() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SAMPLE_FILE.read_text())
    return loaded


async def test_gate_on_every_ray_pod_gets_the_collector(
    harness: Harness, start_cluster_operator: StartClusterOperator
) -> None:
    await start_cluster_operator(feature_gates=GATE_ON)
    await harness.apply(sample())
    pods = await harness.pods_settled("history-demo", head=1, workers=2)
    for pod in pods:
        containers = {c["name"]: c for c in pod["spec"]["containers"]}
        assert list(containers)[-1] == COLLECTOR
        collector, ray = containers[COLLECTOR], pod["spec"]["containers"][0]
        role = "Head" if pod["metadata"]["labels"]["ray.io/node-type"] == "head" else "Worker"
        assert {"name": "RAY_ROLE", "value": role} in collector["env"]
        assert {"name": "S3_REGION", "value": "eu-west-1"} in collector["env"]
        assert collector["image"] == "quay.io/kuberay/collector:nightly"
        for container in (ray, collector):
            assert {"mountPath": "/tmp/ray", "name": "ray-logs"} in container["volumeMounts"]
        assert {"name": "RAY_enable_ray_event", "value": "true"} in ray["env"]
    (head,) = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    stored = await harness.cluster("history-demo")
    hash_annotation = head["metadata"]["annotations"]["ray.io/upgrade-strategy-recreate-hash"]
    assert hash_annotation == pod_template_hash(stored)


async def test_gate_off_the_cluster_gets_no_pod_and_is_told_which_flag(
    harness: Harness, start_cluster_operator: StartClusterOperator
) -> None:
    replica = await start_cluster_operator()
    await harness.apply(sample())

    async def invalid_message() -> str | None:
        status = (await harness.cluster("history-demo")).get("status", {})
        invalid = [c for c in status.get("conditions", []) if c["type"] == "InvalidSpec"]
        return invalid[0]["message"] if invalid else None

    message = await harness.eventually(invalid_message, what="InvalidSpec condition")
    assert message.startswith(
        "spec.historyServerOptions: Forbidden: the RayClusterHistoryServer feature gate is off"
    )
    assert "--feature-gates=RayClusterHistoryServer=true" in message
    events = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=history-demo,type=Warning"
    )
    assert [e["reason"] for e in events["items"]] == ["InvalidRayClusterSpec"]
    assert harness.created_pods == {}
    assert replica.heartbeat.lag() < 1.0
