"""With its webhooks on, the operator refuses the specs that would hurt it, naming the field.

`ray-operator run` serves the webhooks on 127.0.0.1 with a self-managed certificate and
registers them with the real API server (the URL mode of `make run`); `kubectl apply` must then
fail with the webhook's message and the field path (issue 12, findings 1 and 8). The CRD's
schema admits both values (the tests without the webhook apply them): only the webhook stands
between them and the controller.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import Kubectl
from tests.robustness.manifests import as_text, huge_cluster, huge_quantity_cluster, ray_cluster
from tests.robustness.observe import OperatorUnderTest


def apply(
    kubectl: Kubectl, namespace: str, manifest: dict[str, Any], *dry_run: str
) -> tuple[int, str]:
    """`kubectl apply` (add "--dry-run=server" to only ask); exit code and stderr."""
    result = kubectl.run(
        "apply", *dry_run, "-n", namespace, "-f", "-", input_text=as_text(manifest)
    )
    return result.returncode, result.stderr


def test_the_webhook_admits_a_healthy_cluster(
    operator_with_webhooks: OperatorUnderTest, kubectl: Kubectl, namespace: str
) -> None:
    code, stderr = apply(kubectl, namespace, ray_cluster("healthy"), "--dry-run=server")
    assert code == 0, stderr


def test_a_quantity_of_1e10000000_is_refused_with_its_field_path(
    operator_with_webhooks: OperatorUnderTest, kubectl: Kubectl, namespace: str
) -> None:
    code, stderr = apply(kubectl, namespace, huge_quantity_cluster("hostile"))
    assert code != 0
    assert "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits" in stderr, stderr


def test_replicas_of_int32_max_are_refused_with_their_field_path(
    operator_with_webhooks: OperatorUnderTest, kubectl: Kubectl, namespace: str
) -> None:
    code, stderr = apply(kubectl, namespace, huge_cluster("huge"))
    assert code != 0
    assert (
        "spec.workerGroupSpecs[0].replicas" in stderr
        or "spec.workerGroupSpecs[0].maxReplicas" in stderr
    ), stderr
