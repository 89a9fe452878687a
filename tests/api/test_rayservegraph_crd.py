"""Specification of the RayServeGraph API (ray-operator.io/v1alpha1): its CRD reuses RayService's
definitions for the cluster, the API server applies its defaults and bounds, kubectl shows and
explains it, and its models are ray_io.v1's classes wherever the two APIs share a type."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from ray_io import v1
from ray_operator.apigen.schema import SERVE_GRAPH_TYPES_FILE
from ray_operator_io.v1alpha1 import models

from tests.api.crds import load_crd, table, walk
from tests.api.manifests import REPO_ROOT, SAMPLES
from tests.conftest import Kubectl, KubectlError

CRD_FILE = REPO_ROOT / "crd" / "ray-operator.io_rayservegraphs.yaml"
SAMPLE = SAMPLES / "ray-serve-graph.sample.yaml"
MINI_CLUSTER = yaml.safe_load((SAMPLES / "ray-cluster.mini.yaml").read_text())["spec"]


def serve_graph_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.load(CRD_FILE.read_text(), Loader=yaml.CSafeLoader)
    return crd


def properties(crd: dict[str, Any], path: str) -> dict[str, Any]:
    schema: dict[str, Any] = dict(walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))[
        path
    ]
    return schema


def minimal_graph(name: str, **source: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": name},
        "spec": {
            "source": {"url": "https://registry.example.com/graphs/g.pb", **source},
            "rayClusterSpec": MINI_CLUSTER,
        },
    }


def test_crd_serves_ray_operator_io_v1alpha1_with_a_short_name_and_a_status_subresource() -> None:
    crd = serve_graph_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "rayservegraphs.ray-operator.io"
    assert spec["group"] == "ray-operator.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "RayServeGraph"
    assert spec["names"]["plural"] == "rayservegraphs"
    assert spec["names"]["shortNames"] == ["rsg"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_crd_schema_is_structural() -> None:
    crd = serve_graph_crd()
    for path, schema in walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]):
        assert "$ref" not in schema, path
        assert "type" in schema or schema.get("x-kubernetes-int-or-string"), path


def test_cluster_fields_have_exactly_the_rayservice_schema() -> None:
    graph = serve_graph_crd()
    service = load_crd("RayService")

    def without_description(schema: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in schema.items() if key != "description"}

    assert without_description(properties(graph, ".spec.rayClusterSpec")) == without_description(
        properties(service, ".spec.rayClusterConfig")
    )
    assert without_description(properties(graph, ".spec.upgradeStrategy")) == without_description(
        properties(service, ".spec.upgradeStrategy")
    )
    assert properties(graph, ".spec.rayClusterDeletionDelaySeconds") == properties(
        service, ".spec.rayClusterDeletionDelaySeconds"
    )


def test_source_has_the_documented_defaults_and_bounds() -> None:
    source = properties(serve_graph_crd(), ".spec.source")
    assert source["required"] == ["url"]
    fields = source["properties"]
    assert fields["url"]["maxLength"] == 2048
    assert fields["pollInterval"]["default"] == "0s"
    assert (fields["timeoutSeconds"]["minimum"], fields["timeoutSeconds"]["maximum"]) == (1, 300)
    assert fields["timeoutSeconds"]["default"] == 30
    assert (fields["maxBytes"]["minimum"], fields["maxBytes"]["maximum"]) == (1, 256 * 2**10)
    assert fields["maxBytes"]["default"] == 256 * 2**10


def test_printer_columns_show_source_revision_phase_and_ready_when_wide() -> None:
    [version] = serve_graph_crd()["spec"]["versions"]
    columns = {column["name"]: column for column in version["additionalPrinterColumns"]}
    assert [column["name"] for column in version["additionalPrinterColumns"]] == [
        "source",
        "revision",
        "phase",
        "ready",
        "age",
    ]
    assert columns["source"]["jsonPath"] == ".spec.source.url"
    assert columns["revision"]["jsonPath"] == ".status.revision"
    assert columns["phase"]["jsonPath"] == ".status.phase"
    assert columns["ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["ready"]["priority"] == 1


def test_every_serve_graph_field_has_a_description() -> None:
    types = yaml.safe_load(SERVE_GRAPH_TYPES_FILE.read_text())
    for type_name, definition in types.items():
        assert definition.get("description"), type_name
        for field, schema in definition.get("properties", {}).items():
            # `$field` takes another type's field with its description.
            described_elsewhere = "$field" in schema or types.get(schema.get("$ref"), {}).get(
                "description"
            )
            assert schema.get("description") or described_elsewhere, f"{type_name}.{field}"
    for path, schema in walk(properties(serve_graph_crd(), ".spec.source")):
        assert schema.get("description"), path


def test_models_reuse_the_ray_io_classes_for_shared_types() -> None:
    assert models.RayClusterSpec is v1.RayClusterSpec
    assert models.RayServiceUpgradeStrategy is v1.RayServiceUpgradeStrategy
    assert models.Condition is v1.Condition
    graph = models.RayServeGraph.model_validate(minimal_graph("g"))
    assert isinstance(graph.spec.ray_cluster_spec, v1.RayClusterSpec)
    assert graph.spec.ray_cluster_spec.worker_group_specs is not None


def test_models_refuse_what_the_crd_refuses() -> None:
    document = minimal_graph("g", timeoutSeconds=301)
    with pytest.raises(ValueError, match="timeoutSeconds"):
        models.RayServeGraph.model_validate(document)


def test_crd_is_established_and_answers_to_its_short_name(kubectl: Kubectl, namespace: str) -> None:
    conditions = json.loads(
        kubectl("get", "crd", "rayservegraphs.ray-operator.io", "-o", "jsonpath={.status}")
    )["conditions"]
    assert {"type": "Established", "status": "True"}.items() <= next(
        condition for condition in conditions if condition["type"] == "Established"
    ).items()
    assert kubectl("get", "rsg", "-n", namespace, "-o", "name") == ""


def test_api_server_fills_in_the_source_defaults(kubectl: Kubectl, namespace: str) -> None:
    kubectl("create", "-n", namespace, "-f", "-", input_text=json.dumps(minimal_graph("g")))

    stored = json.loads(kubectl("get", "rsg", "g", "-n", namespace, "-o", "json"))

    source = stored["spec"]["source"]
    assert (source["pollInterval"], source["timeoutSeconds"], source["maxBytes"]) == (
        "0s",
        30,
        262144,
    )
    # The embedded cluster spec gets RayCluster's own defaults.
    [group] = stored["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["numOfHosts"] == 1


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ({"timeoutSeconds": 0}, "spec.source.timeoutSeconds"),
        ({"timeoutSeconds": 301}, "spec.source.timeoutSeconds"),
        ({"maxBytes": 256 * 2**10 + 1}, "spec.source.maxBytes"),
        ({"url": "https://example.com/" + "a" * 2048}, "spec.source.url"),
        ({"pollInterval": "5 minutes"}, "spec.source.pollInterval"),
        ({"tokenSecretRef": {"name": "token"}}, "spec.source.tokenSecretRef.key"),
    ],
)
def test_api_server_refuses_a_source_out_of_bounds(
    kubectl: Kubectl, namespace: str, source: dict[str, Any], field: str
) -> None:
    manifest = json.dumps(minimal_graph("g", **source))
    with pytest.raises(KubectlError) as refused:
        kubectl("create", "-n", namespace, "-f", "-", input_text=manifest)
    assert field in refused.value.stderr


def test_api_server_refuses_a_graph_without_a_cluster(kubectl: Kubectl, namespace: str) -> None:
    graph = minimal_graph("g")
    del graph["spec"]["rayClusterSpec"]
    with pytest.raises(KubectlError) as refused:
        kubectl("create", "-n", namespace, "-f", "-", input_text=json.dumps(graph))
    assert "spec.rayClusterSpec: Required value" in refused.value.stderr


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("rayservegraph.spec.source", "The URL of the graph document"),
        ("rayservegraph.spec.source.tokenSecretRef", "ray-operator.io/serve-graph-hosts"),
        ("rsg.spec.source.pollInterval", "Go duration"),
        ("rayservegraph.spec.rayClusterSpec", "same schema as a RayService's rayClusterConfig"),
        ("rayservegraph.status.revision", "first 12 hex digits"),
    ],
)
def test_kubectl_explain_describes_the_fields(kubectl: Kubectl, field: str, expected: str) -> None:
    output = kubectl("explain", field)
    description = " ".join(output.split("DESCRIPTION:", 1)[1].split())
    assert expected in description


def test_kubectl_explain_lists_the_source_fields(kubectl: Kubectl) -> None:
    fields = kubectl("explain", "rayservegraph.spec.source").split("FIELDS:", 1)[1]
    for name in (
        "url",
        "allowInsecureHTTP",
        "tokenSecretRef",
        "caBundleSecretRef",
        "pollInterval",
        "timeoutSeconds",
        "maxBytes",
    ):
        assert f"\n  {name}\t" in fields


def test_kubectl_get_shows_source_revision_phase_and_ready(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "--server-side", "-n", namespace, "-f", str(SAMPLE))
    status = {
        "observedGeneration": 1,
        "phase": "Ready",
        "revision": "3f2a9c1b7e0d",
        "artifact": {
            "url": "https://registry.example.com/graphs/pipeline.pb",
            "digest": "sha256:" + "3f2a9c1b7e0d" + "0" * 52,
            "etag": '"v1"',
            "fetchedAt": "2026-01-01T00:00:00Z",
            "sizeBytes": 120,
        },
        "graph": {
            "ingress": "pre",
            "deployments": ["model", "post", "pre"],
            "edges": [{"caller": "pre", "callee": "model", "argument": "model"}],
        },
        "serveConfigDigest": "sha256:" + "1" * 64,
        "rayServiceName": "pipeline",
        "lastRefreshHandled": "2026-01-01T00:00:00.123456Z",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    kubectl(
        "patch", "rsg", "pipeline", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip

    header, row = table(kubectl("get", "rsg", "-n", namespace), "pipeline")
    wide_header, wide_row = table(kubectl("get", "rsg", "-n", namespace, "-o", "wide"), "pipeline")
    stored = json.loads(kubectl("get", "rsg", "pipeline", "-n", namespace, "-o", "json"))

    assert header == ["NAME", "SOURCE", "REVISION", "PHASE", "AGE"]
    assert row[1:4] == ["https://registry.example.com/graphs/pipeline.pb", "3f2a9c1b7e0d", "Ready"]
    assert wide_header == ["NAME", "SOURCE", "REVISION", "PHASE", "READY", "AGE"]
    assert wide_row[4] == "True"
    assert stored["status"] == status
    model = models.RayServeGraph.model_validate(stored)
    assert model.model_dump(by_alias=True, exclude_unset=True) == stored
