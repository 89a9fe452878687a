"""Specification of the generated models: real Kubernetes and KubeRay type names, Pythonic
attributes with the API's names as aliases, and no loss of unknown fields."""

from __future__ import annotations

import inspect

from pydantic import BaseModel
from ray_io import v1


def model_classes() -> dict[str, type[BaseModel]]:
    return {
        name: value
        for name, value in vars(v1).items()
        if inspect.isclass(value)
        and issubclass(value, BaseModel)
        and value.__module__ == v1.__name__
    }


def test_models_are_named_after_the_api_types() -> None:
    names = set(model_classes())
    expected = {
        "RayCluster",
        "RayClusterSpec",
        "RayClusterStatus",
        "HeadGroupSpec",
        "WorkerGroupSpec",
        "ScaleStrategy",
        "AutoscalerOptions",
        "RayJob",
        "RayJobSpec",
        "RayJobStatus",
        "RayService",
        "RayServiceSpec",
        "RayServiceStatuses",
        "PodTemplateSpec",
        "PodSpec",
        "Container",
        "Probe",
        "HTTPGetAction",
        "Service",
        "ServiceSpec",
        "ObjectMeta",
        "ResourceRequirements",
        "Affinity",
        "Toleration",
        "Volume",
        "Condition",
    }
    assert expected <= names


def test_no_model_name_is_a_numbered_collision() -> None:
    # FieldsV1 is the real name of a Kubernetes type; HttpGet17-style names are what we avoid.
    numbered = [name for name in model_classes() if name[-1].isdigit() and name != "FieldsV1"]
    assert numbered == []


def test_attributes_are_snake_case_and_dump_under_the_api_names() -> None:
    group = v1.WorkerGroupSpec.model_validate(
        {
            "groupName": "gpu",
            "minReplicas": 1,
            "maxReplicas": 4,
            "rayStartParams": {},
            "template": {
                "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray"}]}
            },
        }
    )
    assert group.group_name == "gpu"
    assert group.max_replicas == 4
    assert group.model_dump(by_alias=True, exclude_unset=True)["maxReplicas"] == 4


def test_models_can_be_built_by_attribute_name() -> None:
    probe = v1.Probe(http_get=v1.HTTPGetAction(path="/api/healthz", port=52365), period_seconds=5)
    assert probe.model_dump(by_alias=True, exclude_unset=True) == {
        "httpGet": {"path": "/api/healthz", "port": 52365},
        "periodSeconds": 5,
    }


def test_python_keywords_get_a_trailing_underscore() -> None:
    rule = v1.NetworkPolicyIngressRule.model_validate(
        {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}
    )
    assert rule.from_ is not None
    assert rule.model_dump(by_alias=True, exclude_unset=True) == {
        "from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]
    }


def test_quantities_and_int_or_strings_keep_their_json_type() -> None:
    requirements = v1.ResourceRequirements.model_validate({"limits": {"cpu": 1, "memory": "2Gi"}})
    assert requirements.limits == {"cpu": 1, "memory": "2Gi"}
    port = v1.HTTPGetAction.model_validate({"port": "dashboard"})
    assert port.port == "dashboard"


def test_defaulted_fields_may_be_left_out_as_the_api_server_fills_them_in() -> None:
    group = v1.WorkerGroupSpec.model_validate(
        {"groupName": "workers", "template": {"spec": {"containers": []}}}
    )
    assert (group.replicas, group.min_replicas, group.max_replicas, group.num_of_hosts) == (
        0,
        0,
        2147483647,
        1,
    )
    assert group.model_dump(by_alias=True, exclude_unset=True) == {
        "groupName": "workers",
        "template": {"spec": {"containers": []}},
    }


def test_unknown_fields_survive_a_round_trip() -> None:
    # A field from a newer Kubernetes must not vanish when the operator rewrites a template.
    container = {"name": "ray-head", "image": "rayproject/ray", "someFutureField": {"a": 1}}
    assert (
        v1.Container.model_validate(container).model_dump(by_alias=True, exclude_unset=True)
        == container
    )


def test_timestamps_stay_strings() -> None:
    meta = v1.ObjectMeta.model_validate({"creationTimestamp": "2026-01-01T00:00:00Z"})
    assert meta.creation_timestamp == "2026-01-01T00:00:00Z"
