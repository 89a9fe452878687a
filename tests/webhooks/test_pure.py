"""The pure parts, as the controllers use them: validation of typed models, defaults, JSON Patch,
and the webhook configurations the operator registers."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_io.v1 import RayJob, RayService
from ray_operator.defaults import default_object, default_rayservice
from ray_operator.validation.rayjob import rayjob_immutable_errors, validate_rayjob
from ray_operator.validation.rayservice import validate_rayservice
from ray_operator.validation.serve_config import serve_config_errors
from ray_operator.webhooks.jsonpatch import json_patch
from ray_operator.webhooks.registration import WebhookEndpoint, webhook_configurations

from tests.webhooks.conftest import load_sample


def test_controllers_validate_typed_models_with_the_webhook_rules() -> None:
    rayjob = load_sample("ray-job.sample.yaml")
    rayjob["spec"]["backoffLimit"] = -1
    rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = 3

    errors = validate_rayjob(RayJob.model_validate(rayjob))

    assert [str(e) for e in errors] == [
        "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
        "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas: Invalid value: 3: must be less "
        "than or equal to maxReplicas (2)",
    ]


def test_valid_samples_have_no_errors() -> None:
    assert validate_rayjob(RayJob.model_validate(load_sample("ray-job.sample.yaml"))) == []
    service = load_sample("ray-service.sample.yaml", "RayService")
    assert validate_rayservice(RayService.model_validate(service)) == []


@pytest.mark.parametrize("status", ["", "New", "Suspended", "Complete", "Failed"])
def test_an_inactive_rayjob_may_change_its_entrypoint(status: str) -> None:
    old = load_sample("ray-job.sample.yaml")
    old["status"] = {"jobDeploymentStatus": status}
    new = copy.deepcopy(old)
    new["spec"]["entrypoint"] = "python other.py"
    assert rayjob_immutable_errors(new, old) == []


def test_serve_config_reports_every_problem_at_once() -> None:
    text = (
        "applications:\n"
        "- {name: a, route_prefix: /x, import_path: m:app}\n"
        "- {name: a, route_prefix: /x, import_path: 'm::app'}\n"
    )
    errors = [str(e) for e in serve_config_errors(text, path="spec.serveConfigV2")]
    assert errors == [
        'spec.serveConfigV2.applications[1].name: Duplicate value: "a"',
        'spec.serveConfigV2.applications[1].route_prefix: Duplicate value: "/x"',
        'spec.serveConfigV2.applications[1].import_path: Invalid value: "m::app": may have at '
        "most one colon",
    ]


def test_huge_values_are_cut_in_messages() -> None:
    errors = serve_config_errors("x" * 100_000, path="spec.serveConfigV2")
    assert len(str(errors[0])) < 300


def test_rayservice_defaults_fill_only_what_is_missing() -> None:
    service = {"kind": "RayService", "spec": {"upgradeStrategy": {"type": "None"}}}
    assert default_rayservice(service)["spec"] == {
        "upgradeStrategy": {"type": "None"},
        "rayClusterDeletionDelaySeconds": 60,
    }
    assert service == {"kind": "RayService", "spec": {"upgradeStrategy": {"type": "None"}}}


@pytest.mark.parametrize("sample", ["ray-cluster.mini.yaml", "ray-job.sample.yaml"])
def test_rayclusters_and_rayjobs_get_no_stored_defaults(sample: str) -> None:
    manifest = load_sample(sample)
    assert default_object(manifest) == manifest


def test_json_patch_turns_one_document_into_the_other() -> None:
    before: dict[str, Any] = {"a": 1, "b/c": {"x": True}, "gone": [1], "l": [1, 2]}
    after: dict[str, Any] = {"a": 1.0, "b/c": {"x": True, "y~": None}, "l": [2], "new": {}}
    assert json_patch(before, after) == [
        {"op": "remove", "path": "/gone"},
        {"op": "replace", "path": "/a", "value": 1.0},
        {"op": "add", "path": "/b~1c/y~0", "value": None},
        {"op": "replace", "path": "/l", "value": [2]},
        {"op": "add", "path": "/new", "value": {}},
    ]


def test_in_cluster_configurations_fail_closed_and_skip_the_operator_namespace() -> None:
    endpoint = WebhookEndpoint(service_namespace="ray-system")
    validating, mutating = webhook_configurations(endpoint, ca_bundle=b"PEM")
    for configuration in (validating, mutating):
        assert len(configuration["webhooks"]) == 5  # the ray.io four and RayServeGraph
        for webhook in configuration["webhooks"]:
            assert webhook["failurePolicy"] == "Fail"
            assert webhook["timeoutSeconds"] == 5
            assert webhook["sideEffects"] == "None"
            assert webhook["admissionReviewVersions"] == ["v1"]
            assert webhook["namespaceSelector"] == {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["ray-system"],
                    }
                ]
            }
            assert webhook["clientConfig"]["service"]["namespace"] == "ray-system"
    paths = [w["clientConfig"]["service"]["path"] for w in validating["webhooks"]]
    assert paths == [
        "/validate-ray-io-v1-raycluster",
        "/validate-ray-io-v1-rayjob",
        "/validate-ray-io-v1-rayservice",
        "/validate-ray-io-v1-raycronjob",
        "/validate-ray-operator-io-v1alpha1-rayservegraph",
    ]


def test_out_of_cluster_configurations_call_the_url() -> None:
    endpoint = WebhookEndpoint(url_base="https://127.0.0.1:9443/")
    _, mutating = webhook_configurations(endpoint, ca_bundle=b"PEM")
    assert [w["clientConfig"]["url"] for w in mutating["webhooks"]] == [
        "https://127.0.0.1:9443/mutate-ray-io-v1-raycluster",
        "https://127.0.0.1:9443/mutate-ray-io-v1-rayjob",
        "https://127.0.0.1:9443/mutate-ray-io-v1-rayservice",
        "https://127.0.0.1:9443/mutate-ray-io-v1-raycronjob",
        "https://127.0.0.1:9443/mutate-ray-operator-io-v1alpha1-rayservegraph",
    ]
    assert all(w["namespaceSelector"] == {} for w in mutating["webhooks"])


def test_an_interactive_job_waiting_for_its_job_id_may_get_one() -> None:
    old = load_sample("ray-job.sample.yaml")
    old["spec"]["submissionMode"] = "InteractiveMode"
    old["status"] = {"jobDeploymentStatus": "Waiting"}
    new = copy.deepcopy(old)
    new["spec"]["jobId"] = "raysubmit_123"
    assert rayjob_immutable_errors(new, old) == []
