"""Admission rules of `spec.upgradeStrategy` type `NewClusterWithIncrementalUpgrade`.

KubeRay's `ValidateClusterUpgradeOptions` (the autoscaler is required, the options are required,
`maxSurgePercent` and `stepSizePercent` within 0..100 and the step no larger than the surge,
`intervalSeconds` positive, `gatewayClassName` set), each problem with its field path; beyond
KubeRay, `gatewayClassName` must be a name the Gateway API accepts (else the Gateway this
operator creates would be refused at every reconcile). While the `RayServiceIncrementalUpgrade`
gate is off the type itself is refused, naming the flag (KubeRay would silently fall back to no
zero-downtime upgrade at all).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from ray_operator import features
from ray_operator.spec.raycluster import JSON, is_autoscaling_enabled
from ray_operator.validation.errors import FieldError, forbidden, invalid, required, shown
from ray_operator.validation.limits import ClusterLimits
from ray_operator.validation.raycluster import is_dns1123_subdomain

if TYPE_CHECKING:
    from ray_io.v1_views import RayClusterSpec

INCREMENTAL_UPGRADE = "NewClusterWithIncrementalUpgrade"
OPTIONS_PATH = "spec.upgradeStrategy.clusterUpgradeOptions"
DEFAULT_MAX_SURGE_PERCENT = 100
"""The CRD's default of `maxSurgePercent` (KubeRay's too)."""
_MAX_GATEWAY_CLASS_NAME = 253


def incremental_upgrade_errors(spec: JSON, *, limits: ClusterLimits) -> Iterator[FieldError]:
    """Every problem of an incremental upgrade in `spec` (a RayService's), none for other types."""
    strategy = spec.get("upgradeStrategy") or {}
    if strategy.get("type") != INCREMENTAL_UPGRADE:
        return
    gate = features.RAY_SERVICE_INCREMENTAL_UPGRADE
    if not limits.feature_gates.enabled(gate):
        yield forbidden("spec.upgradeStrategy.type", features.gate_off_detail(gate))
        return
    if not is_autoscaling_enabled(cast("RayClusterSpec", spec.get("rayClusterConfig") or {})):
        yield forbidden(
            "spec.upgradeStrategy.type",
            f"{INCREMENTAL_UPGRADE} requires rayClusterConfig.enableInTreeAutoscaling: true",
        )
    options = strategy.get("clusterUpgradeOptions")
    if not isinstance(options, dict):
        yield required(OPTIONS_PATH, f"required when the upgrade type is {INCREMENTAL_UPGRADE}")
        return
    yield from _percent_errors(options)
    interval = options.get("intervalSeconds")
    if not isinstance(interval, int) or isinstance(interval, bool) or interval <= 0:
        yield invalid(f"{OPTIONS_PATH}.intervalSeconds", shown(interval), "must be greater than 0")
    yield from _gateway_class_errors(options.get("gatewayClassName"))


def _percent_errors(options: JSON) -> Iterator[FieldError]:
    surge = options.get("maxSurgePercent")
    checked = {
        "maxSurgePercent": DEFAULT_MAX_SURGE_PERCENT if surge is None else surge,
        "stepSizePercent": options.get("stepSizePercent"),
    }
    percents: dict[str, int] = {}
    for field, value in checked.items():
        if value is None:
            yield required(f"{OPTIONS_PATH}.{field}", "a percentage from 0 to 100")
        elif not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
            yield invalid(f"{OPTIONS_PATH}.{field}", shown(value), "must be between 0 and 100")
        else:
            percents[field] = value
    step, surge = percents.get("stepSizePercent"), percents.get("maxSurgePercent")
    if step is not None and surge is not None and step > surge:
        yield invalid(
            f"{OPTIONS_PATH}.stepSizePercent",
            step,
            f"must be less than or equal to maxSurgePercent ({surge})",
        )


def _gateway_class_errors(name: object) -> Iterator[FieldError]:
    path = f"{OPTIONS_PATH}.gatewayClassName"
    if not name:
        yield required(path, f"required for {INCREMENTAL_UPGRADE}")
    elif not isinstance(name, str) or len(name) > _MAX_GATEWAY_CLASS_NAME:
        yield invalid(path, shown(name), "must be a GatewayClass name of at most 253 characters")
    elif not is_dns1123_subdomain(name):
        yield invalid(
            path,
            shown(name),
            "must be a GatewayClass name: lower case alphanumeric characters, '-' or '.', "
            "starting and ending with an alphanumeric character",
        )
