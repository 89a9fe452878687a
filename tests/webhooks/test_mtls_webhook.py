"""Specification: our mTLS sample is refused by the webhook on the real API server while the
RayClusterMTLS gate is off, with the flag that turns it on; with the gate on the same webhook
admits it, and a template that clashes with the managed TLS is refused at its field."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from ray_operator.features import FeatureGates, gate_off_detail
from ray_operator.validation.limits import ClusterLimits
from ray_operator.webhooks.review import ADMISSION_KINDS, AdmissionKind, validate_review

from tests.conftest import REPO_ROOT, Kubectl

SAMPLE: dict[str, Any] = yaml.safe_load(
    (REPO_ROOT / "samples" / "mtls" / "ray-cluster.mtls.yaml").read_text()
)
GATE_ON = ClusterLimits(feature_gates=FeatureGates({"RayClusterMTLS": True}))


def raycluster_kind() -> AdmissionKind:
    (kind,) = [k for k in ADMISSION_KINDS if k.kind == "RayCluster"]
    return kind


def review_of(obj: dict[str, Any]) -> dict[str, Any]:
    request = {
        "uid": "u-1",
        "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
        "resource": {"group": "ray.io", "version": "v1", "resource": "rayclusters"},
        "operation": "CREATE",
        "name": obj["metadata"]["name"],
        "namespace": "ns1",
        "object": obj,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_with_the_gate_off_kubectl_is_told_the_flag(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    result = kubectl.run(
        "create", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(SAMPLE)
    )
    assert result.returncode != 0
    assert f"spec.tlsOptions: Forbidden: {gate_off_detail('RayClusterMTLS')}" in result.stderr


def test_with_the_gate_on_the_sample_is_admitted() -> None:
    answer = validate_review(review_of(SAMPLE), raycluster_kind(), limits=GATE_ON)
    assert answer["response"]["allowed"] is True


def test_with_the_gate_on_a_clash_is_refused_at_its_field() -> None:
    manifest = copy.deepcopy(SAMPLE)
    container = manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "RAY_USE_TLS", "value": "0"}]
    answer = validate_review(review_of(manifest), raycluster_kind(), limits=GATE_ON)["response"]
    assert answer["allowed"] is False
    (cause,) = answer["status"]["details"]["causes"]
    assert cause["field"] == "spec.headGroupSpec.template.spec.containers[0].env[0].name"
