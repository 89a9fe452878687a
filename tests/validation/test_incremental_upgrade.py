"""Admission of `NewClusterWithIncrementalUpgrade`: refused by name while its feature gate is
off; with it on, KubeRay's rules on `clusterUpgradeOptions`, each problem with its field path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.features import RAY_SERVICE_INCREMENTAL_UPGRADE, FeatureGates
from ray_operator.validation.limits import ClusterLimits
from ray_operator.validation.rayservice import validate_rayservice

GATE_ON = ClusterLimits(feature_gates=FeatureGates({RAY_SERVICE_INCREMENTAL_UPGRADE: True}))
GATE_OFF = ClusterLimits(feature_gates=FeatureGates({RAY_SERVICE_INCREMENTAL_UPGRADE: False}))
OPTIONS = "spec.upgradeStrategy.clusterUpgradeOptions"

RAYSERVICE: dict[str, Any] = {
    "apiVersion": "ray.io/v1",
    "kind": "RayService",
    "metadata": {"name": "fruit", "namespace": "shop"},
    "spec": {
        "upgradeStrategy": {
            "type": "NewClusterWithIncrementalUpgrade",
            "clusterUpgradeOptions": {
                "gatewayClassName": "istio",
                "stepSizePercent": 10,
                "intervalSeconds": 30,
                "maxSurgePercent": 10,
            },
        },
        "rayClusterConfig": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}},
            },
        },
    },
}


def with_options(**options: Any) -> dict[str, Any]:
    rayservice = copy.deepcopy(RAYSERVICE)
    upgrade = rayservice["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]
    for key, value in options.items():
        if value is None:
            upgrade.pop(key, None)
        else:
            upgrade[key] = value
    return rayservice


def messages(rayservice: dict[str, Any], limits: ClusterLimits = GATE_ON) -> list[str]:
    return [str(error) for error in validate_rayservice(rayservice, limits=limits)]


def test_valid_options_are_accepted_with_the_gate_on() -> None:
    assert messages(RAYSERVICE) == []


def test_the_gate_is_on_by_default_as_in_kuberay() -> None:
    assert validate_rayservice(RAYSERVICE) == []


def test_the_type_is_refused_by_its_gate_while_the_gate_is_off() -> None:
    assert messages(RAYSERVICE, GATE_OFF) == [
        "spec.upgradeStrategy.type: Forbidden: the RayServiceIncrementalUpgrade feature gate is "
        "off in this operator (--feature-gates=RayServiceIncrementalUpgrade=true turns it on)"
    ]


def test_other_upgrade_types_do_not_need_the_gate() -> None:
    rayservice = copy.deepcopy(RAYSERVICE)
    rayservice["spec"]["upgradeStrategy"] = {"type": "NewCluster"}
    assert messages(rayservice, GATE_OFF) == []


def test_the_autoscaler_is_required() -> None:
    rayservice = copy.deepcopy(RAYSERVICE)
    rayservice["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = False
    assert messages(rayservice) == [
        "spec.upgradeStrategy.type: Forbidden: NewClusterWithIncrementalUpgrade requires "
        "rayClusterConfig.enableInTreeAutoscaling: true"
    ]


def test_the_options_are_required() -> None:
    rayservice = copy.deepcopy(RAYSERVICE)
    del rayservice["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]
    assert messages(rayservice) == [
        f"{OPTIONS}: Required value: required when the upgrade type is "
        "NewClusterWithIncrementalUpgrade"
    ]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"maxSurgePercent": 101},
            [f"{OPTIONS}.maxSurgePercent: Invalid value: 101: must be between 0 and 100"],
        ),
        (
            {"maxSurgePercent": -1},
            [f"{OPTIONS}.maxSurgePercent: Invalid value: -1: must be between 0 and 100"],
        ),
        (
            {"stepSizePercent": None},
            [f"{OPTIONS}.stepSizePercent: Required value: a percentage from 0 to 100"],
        ),
        (
            {"stepSizePercent": 200},
            [f"{OPTIONS}.stepSizePercent: Invalid value: 200: must be between 0 and 100"],
        ),
        (
            {"stepSizePercent": 30},
            [
                f"{OPTIONS}.stepSizePercent: Invalid value: 30: "
                "must be less than or equal to maxSurgePercent (10)"
            ],
        ),
        ({"maxSurgePercent": None, "stepSizePercent": 100}, []),
        (
            {"intervalSeconds": 0},
            [f"{OPTIONS}.intervalSeconds: Invalid value: 0: must be greater than 0"],
        ),
        (
            {"intervalSeconds": None},
            [f"{OPTIONS}.intervalSeconds: Invalid value: null: must be greater than 0"],
        ),
        (
            {"gatewayClassName": ""},
            [
                f"{OPTIONS}.gatewayClassName: Required value: "
                "required for NewClusterWithIncrementalUpgrade"
            ],
        ),
        (
            {"gatewayClassName": "Istio_Gateway"},
            [
                f'{OPTIONS}.gatewayClassName: Invalid value: "Istio_Gateway": '
                "must be a GatewayClass name: lower case alphanumeric characters, '-' or '.', "
                "starting and ending with an alphanumeric character"
            ],
        ),
        (
            {"gatewayClassName": "a" * 254},
            [
                f'{OPTIONS}.gatewayClassName: Invalid value: "{"a" * 80}...": must be a '
                "GatewayClass name of at most 253 characters"
            ],
        ),
        (
            {"stepSizePercent": True},
            [f"{OPTIONS}.stepSizePercent: Invalid value: true: must be between 0 and 100"],
        ),
    ],
)
def test_each_option_is_checked_with_its_field_path(
    options: dict[str, Any], expected: list[str]
) -> None:
    assert messages(with_options(**options)) == expected


def test_every_problem_is_reported_at_once() -> None:
    rayservice = with_options(maxSurgePercent=500, intervalSeconds=-5, gatewayClassName=None)
    rayservice["spec"]["rayClusterConfig"].pop("enableInTreeAutoscaling")
    assert [m.split(":")[0] for m in messages(rayservice)] == [
        "spec.upgradeStrategy.type",
        f"{OPTIONS}.maxSurgePercent",
        f"{OPTIONS}.intervalSeconds",
        f"{OPTIONS}.gatewayClassName",
    ]
