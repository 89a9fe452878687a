"""Semantic validation of RayClusters: every violation, with a Kubernetes-style field path."""

from __future__ import annotations

from typing import Any

import pytest
from ray_io.v1 import RayCluster
from ray_operator.validation import (
    ErrorType,
    raycluster_warnings,
    summarize,
    validate_raycluster,
    validate_raycluster_status,
)
from ray_operator.validation.raycluster import GATED_FIELDS

from tests.builders.clusters import raycluster, worker_group
from tests.builders.samples import raycluster_samples


def _messages(cluster: Any) -> list[str]:
    return [str(error) for error in validate_raycluster(cluster)]


def _head_env(cluster: dict[str, Any], *env: dict[str, Any]) -> dict[str, Any]:
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = list(env)
    return cluster


@pytest.mark.parametrize("file_name", sorted(raycluster_samples()))
def test_kuberay_samples_are_valid(file_name: str) -> None:
    assert validate_raycluster(RayCluster.model_validate(raycluster_samples()[file_name])) == []


@pytest.mark.parametrize("field", sorted(GATED_FIELDS))
def test_every_gated_field_is_refused_by_default_and_names_its_gate(field: str) -> None:
    (error,) = validate_raycluster(raycluster(**{field: {}}))
    assert error.field == f"spec.{field}"
    assert GATED_FIELDS[field] in str(error)


def test_a_minimal_cluster_is_valid() -> None:
    assert validate_raycluster(raycluster()) == []


def test_min_replicas_above_max_names_field_value_and_bound() -> None:
    cluster = raycluster(
        groups=[worker_group(), worker_group("b", min_replicas=5, max_replicas=3, replicas=3)]
    )
    assert _messages(cluster) == [
        "spec.workerGroupSpecs[1].minReplicas: Invalid value: 5: must be less than or equal to maxReplicas (3)"  # noqa: E501
    ]


def test_all_violations_are_reported_at_once() -> None:
    cluster = raycluster(groups=[worker_group(min_replicas=-1), worker_group(max_replicas=-2)])
    cluster["metadata"]["name"] = "Bad_Name"
    fields = [error.field for error in validate_raycluster(cluster)]
    assert fields == [
        "metadata.name",
        "spec.workerGroupSpecs[0].minReplicas",
        "spec.workerGroupSpecs[1].groupName",
        "spec.workerGroupSpecs[1].maxReplicas",
        "spec.workerGroupSpecs[1].minReplicas",
    ]


def test_group_names_must_be_unique() -> None:
    errors = validate_raycluster(raycluster(groups=[worker_group("a"), worker_group("a")]))
    assert [(e.type, str(e)) for e in errors] == [
        (ErrorType.DUPLICATE, 'spec.workerGroupSpecs[1].groupName: Duplicate value: "a"')
    ]


def test_group_name_must_be_usable_as_a_label_value() -> None:
    assert _messages(raycluster(groups=[worker_group("bad name")]))[0].startswith(
        'spec.workerGroupSpecs[0].groupName: Invalid value: "bad name"'
    )


def test_cluster_name_must_leave_room_for_service_names() -> None:
    cluster = raycluster()
    cluster["metadata"]["name"] = "a" * 54
    assert _messages(cluster) == ["metadata.name: Too long: may not be more than 53 bytes"]


def test_head_needs_a_ray_container() -> None:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"] = []
    assert _messages(cluster) == [
        "spec.headGroupSpec.template.spec.containers: Required value: headGroupSpec should have at least one container"  # noqa: E501
    ]


def test_replica_bounds_are_required_without_autoscaling_only() -> None:
    group = worker_group()
    del group["minReplicas"], group["maxReplicas"]
    assert [e.field for e in validate_raycluster(raycluster(groups=[group]))] == [
        "spec.workerGroupSpecs[0].minReplicas",
        "spec.workerGroupSpecs[0].maxReplicas",
    ]
    assert validate_raycluster(raycluster(groups=[group], enableInTreeAutoscaling=True)) == []


def test_suspended_group_conflicts_with_autoscaling() -> None:
    cluster = raycluster(groups=[worker_group(suspend=True)], enableInTreeAutoscaling=True)
    assert [e.field for e in validate_raycluster(cluster)] == ["spec.workerGroupSpecs[0].suspend"]


def test_resources_in_both_places_are_rejected() -> None:
    group = worker_group(resources={"CPU": "1"}, rayStartParams={"num-cpus": "2"})
    assert [e.field for e in validate_raycluster(raycluster(groups=[group]))] == [
        "spec.workerGroupSpecs[0].resources"
    ]


def test_labels_must_use_the_top_level_field() -> None:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["rayStartParams"] = {"labels": "a=b"}
    cluster["spec"]["headGroupSpec"]["labels"] = {"bad key!": "ok", "good": "bad value!"}
    assert [e.field for e in validate_raycluster(cluster)] == [
        "spec.headGroupSpec.rayStartParams.labels",
        "spec.headGroupSpec.labels",
        "spec.headGroupSpec.labels[good]",
    ]


def test_autoscaler_v2_env_without_autoscaling_is_rejected() -> None:
    cluster = _head_env(raycluster(), {"name": "RAY_enable_autoscaler_v2", "value": "true"})
    assert [e.field for e in validate_raycluster(cluster)] == [
        "spec.headGroupSpec.template.spec.containers[0].env"
    ]


