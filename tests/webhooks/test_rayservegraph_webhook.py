"""Specification: RayServeGraphs (group ray-operator.io, not ray.io) are admitted by the same
webhooks: a bad spec is refused at once with every problem and its field path, the same
messages the controller reports; the configurations route the kind to its own paths."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from ray_operator.webhooks.registration import WebhookEndpoint, webhook_configurations
from ray_operator.webhooks.review import ADMISSION_KINDS, AdmissionKind, validate_review

from tests.builders.clusters import raycluster
from tests.conftest import Kubectl

PATH_SUFFIX = "ray-operator-io-v1alpha1-rayservegraph"


def serve_graph_kind() -> AdmissionKind:
    (kind,) = [kind for kind in ADMISSION_KINDS if kind.kind == "RayServeGraph"]
    return kind


def serve_graph(name: str = "pipeline", **source: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": name},
        "spec": {
            "source": {"url": "https://registry.example.com/graphs/pipeline.pb", **source},
            "rayClusterSpec": raycluster()["spec"],
        },
    }


def review_of(obj: dict[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    request = {
        "uid": "u-1",
        "kind": {"group": "ray-operator.io", "version": "v1alpha1", "kind": "RayServeGraph"},
        "resource": {
            "group": "ray-operator.io",
            "version": "v1alpha1",
            "resource": "rayservegraphs",
        },
        "operation": operation,
        "name": obj["metadata"]["name"],
        "namespace": "ns1",
        "object": obj,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_the_kind_is_admitted_in_its_own_group_and_version() -> None:
    kind = serve_graph_kind()
    assert (kind.group, kind.version, kind.plural) == (
        "ray-operator.io",
        "v1alpha1",
        "rayservegraphs",
    )


def test_a_valid_graph_is_allowed() -> None:
    answer = validate_review(review_of(serve_graph()), serve_graph_kind())
    assert answer["response"] == {"uid": "u-1", "allowed": True}


def test_a_bad_graph_is_refused_with_every_problem_and_its_field() -> None:
    graph = serve_graph(url="http://registry.example.com/g.pb", pollInterval="1s")
    answer = validate_review(review_of(graph), serve_graph_kind())["response"]
    assert answer["allowed"] is False
    status = answer["status"]
    assert status["code"] == 422
    assert status["message"].startswith('RayServeGraph.ray-operator.io "pipeline" is invalid: [')
    assert status["details"]["group"] == "ray-operator.io"
    assert [cause["field"] for cause in status["details"]["causes"]] == [
        "spec.source.url",
        "spec.source.pollInterval",
    ]


def test_an_update_to_a_bad_spec_is_refused_too() -> None:
    graph = serve_graph()
    graph["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = 9
    review = review_of(graph, operation="UPDATE")
    review["request"]["oldObject"] = serve_graph()
    answer = validate_review(review, serve_graph_kind())["response"]
    assert answer["allowed"] is False
    (cause,) = answer["status"]["details"]["causes"]
    assert cause["field"] == "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas"


def test_the_configurations_route_the_kind_to_its_paths() -> None:
    validating, mutating = webhook_configurations(
        WebhookEndpoint(service_namespace="ray-system"), ca_bundle=b"PEM"
    )
    for configuration, verb in ((validating, "validate"), (mutating, "mutate")):
        (webhook,) = [
            w for w in configuration["webhooks"] if w["rules"][0]["resources"] == ["rayservegraphs"]
        ]
        assert webhook["name"] == f"{verb[0]}rayservegraph.ray-operator.io"
        assert webhook["rules"][0]["apiGroups"] == ["ray-operator.io"]
        assert webhook["rules"][0]["apiVersions"] == ["v1alpha1"]
        assert webhook["clientConfig"]["service"]["path"] == f"/{verb}-{PATH_SUFFIX}"
        # KubeRay's kinds keep their group and paths.
        others = [w for w in configuration["webhooks"] if w is not webhook]
        assert {w["rules"][0]["apiGroups"][0] for w in others} == {"ray.io"}


def test_kubectl_apply_of_a_bad_graph_is_refused_with_the_field_path(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    graph = serve_graph(url="http://registry.example.com/g.pb")
    result = kubectl.run(
        "apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(graph)
    )
    assert result.returncode != 0
    assert (
        "spec.source.url: Forbidden: http:// sends the token in clear text; use https, or set "
        "allowInsecureHTTP" in result.stderr
    )
    assert kubectl("get", "rayservegraphs", "-n", webhook_namespace, "-o", "name") == ""


def test_kubectl_apply_of_a_graph_aimed_at_the_azure_wireserver_is_refused(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    graph = serve_graph(url="https://168.63.129.16/machine/?comp=goalstate")
    result = kubectl.run(
        "apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(graph)
    )
    assert result.returncode != 0
    assert (
        'spec.source.url: Invalid value: "https://168.63.129.16/machine/": the host is a cloud '
        "metadata address (168.63.129.16): the operator never fetches from it" in result.stderr
    )
    assert kubectl("get", "rayservegraphs", "-n", webhook_namespace, "-o", "name") == ""


def test_kubectl_apply_of_a_good_graph_is_admitted_and_an_update_checked(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    graph = serve_graph()
    kubectl("apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(graph))
    changed = copy.deepcopy(graph)
    changed["spec"]["source"]["url"] = "https://user:pw@registry.example.com/g.pb"
    result = kubectl.run(
        "apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(changed)
    )
    assert result.returncode != 0
    assert "spec.source.url: Forbidden: no user or password in the URL" in result.stderr
    assert ":pw@" not in result.stderr
    stored = json.loads(
        kubectl("get", "rayservegraph", "pipeline", "-n", webhook_namespace, "-o", "json")
    )
    assert stored["spec"]["source"]["url"] == graph["spec"]["source"]["url"]
