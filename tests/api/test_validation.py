"""Specification: the CRDs refuse what KubeRay's refuse, at the API server, with a message that
names the field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.api.manifests import SAMPLES
from tests.conftest import Kubectl


def mini_cluster() -> dict[str, Any]:
    cluster: dict[str, Any] = yaml.safe_load((SAMPLES / "ray-cluster.mini.yaml").read_text())
    return cluster


def apply(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> str:
    """Apply with strict validation; the error text, or "" when the server accepted it."""
    result = kubectl.run(
        "apply", "--server-side", "--validate=strict", "-n", namespace, "-f", "-",
        input_text=json.dumps(manifest),
    )  # fmt: skip
    return "" if result.returncode == 0 else result.stderr


def test_a_misspelt_field_is_refused(kubectl: Kubectl, namespace: str) -> None:
    cluster = mini_cluster()
    cluster["spec"]["workerGroupSpecs"][0]["replica"] = 2

    error = apply(kubectl, namespace, cluster)

    # Server-side apply refuses it while building the typed patch, before strict validation.
    assert ".spec.workerGroupSpecs[0].replica: field not declared in schema" in error


def test_a_worker_group_without_a_name_is_refused(kubectl: Kubectl, namespace: str) -> None:
    cluster = mini_cluster()
    del cluster["spec"]["workerGroupSpecs"][0]["groupName"]

    error = apply(kubectl, namespace, cluster)

    assert "spec.workerGroupSpecs[0].groupName: Required value" in error


def test_a_malformed_quantity_is_refused(kubectl: Kubectl, namespace: str) -> None:
    cluster = mini_cluster()
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"memory": "2 GB"}
    }

    error = apply(kubectl, namespace, cluster)

    assert "spec.headGroupSpec.template.spec.containers[0].resources.limits.memory" in error


def test_the_server_fills_in_worker_group_defaults(kubectl: Kubectl, namespace: str) -> None:
    cluster = mini_cluster()
    group = cluster["spec"]["workerGroupSpecs"][0]
    for field in ("replicas", "minReplicas", "maxReplicas"):
        del group[field]
    assert apply(kubectl, namespace, cluster) == ""

    stored = json.loads(kubectl("get", "raycluster", "ray-mini", "-n", namespace, "-o", "json"))

    stored_group = stored["spec"]["workerGroupSpecs"][0]
    assert (stored_group["replicas"], stored_group["minReplicas"]) == (0, 0)
    assert (stored_group["maxReplicas"], stored_group["numOfHosts"]) == (2147483647, 1)


def test_managed_by_takes_only_the_known_controllers(kubectl: Kubectl, namespace: str) -> None:
    cluster = mini_cluster()
    cluster["spec"]["managedBy"] = "someone-else"

    error = apply(kubectl, namespace, cluster)

    assert "spec.managedBy" in error
    assert "managedBy must be 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'" in error


def test_managed_by_cannot_change(kubectl: Kubectl, namespace: str) -> None:
    cluster = mini_cluster()
    cluster["spec"]["managedBy"] = "ray.io/kuberay-operator"
    assert apply(kubectl, namespace, cluster) == ""
    changed = copy.deepcopy(cluster)
    changed["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"

    error = apply(kubectl, namespace, changed)

    assert "managedBy is immutable" in error


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        (
            {
                "onSuccess": {"policy": "DeleteCluster"},
                "onFailure": {"policy": "DeleteNone"},
                "deletionRules": [{"policy": "DeleteSelf", "condition": {"jobStatus": "FAILED"}}],
            },
            "give either deletionRules or onSuccess/onFailure, not both",
        ),
        ({"onSuccess": {"policy": "DeleteCluster"}}, "give a non-empty deletionRules"),
        (
            {
                "deletionRules": [
                    {
                        "policy": "DeleteCluster",
                        "condition": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"},
                    }
                ]
            },
            "give jobStatus or jobDeploymentStatus, not both",
        ),
    ],
    ids=["legacy-and-rules", "legacy-half", "two-triggers"],
)
def test_inconsistent_deletion_strategies_are_refused(
    kubectl: Kubectl, namespace: str, strategy: dict[str, Any], message: str
) -> None:
    job: dict[str, Any] = next(yaml.safe_load_all((SAMPLES / "ray-job.sample.yaml").read_text()))
    job["spec"]["deletionStrategy"] = strategy

    error = apply(kubectl, namespace, job)

    assert message in error
