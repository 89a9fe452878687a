"""UPDATE admission and stored defaults, through the real API server.

- An object already being deleted is always let through, whatever the update: a broken rule
  must never leave an object stuck in Terminating with its finalizer.
- What a RayJob submitted cannot change while the job runs.
- Defaults are stored in the object the API server keeps.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.conftest import Kubectl
from tests.webhooks.conftest import load_sample

BAD_BOUNDS = [
    {"op": "replace", "path": "/spec/workerGroupSpecs/0/minReplicas", "value": 5},
    {"op": "replace", "path": "/spec/workerGroupSpecs/0/maxReplicas", "value": 3},
]


def rayjob_deployed_as(kubectl: Kubectl, namespace: str, deployment_status: str) -> str:
    """The RayJob sample applied, with `jobDeploymentStatus` set in its status as the controller
    would set it; its name."""
    rayjob = load_sample("ray-job.sample.yaml")
    kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(rayjob))
    name: str = rayjob["metadata"]["name"]
    kubectl(
        "patch",
        "rayjob",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"jobDeploymentStatus": deployment_status}}),
    )
    return name


def rayjob_spec_patch(name: str, namespace: str, spec: dict[str, Any]) -> list[str]:
    """The kubectl arguments of a merge patch of the RayJob's `spec` with `spec`."""
    return [
        "patch",
        "rayjob",
        name,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": spec}),
    ]


def applied_and_stored(
    kubectl: Kubectl, namespace: str, rayservice: dict[str, Any]
) -> dict[str, Any]:
    """`rayservice` applied, as the API server then stores it (defaults included)."""
    kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(rayservice))
    stored: dict[str, Any] = json.loads(
        kubectl("get", "rayservice", rayservice["metadata"]["name"], "-n", namespace, "-o", "json")
    )
    return stored


def test_an_update_of_an_object_being_deleted_is_always_admitted(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    cluster = load_sample("ray-cluster.mini.yaml")
    cluster["metadata"]["finalizers"] = ["ray-operator.io/test-hold"]
    kubectl("apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(cluster))
    invalid_update = [
        "patch",
        "raycluster",
        "ray-mini",
        "-n",
        webhook_namespace,
        "--type=json",
        "-p",
        json.dumps(BAD_BOUNDS),
    ]
    refused = kubectl.run(*invalid_update)
    assert "must be less than or equal to maxReplicas (3)" in refused.stderr

    kubectl("delete", "raycluster", "ray-mini", "-n", webhook_namespace, "--wait=false")
    kubectl(*invalid_update)  # the same invalid change, now admitted
    kubectl(
        "patch",
        "raycluster",
        "ray-mini",
        "-n",
        webhook_namespace,
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/metadata/finalizers"}]',
    )
    assert kubectl("get", "raycluster", "-n", webhook_namespace, "-o", "name") == ""


def test_a_running_rayjob_keeps_what_it_submitted(kubectl: Kubectl, webhook_namespace: str) -> None:
    name = rayjob_deployed_as(kubectl, webhook_namespace, "Running")

    result = kubectl.run(
        *rayjob_spec_patch(name, webhook_namespace, {"entrypoint": "python other.py"})
    )

    assert result.returncode != 0
    assert "spec.entrypoint: Forbidden: cannot be changed while the job is Running" in result.stderr
    # What does not change the submission still may: here, the deadline.
    kubectl(*rayjob_spec_patch(name, webhook_namespace, {"activeDeadlineSeconds": 900}))


def test_a_finished_rayjob_may_change_again(kubectl: Kubectl, webhook_namespace: str) -> None:
    name = rayjob_deployed_as(kubectl, webhook_namespace, "Complete")

    kubectl(*rayjob_spec_patch(name, webhook_namespace, {"entrypoint": "python other.py"}))


def test_rayservice_defaults_are_stored(kubectl: Kubectl, webhook_namespace: str) -> None:
    rayservice = load_sample("ray-service.sample.yaml", "RayService")
    del rayservice["spec"]["upgradeStrategy"]
    del rayservice["spec"]["rayClusterDeletionDelaySeconds"]

    stored = applied_and_stored(kubectl, webhook_namespace, rayservice)
    assert stored["spec"]["rayClusterDeletionDelaySeconds"] == 60
    assert stored["spec"]["upgradeStrategy"] == {"type": "NewCluster"}


def test_explicit_values_are_never_overwritten_by_defaults(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    rayservice = load_sample("ray-service.sample.yaml", "RayService")
    rayservice["spec"]["upgradeStrategy"] = {"type": "None"}
    rayservice["spec"]["rayClusterDeletionDelaySeconds"] = 5

    stored = applied_and_stored(kubectl, webhook_namespace, rayservice)
    assert stored["spec"]["rayClusterDeletionDelaySeconds"] == 5
    assert stored["spec"]["upgradeStrategy"] == {"type": "None"}


def test_a_setting_without_effect_is_admitted_with_a_warning(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    rayjob = load_sample("ray-job.sample.yaml")
    del rayjob["spec"]["rayClusterSpec"]
    rayjob["spec"]["clusterSelector"] = {"ray.io/cluster": "existing"}
    rayjob["spec"]["backoffLimit"] = 0

    result = kubectl.run(
        "apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(rayjob)
    )

    assert result.returncode == 0, result.stderr
    assert "Warning: spec.shutdownAfterJobFinishes: has no effect with clusterSelector" in (
        result.stderr
    )
