"""The defaulting functions, one per kind (see the package docstring for what and why)."""

from __future__ import annotations

from collections.abc import Callable

from ray_operator.spec.raycluster import JSON, ClusterLike, as_manifest

DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS = 60
"""KubeRay deletes a RayService's previous RayCluster this long after traffic moved off it."""
DEFAULT_UPGRADE_TYPE = "NewCluster"
"""KubeRay upgrades a RayService by a new cluster (zero downtime) unless told otherwise."""


def default_raycluster(cluster: ClusterLike) -> JSON:
    """A defaulted copy of a RayCluster: nothing beyond the schema's defaults (docs/webhooks.md)."""
    return as_manifest(cluster)


def default_rayjob(rayjob: ClusterLike) -> JSON:
    """A defaulted copy of a RayJob: nothing beyond the schema's defaults (docs/webhooks.md)."""
    return as_manifest(rayjob)


def default_rayservice(rayservice: ClusterLike) -> JSON:
    """A defaulted copy of a RayService: deletion delay and upgrade type made explicit."""
    manifest = as_manifest(rayservice)
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        return manifest
    spec.setdefault("rayClusterDeletionDelaySeconds", DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS)
    strategy = spec.setdefault("upgradeStrategy", {})
    if isinstance(strategy, dict) and strategy.get("type") is None:
        strategy["type"] = DEFAULT_UPGRADE_TYPE
    return manifest


_BY_KIND: dict[str, Callable[[ClusterLike], JSON]] = {
    "RayCluster": default_raycluster,
    "RayJob": default_rayjob,
    "RayService": default_rayservice,
}


def default_object(obj: ClusterLike) -> JSON:
    """Dispatch on `kind`: the defaulted copy of any RayCluster, RayJob or RayService."""
    manifest = as_manifest(obj)
    default = _BY_KIND.get(str(manifest.get("kind")))
    return default(manifest) if default is not None else manifest
