"""Specification of the CRDs: KubeRay's names, versions and subresources, kubectl's columns and
`kubectl explain` text, and a size the API server can store."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from ray_operator.apigen.manifests import MAX_CRD_BYTES
from ray_operator.apigen.schema import RAY_TYPES_FILE
from ray_operator.crds import crd_manifests

from tests.api.crds import CRD_FILES, load_crd, table, walk
from tests.api.manifests import REPO_ROOT
from tests.conftest import Kubectl


def openapi_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = load_crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_crd_serves_and_stores_ray_io_v1_with_a_status_subresource_and_no_scale(kind: str) -> None:
    spec = load_crd(kind)["spec"]
    assert spec["group"] == "ray.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["categories"] == ["all"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_crd_fits_in_one_etcd_request_with_room_for_managed_fields(kind: str) -> None:
    compact = json.dumps(load_crd(kind), separators=(",", ":"))
    assert len(compact) < MAX_CRD_BYTES


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_crd_schema_is_structural(kind: str) -> None:
    for path, schema in walk(openapi_schema(kind)):
        assert "$ref" not in schema, path
        assert not ("properties" in schema and "additionalProperties" in schema), path
        assert "type" in schema or schema.get("x-kubernetes-int-or-string"), path


def test_quantities_and_int_or_strings_accept_numbers_and_strings() -> None:
    schema = dict(walk(openapi_schema("RayCluster")))
    container = ".spec.headGroupSpec.template.spec.containers[]"
    cpu_limit = schema[f"{container}.resources.limits{{}}"]
    assert cpu_limit["x-kubernetes-int-or-string"] is True
    assert cpu_limit["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert "pattern" in cpu_limit
    probe_port = schema[f"{container}.livenessProbe.httpGet.port"]
    assert probe_port["x-kubernetes-int-or-string"] is True


def test_embedded_pod_metadata_keeps_only_what_a_template_needs() -> None:
    schema = dict(walk(openapi_schema("RayCluster")))
    metadata = schema[".spec.headGroupSpec.template.metadata"]
    assert sorted(metadata["properties"]) == [
        "annotations",
        "finalizers",
        "labels",
        "name",
        "namespace",
    ]
    assert schema[".metadata"] == {"type": "object"}


def test_worker_group_defaults_and_required_fields_match_kuberay() -> None:
    group = dict(walk(openapi_schema("RayCluster")))[".spec.workerGroupSpecs[]"]
    assert sorted(group["required"]) == ["groupName", "maxReplicas", "minReplicas", "template"]
    defaults = {name: field.get("default") for name, field in group["properties"].items()}
    assert defaults["replicas"] == 0
    assert defaults["minReplicas"] == 0
    assert defaults["maxReplicas"] == 2147483647
    assert defaults["numOfHosts"] == 1


def test_every_ray_field_has_a_description() -> None:
    ray_types = yaml.safe_load(RAY_TYPES_FILE.read_text())
    for type_name, definition in ray_types.items():
        assert definition.get("description"), type_name
        for field, schema in definition.get("properties", {}).items():
            described_by_type = ray_types.get(schema.get("$ref"), {}).get("description")
            assert schema.get("description") or described_by_type, f"{type_name}.{field}"


def test_ray_field_descriptions_reach_the_crds() -> None:
    schema = dict(walk(openapi_schema("RayJob")))
    group = schema[".spec.rayClusterSpec.workerGroupSpecs[]"]
    assert all(field.get("description") for field in group["properties"].values())
    # Kubernetes types keep the first sentence of their own documentation.
    probe = schema[".spec.rayClusterSpec.headGroupSpec.template.spec.containers[].readinessProbe"]
    assert probe["properties"]["periodSeconds"]["description"].startswith("How often")


def test_packaged_crds_are_the_crd_directory() -> None:
    serve_graph = yaml.load(
        (REPO_ROOT / "crd" / "ray-operator.io_rayservegraphs.yaml").read_text(),
        Loader=yaml.CSafeLoader,
    )
    legacy = yaml.load(
        (REPO_ROOT / "crd" / "legacy" / "cluster.ray.io_rayclusters.yaml").read_text(),
        Loader=yaml.CSafeLoader,
    )
    ray_io = [load_crd(kind) for kind in ("RayCluster", "RayCronJob", "RayJob", "RayService")]
    assert crd_manifests() == [*ray_io, serve_graph]
    assert crd_manifests(legacy=True) == [*ray_io, serve_graph, legacy]


def test_kubectl_get_shows_the_printer_columns(kubectl: Kubectl, namespace: str) -> None:
    samples = REPO_ROOT / "samples"
    for name in ("ray-cluster.mini.yaml", "ray-job.sample.yaml", "ray-service.sample.yaml"):
        kubectl("apply", "--server-side", "-n", namespace, "-f", str(samples / name))
    kubectl(
        "patch",
        "raycluster",
        "ray-mini",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "desiredWorkerReplicas": 1,
                    "availableWorkerReplicas": 1,
                    "desiredCPU": "2",
                    "desiredMemory": "3Gi",
                    "desiredGPU": "0",
                    "state": "ready",
                }
            }
        ),
    )
    kubectl(
        "patch",
        "rayjob",
        "ray-job-sample",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "status": {
                    "jobStatus": "RUNNING",
                    "jobDeploymentStatus": "Running",
                    "startTime": "2026-01-01T00:00:00Z",
                }
            }
        ),
    )
    kubectl(
        "patch",
        "rayservice",
        "ray-service-sample",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"serviceStatus": "Running", "numServeEndpoints": 2}}),
    )

    output = kubectl("get", "rayclusters,rayjobs,rayservices", "-n", namespace)

    cluster_header, cluster_row = table(output, "raycluster.ray.io/ray-mini")
    assert cluster_header == [
        "NAME",
        "DESIRED WORKERS",
        "AVAILABLE WORKERS",
        "CPUS",
        "MEMORY",
        "GPUS",
        "STATUS",
        "AGE",
    ]
    assert cluster_row[1:7] == ["1", "1", "2", "3Gi", "0", "ready"]
    job_header, job_row = table(output, "rayjob.ray.io/ray-job-sample")
    assert job_header == [
        "NAME",
        "JOB STATUS",
        "DEPLOYMENT STATUS",
        "RAY CLUSTER NAME",
        "START TIME",
        "END TIME",
        "AGE",
    ]
    assert job_row[1:3] == ["RUNNING", "Running"]
    service_header, service_row = table(output, "rayservice.ray.io/ray-service-sample")
    assert service_header == ["NAME", "SERVICE STATUS", "NUM SERVE ENDPOINTS", "AGE"]
    assert service_row[1:3] == ["Running", "2"]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("raycluster.spec.workerGroupSpecs", "Groups of identical worker Pods"),
        ("raycluster.spec.workerGroupSpecs.rayStartParams", "Flags of `ray start`"),
        ("raycluster.spec.headGroupSpec.template.spec.containers.livenessProbe", "probe"),
        ("rayjob.spec.submissionMode", "K8sJobMode"),
        ("rayservice.spec.serveConfigV2", "Ray Serve config"),
    ],
)
def test_kubectl_explain_describes_the_fields(kubectl: Kubectl, field: str, expected: str) -> None:
    output = kubectl("explain", field)
    description = " ".join(output.split("DESCRIPTION:", 1)[1].split())
    assert expected in description


def test_kubectl_explain_lists_worker_group_fields_with_their_descriptions(
    kubectl: Kubectl,
) -> None:
    output = kubectl("explain", "raycluster.spec.workerGroupSpecs")
    fields = output.split("FIELDS:", 1)[1]
    for name in (
        "groupName",
        "replicas",
        "minReplicas",
        "maxReplicas",
        "rayStartParams",
        "template",
    ):
        assert f"\n  {name}\t" in fields
    assert "Fewest replicas the group may be scaled to." in " ".join(fields.split())


def test_crd_files_hold_one_custom_resource_definition_each() -> None:
    for path in CRD_FILES.values():
        documents = list(yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader))
        assert [document["kind"] for document in documents] == ["CustomResourceDefinition"]


# The operator decodes every watched object with Python's json, which recurses once per level
# and gives up (RecursionError) near 1000 levels; the API server stores up to 10,000. A field that
# keeps unknown fields lets a tenant nest that deep: the legacy `rayResources` did, and the
# watcher's RecursionError stopped the whole operator, again at every restart (issue 28).
MAX_SCHEMA_DEPTH = 100


def schema_depth(schema: dict[str, Any]) -> int:
    """How deeply an object valid for `schema` can nest JSON (at most; fails when unbounded)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        raise AssertionError("keeps unknown fields: any depth")
    children = [
        *(schema.get("properties") or {}).values(),
        *([schema["items"]] if isinstance(schema.get("items"), dict) else []),
        *(
            [schema["additionalProperties"]]
            if isinstance(schema.get("additionalProperties"), dict)
            else []
        ),
    ]
    return 1 + max((schema_depth(child) for child in children), default=0)


@pytest.mark.parametrize(
    "crd", crd_manifests(legacy=True), ids=lambda crd: str(crd["metadata"]["name"])
)
def test_no_crd_lets_a_tenant_nest_json_beyond_what_the_operator_decodes(
    crd: dict[str, Any],
) -> None:
    for version in crd["spec"]["versions"]:
        assert schema_depth(version["schema"]["openAPIV3Schema"]) < MAX_SCHEMA_DEPTH
