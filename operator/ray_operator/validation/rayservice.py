"""Semantic validation of a RayService, shared by the RayService controller and the webhook.

Covers what KubeRay's `utils/validation.go` checks for a RayService (`ValidateRayServiceMetadata`
with the `ray.io/initializing-timeout` annotation, `ValidateRayServiceSpec`,
`ValidateClusterUpgradeOptions`, and the RayCluster rules on the embedded `spec.rayClusterConfig`),
every violation at once. Beyond KubeRay: `serveConfigV2` must be YAML that Ray Serve's schema
accepts (see `serve_config.py`); KubeRay only learns that from the dashboard, after the cluster
is up. The rules of `NewClusterWithIncrementalUpgrade` are in `incremental_upgrade.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import JSON, ClusterLike
from ray_operator.validation.embedded import embedded_cluster_errors, owner_name_errors
from ray_operator.validation.errors import (
    FieldError,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
)
from ray_operator.validation.incremental_upgrade import (
    INCREMENTAL_UPGRADE,
    incremental_upgrade_errors,
)
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycluster import read_only_manifest
from ray_operator.validation.serve_config import serve_config_errors

INITIALIZING_TIMEOUT_ANNOTATION = "ray.io/initializing-timeout"
NEW_CLUSTER = "NewCluster"
NO_UPGRADE = "None"
UPGRADE_TYPES = [INCREMENTAL_UPGRADE, NEW_CLUSTER, NO_UPGRADE]
# Go's time.ParseDuration: a sequence of decimal numbers, each with a unit ("1h30m", "1.5s").
_GO_DURATION_RE = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$")
_GO_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_MAX_GO_DURATION_SECONDS = (2**63 - 1) / 1e9


def validate_rayservice(
    rayservice: ClusterLike, *, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[FieldError]:
    """Every semantic violation in the RayService's metadata and spec; empty when it is valid."""
    manifest = read_only_manifest(rayservice)
    spec = dict(manifest.get("spec") or {})
    errors = owner_name_errors(manifest)
    errors += _initializing_timeout_errors(manifest)
    errors += _cluster_config_errors(spec)
    errors += embedded_cluster_errors(
        manifest, field="rayClusterConfig", creator=names.CRD_RAY_SERVICE, limits=limits
    )
    errors += _upgrade_errors(spec, limits=limits)
    errors += serve_config_errors(spec.get("serveConfigV2"), path="spec.serveConfigV2")
    return errors


def _initializing_timeout_errors(rayservice: JSON) -> list[FieldError]:
    annotations = (rayservice.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(INITIALIZING_TIMEOUT_ANNOTATION)
    if not value:
        return []
    path = f"metadata.annotations[{INITIALIZING_TIMEOUT_ANNOTATION}]"
    seconds = initializing_timeout_seconds(str(value))
    if seconds is None:
        detail = 'must be a Go duration such as "5m" or "1h", or a whole number of seconds'
        return [invalid(path, shown(value), detail)]
    if seconds <= 0:
        return [invalid(path, shown(value), "must be positive")]
    return []


def initializing_timeout_seconds(text: str) -> float | None:
    """Seconds in a Go duration or an integer string, as KubeRay parses the annotation; None
    beyond what Go reads (strconv.Atoi's int64, time.Duration's 292 years)."""
    if re.fullmatch(r"[-+]?\d{1,18}", text):
        return float(int(text))
    if text in ("0", "-0", "+0"):
        return 0.0
    if not _GO_DURATION_RE.match(text):
        return None
    unit_seconds = {
        "ns": 1e-9,
        "us": 1e-6,
        "µs": 1e-6,
        "μs": 1e-6,
        "ms": 1e-3,
        "s": 1.0,
        "m": 60.0,
        "h": 3600.0,
    }
    total = sum(float(n) * unit_seconds[u] for n, u in _GO_DURATION_PART_RE.findall(text))
    if not total <= _MAX_GO_DURATION_SECONDS:
        return None  # time.ParseDuration: "invalid duration" (an overflow)
    return -total if text.startswith("-") else total


def _cluster_config_errors(spec: JSON) -> Iterator[FieldError]:
    if not spec.get("rayClusterConfig"):
        yield required("spec.rayClusterConfig", "the RayCluster that runs the Serve applications")
    cluster = spec.get("rayClusterConfig") or {}
    if (cluster.get("authOptions") or {}).get("enableK8sTokenAuth") is True:
        yield forbidden(
            "spec.rayClusterConfig.authOptions.enableK8sTokenAuth",
            "Kubernetes token authentication is not supported for RayService",
        )
    head_service = (cluster.get("headGroupSpec") or {}).get("headService") or {}
    if (head_service.get("metadata") or {}).get("name"):
        # Each upgrade creates a new cluster; a fixed head Service name would collide.
        yield forbidden(
            "spec.rayClusterConfig.headGroupSpec.headService.metadata.name",
            "the RayService names the head Service of each of its clusters",
        )


def _upgrade_errors(spec: JSON, *, limits: ClusterLimits) -> Iterator[FieldError]:
    delay = spec.get("rayClusterDeletionDelaySeconds")
    if delay is not None and delay < 0:
        yield invalid(
            "spec.rayClusterDeletionDelaySeconds", delay, "must be greater than or equal to 0"
        )
    strategy = spec.get("upgradeStrategy") or {}
    kind = strategy.get("type")
    if kind is not None and kind not in UPGRADE_TYPES:
        yield not_supported("spec.upgradeStrategy.type", shown(kind), UPGRADE_TYPES)
    yield from incremental_upgrade_errors(spec, limits=limits)
