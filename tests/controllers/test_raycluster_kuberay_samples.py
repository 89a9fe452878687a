"""Every RayCluster sample KubeRay publishes, applied for real: we create what KubeRay would.

The whole sample file is applied (ConfigMaps, Secrets and Services in it are part of the scenario);
the Pods and Services the operator then creates must carry KubeRay's labels, Service ports and
`ray start` flags. The expected values are the ones written out in tests/builders.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ray_operator.app import Operator

from tests.builders.kuberay_expectations import EXPECTED_HEAD_SERVICE, EXPECTED_RAY_START
from tests.builders.samples import SAMPLES_DIR, raycluster_samples
from tests.controllers.conftest import Harness

KUBERAY_LABELS = {
    "ray.io/is-ray-node": "yes",
    "app.kubernetes.io/name": "kuberay",
    "app.kubernetes.io/created-by": "ray-operator",
}


def desired_workers(cluster: dict[str, Any]) -> dict[str, int]:
    """Worker Pods per group the spec asks for (replicas clamped to [min, max], times hosts)."""
    wanted = {}
    for group in cluster["spec"].get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        replicas = group.get("replicas", 1)
        replicas = max(group.get("minReplicas", 0), min(replicas, group.get("maxReplicas", 2**31)))
        wanted[group["groupName"]] = replicas * group.get("numOfHosts", 1)
    return wanted


def generated_ray_start(pod: dict[str, Any]) -> str:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    return str(env["KUBERAY_GEN_RAY_START_CMD"])


@pytest.mark.parametrize("file_name", sorted(raycluster_samples()))
async def test_operator_creates_kuberay_compatible_pods_and_services(
    file_name: str, harness: Harness, operator: Operator
) -> None:
    documents = [d for d in yaml.safe_load_all((SAMPLES_DIR / file_name).read_text()) if d]
    for document in documents:
        document.get("metadata", {}).pop("namespace", None)
    await harness.apply("---\n".join(yaml.safe_dump(d) for d in documents))
    cluster = raycluster_samples()[file_name]
    name = cluster["metadata"]["name"]
    wanted = desired_workers(cluster)

    async def all_pods_exist() -> list[dict[str, Any]] | None:
        pods = await harness.pods(name)
        heads = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
        return pods if len(heads) == 1 and len(pods) == 1 + sum(wanted.values()) else None

    pods = await harness.eventually(all_pods_exist, what=f"the Pods of {name}")
    head_line, worker_lines = EXPECTED_RAY_START[file_name]
    in_namespace = f".{harness.namespace}.svc.cluster.local"
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert KUBERAY_LABELS.items() <= labels.items()
        assert labels["ray.io/cluster"] == name
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("RayCluster", name, True)
        if labels["ray.io/node-type"] == "head":
            assert labels["ray.io/group"] == "headgroup"
            assert generated_ray_start(pod) == head_line
        else:
            expected = worker_lines[labels["ray.io/group"]].replace(
                ".default.svc.cluster.local", in_namespace
            )
            assert generated_ray_start(pod) == expected
    service = await harness.eventually(
        lambda: _head_service(harness, name), what=f"the head Service of {name}"
    )
    expected_type, expected_ports = EXPECTED_HEAD_SERVICE[file_name]
    assert service["spec"]["type"] == expected_type
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == expected_ports
    assert service["metadata"]["labels"]["ray.io/cluster"] == name


async def _head_service(harness: Harness, cluster: str) -> dict[str, Any] | None:
    listed = await harness.get_json(
        "services", "-l", f"ray.io/cluster={cluster},ray.io/node-type=head"
    )
    items: list[dict[str, Any]] = listed["items"]
    return items[0] if items else None
