"""Specification: `spec.historyServerOptions` is refused while its gate is off, and with the gate on
it must satisfy KubeRay's rules plus the container rules the API server would apply at Pod
creation, every problem reported with its field path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.features import parse_feature_gates
from ray_operator.validation import validate_raycluster
from ray_operator.validation.history_server import MAX_COLLECTOR_ENV
from ray_operator.validation.limits import ClusterLimits

from tests.builders.clusters import raycluster

GATE_ON = ClusterLimits(feature_gates=parse_feature_gates("RayClusterHistoryServer=true"))
OPTIONS = "spec.historyServerOptions.collectorOptions"


def cluster_with(**collector: Any) -> dict[str, Any]:
    options = {
        "image": "collector:1",
        "env": [
            {"name": "STORAGE_BACKEND", "value": "GCS"},
            {"name": "GCS_BUCKET", "value": "b"},
        ],
        **collector,
    }
    return raycluster("history", historyServerOptions={"collectorOptions": options})


def messages(cluster: dict[str, Any]) -> list[str]:
    return [str(error) for error in validate_raycluster(cluster, limits=GATE_ON)]


def test_a_complete_collector_is_accepted_with_the_gate_on() -> None:
    assert messages(cluster_with()) == []


def test_with_the_gate_off_only_the_gate_is_named() -> None:
    broken = cluster_with(image="", env=[])
    assert [str(e) for e in validate_raycluster(broken)] == [
        "spec.historyServerOptions: Forbidden: the RayClusterHistoryServer feature gate is off in "
        "this operator (--feature-gates=RayClusterHistoryServer=true turns it on)"
    ]


def test_collector_options_are_required() -> None:
    cluster = raycluster("history", historyServerOptions={})
    assert messages(cluster) == [
        f"{OPTIONS}: Required value: the history server needs its collector sidecar"
    ]


def test_the_image_is_required() -> None:
    assert messages(cluster_with(image="")) == [
        f"{OPTIONS}.image: Required value: the collector container's image"
    ]


@pytest.mark.parametrize(
    "name",
    [
        "POD_IP",
        "FQ_RAY_IP",
        "RAY_CLUSTER_NAME",
        "RAY_CLUSTER_NAMESPACE",
        "RAY_ROLE",
        "OWNER_KIND",
        "OWNER_NAME",
        "EVENTS_PORT",
    ],
)
def test_env_vars_the_operator_sets_are_refused(name: str) -> None:
    cluster = cluster_with()
    cluster["spec"]["historyServerOptions"]["collectorOptions"]["env"].append(
        {"name": name, "value": "x"}
    )
    assert messages(cluster) == [
        f"{OPTIONS}.env[2].name: Forbidden: {name} is set by the operator in the collector "
        "container"
    ]


@pytest.mark.parametrize(
    "backend",
    [
        {"name": "STORAGE_BACKEND", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "STORAGE_BACKEND", "value": ""},
        None,
    ],
    ids=["from-a-config-map", "empty", "absent"],
)
def test_the_storage_backend_must_be_a_literal(backend: dict[str, Any] | None) -> None:
    env = [{"name": "GCS_BUCKET", "value": "b"}] + ([backend] if backend else [])
    assert messages(cluster_with(env=env)) == [
        f"{OPTIONS}.env: Required value: STORAGE_BACKEND must be set with a literal value"
    ]


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"STORAGE_BACKEND": "gcs"}, ["GCS_BUCKET must be set when STORAGE_BACKEND is GCS"]),
        ({"STORAGE_BACKEND": "S3"}, ["S3_REGION must be set when STORAGE_BACKEND is S3"]),
        (
            {"STORAGE_BACKEND": "AliyunOSS", "OSS_ENDPOINT": "e"},
            [
                "OSS_BUCKET must be set when STORAGE_BACKEND is ALIYUNOSS",
                "OSS_REGION must be set when STORAGE_BACKEND is ALIYUNOSS",
            ],
        ),
        (
            {"STORAGE_BACKEND": "AZUREBLOB"},
            [
                "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_URL must be set when "
                "STORAGE_BACKEND is AZUREBLOB"
            ],
        ),
        (
            {"STORAGE_BACKEND": "AZUREBLOB", "AZURE_STORAGE_AUTH_MODE": " Workload_Identity "},
            ["AZURE_STORAGE_ACCOUNT_URL must be set when STORAGE_BACKEND is AZUREBLOB"],
        ),
        (
            {
                "STORAGE_BACKEND": "AZUREBLOB",
                "AZURE_STORAGE_AUTH_MODE": "connection_string",
                "AZURE_STORAGE_ACCOUNT_URL": "https://a",
            },
            ["AZURE_STORAGE_CONNECTION_STRING must be set when STORAGE_BACKEND is AZUREBLOB"],
        ),
        ({"STORAGE_BACKEND": "S3", "S3_REGION": "eu-west-1"}, []),
        ({"STORAGE_BACKEND": "somewhere-new"}, []),
    ],
)
def test_each_backend_needs_kuberays_settings(env: dict[str, str], missing: list[str]) -> None:
    entries = [{"name": name, "value": value} for name, value in env.items()]
    assert messages(cluster_with(env=entries)) == [
        f"{OPTIONS}.env: Required value: {detail}" for detail in missing
    ]


def test_a_secret_reference_counts_as_a_value_for_a_backend_setting() -> None:
    env = [
        {"name": "STORAGE_BACKEND", "value": "AZUREBLOB"},
        {
            "name": "AZURE_STORAGE_CONNECTION_STRING",
            "valueFrom": {"secretKeyRef": {"name": "azure", "key": "connection"}},
        },
    ]
    assert messages(cluster_with(env=env)) == []


def test_a_template_container_cannot_take_the_collectors_name() -> None:
    cluster = cluster_with()
    worker = copy.deepcopy(cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"])
    worker["containers"].append({**worker["containers"][0], "name": "ray-history-collector"})
    cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"] = worker
    assert messages(cluster) == [
        "spec.workerGroupSpecs[0].template.spec.containers[1].name: Invalid value: "
        '"ray-history-collector": is the name of the collector sidecar historyServerOptions adds'
    ]


def test_what_the_api_server_would_refuse_at_pod_creation_is_refused_at_admission() -> None:
    cluster = cluster_with(
        image=" collector:1",
        imagePullPolicy="Sometimes",
        resources={"limits": {"cpu": "1"}, "requests": {"cpu": "2", "memory": "lots"}},
    )
    cluster["spec"]["historyServerOptions"]["collectorOptions"]["env"].append({"name": "A=B"})
    assert messages(cluster) == [
        f'{OPTIONS}.imagePullPolicy: Unsupported value: "Sometimes": supported values: '
        '"Always", "IfNotPresent", "Never"',
        f'{OPTIONS}.image: Invalid value: " collector:1": must not have leading or trailing '
        "whitespace",
        f'{OPTIONS}.env[2].name: Invalid value: "A=B": a valid environment variable name must '
        "consist only of printable ASCII characters other than '='",
        f'{OPTIONS}.resources.requests[memory]: Invalid value: "lots": '
        "quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        f'{OPTIONS}.resources.requests: Invalid value: "2": must be less than or equal to cpu '
        "limit of 1",
    ]


def test_a_huge_env_list_is_refused_without_reading_it() -> None:
    env = [{"name": f"V{index}", "value": "x"} for index in range(MAX_COLLECTOR_ENV + 1)]
    assert messages(cluster_with(env=env)) == [
        f"{OPTIONS}.env: Invalid value: {MAX_COLLECTOR_ENV + 1}: "
        f"must have at most {MAX_COLLECTOR_ENV} items"
    ]
