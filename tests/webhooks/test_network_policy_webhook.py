"""Specification: `kubectl apply` of a RayCluster with `spec.networkPolicy` is refused while the
RayClusterNetworkPolicy gate is off, with a message naming the flag; with the gate on the webhook
admits the sample and refuses a bad rule at its field path. A RayJob embedding the field is
refused the same way."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from ray_operator.features import parse_feature_gates
from ray_operator.validation.limits import ClusterLimits
from ray_operator.webhooks.review import ADMISSION_KINDS, AdmissionKind, validate_review

from tests.conftest import REPO_ROOT, Kubectl

SAMPLE_PATH = REPO_ROOT / "samples" / "network-policy" / "ray-cluster.network-policy.yaml"
SAMPLE: dict[str, Any] = yaml.safe_load(SAMPLE_PATH.read_text())
GATE_ON = ClusterLimits(feature_gates=parse_feature_gates("RayClusterNetworkPolicy=true"))
GATE_OFF_MESSAGE = (
    "spec.networkPolicy: Forbidden: the RayClusterNetworkPolicy feature gate is off in this "
    "operator (--feature-gates=RayClusterNetworkPolicy=true turns it on)"
)


def kind_named(name: str) -> AdmissionKind:
    (kind,) = [kind for kind in ADMISSION_KINDS if kind.kind == name]
    return kind


def review_of(obj: dict[str, Any], kind: str = "RayCluster") -> dict[str, Any]:
    request = {
        "uid": "u-1",
        "kind": {"group": "ray.io", "version": "v1", "kind": kind},
        "resource": {"group": "ray.io", "version": "v1", "resource": f"{kind.lower()}s"},
        "operation": "CREATE",
        "name": obj["metadata"]["name"],
        "namespace": "ns1",
        "object": obj,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_kubectl_apply_is_refused_while_the_gate_is_off(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    result = kubectl.run("apply", "-n", webhook_namespace, "-f", str(SAMPLE_PATH))
    assert result.returncode != 0
    assert GATE_OFF_MESSAGE in result.stderr
    assert kubectl("get", "rayclusters", "-n", webhook_namespace, "-o", "name") == ""


def test_with_the_gate_on_the_sample_is_admitted() -> None:
    answer = validate_review(
        review_of(copy.deepcopy(SAMPLE)), kind_named("RayCluster"), limits=GATE_ON
    )
    assert answer["response"] == {"uid": "u-1", "allowed": True}


def test_with_the_gate_on_a_bad_rule_is_refused_at_its_field() -> None:
    bad = copy.deepcopy(SAMPLE)
    bad["spec"]["networkPolicy"]["head"]["ingressRules"][0]["ports"][0]["port"] = 0
    answer = validate_review(review_of(bad), kind_named("RayCluster"), limits=GATE_ON)["response"]
    assert answer["allowed"] is False
    (cause,) = answer["status"]["details"]["causes"]
    assert cause["field"] == "spec.networkPolicy.head.ingressRules[0].ports[0].port"


def test_a_rayjob_embedding_the_field_is_refused_while_the_gate_is_off() -> None:
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "fenced-job"},
        "spec": {"entrypoint": "python -V", "rayClusterSpec": copy.deepcopy(SAMPLE["spec"])},
    }
    answer = validate_review(review_of(rayjob, "RayJob"), kind_named("RayJob"))["response"]
    assert answer["allowed"] is False
    assert "spec.rayClusterSpec.networkPolicy" in answer["status"]["message"]
    assert "RayClusterNetworkPolicy=true turns it on" in answer["status"]["message"]
    allowed = validate_review(review_of(rayjob, "RayJob"), kind_named("RayJob"), limits=GATE_ON)
    assert allowed["response"]["allowed"] is True