def test_autoscaler_v2_needs_never_restart_policy() -> None:
    group = worker_group()
    group["template"]["spec"]["restartPolicy"] = "Always"
    cluster = raycluster(
        groups=[group], enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"}
    )
    assert _messages(cluster) == [
        'spec.workerGroupSpecs[0].template.spec.restartPolicy: Invalid value: "Always": must be Never or unset with autoscaler v2'  # noqa: E501
    ]


def test_idle_timeout_needs_autoscaler_v2() -> None:
    cluster = raycluster(groups=[worker_group(idleTimeoutSeconds=60)])
    assert [e.field for e in validate_raycluster(cluster)] == [
        "spec.workerGroupSpecs[0].idleTimeoutSeconds"
    ]


def test_redis_password_must_come_from_fault_tolerance_options() -> None:
    cluster = raycluster(gcsFaultToleranceOptions={"redisAddress": "redis:6379"})
    cluster["spec"]["headGroupSpec"]["rayStartParams"] = {"redis-password": "secret"}
    assert [e.field for e in validate_raycluster(cluster)] == [
        "spec.headGroupSpec.rayStartParams.redis-password"
    ]


def test_redis_address_env_without_fault_tolerance_is_rejected() -> None:
    cluster = _head_env(raycluster(), {"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"})
    assert "implicitly enables GCS fault tolerance" in _messages(cluster)[0]


def test_ft_annotation_and_options_together_are_rejected() -> None:
    cluster = raycluster(gcsFaultToleranceOptions={"redisAddress": "redis:6379"})
    cluster["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    assert [e.field for e in validate_raycluster(cluster)] == ["spec.gcsFaultToleranceOptions"]


def test_token_auth_needs_ray_2_52() -> None:
    cluster = raycluster(authOptions={"mode": "token"}, rayVersion="2.46.0")
    assert _messages(cluster) == [
        'spec.rayVersion: Invalid value: "2.46.0": token authentication requires Ray 2.52.0 or later'  # noqa: E501
    ]


def test_unknown_upgrade_strategy_lists_supported_values() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Rolling"})
    assert _messages(cluster) == [
        'spec.upgradeStrategy.type: Unsupported value: "Rolling": supported values: "Recreate", "None"'  # noqa: E501
    ]


def test_upgrade_strategy_is_for_user_created_clusters_only() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    cluster["metadata"]["labels"] = {"ray.io/originated-from-crd": "RayJob"}
    assert [e.field for e in validate_raycluster(cluster)] == ["spec.upgradeStrategy"]


def test_summary_joins_every_message() -> None:
    cluster = raycluster(groups=[worker_group("a"), worker_group("a", min_replicas=9)])
    assert summarize(validate_raycluster(cluster)) == (
        'spec.workerGroupSpecs[1].groupName: Duplicate value: "a"; '
        "spec.workerGroupSpecs[1].minReplicas: Invalid value: 9: must be less than or equal to maxReplicas (5)"  # noqa: E501
    )


def test_errors_carry_the_status_cause_reason() -> None:
    error = validate_raycluster(raycluster(groups=[worker_group(min_replicas=9)]))[0]
    assert error.reason == "FieldValueInvalid"


def test_status_cannot_be_suspending_and_suspended() -> None:
    cluster = raycluster()
    cluster["status"] = {
        "conditions": [
            {"type": "RayClusterSuspending", "status": "True"},
            {"type": "RayClusterSuspended", "status": "True"},
        ]
    }
    assert [e.field for e in validate_raycluster_status(cluster)] == ["status.conditions"]


def test_replicas_outside_bounds_is_a_warning_not_an_error() -> None:
    cluster = raycluster(groups=[worker_group(replicas=9, max_replicas=3)])
    assert validate_raycluster(cluster) == []
    assert raycluster_warnings(cluster) == [
        "spec.workerGroupSpecs[0].replicas: 9 is above maxReplicas (3); 3 will be used"
    ]


def test_autoscaler_v1_with_restarting_workers_is_a_warning() -> None:
    group = worker_group("cpu")
    group["template"]["spec"]["restartPolicy"] = "Always"
    cluster = raycluster(
        groups=[group], enableInTreeAutoscaling=True, autoscalerOptions={"version": "v1"}
    )
    assert validate_raycluster(cluster) == []
    assert raycluster_warnings(cluster) == [
        "restartPolicy for worker groups [cpu] should be Never or unset when using autoscaler V1"
    ]


def test_typed_clusters_validate_like_their_manifests() -> None:
    cluster = raycluster(groups=[worker_group("a"), worker_group("a", min_replicas=9)])
    assert validate_raycluster(RayCluster.model_validate(cluster)) == validate_raycluster(cluster)


def test_a_ray_version_of_thousands_of_digits_is_no_version_not_an_error() -> None:
    # int() of each part raised ValueError beyond 4300 digits: the webhook answered 500 and the
    # controller failed on every reconcile. Go's ParseGeneric refuses a part beyond a uint64.
    cluster = raycluster()
    cluster["spec"]["rayVersion"] = "2.53." + "9" * 5000
    cluster["spec"]["authOptions"] = {"mode": "token"}  # which asks for Ray 2.52.0 or later
    [message] = _messages(cluster)
    assert message.startswith('spec.rayVersion: Invalid value: "2.53.999')
    assert message.endswith("...: token authentication requires Ray 2.52.0 or later")
    assert len(message) < 400
