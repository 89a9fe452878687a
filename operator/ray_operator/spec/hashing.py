"""KubeRay's spec hash, value for value: `ray.io/upgrade-strategy-recreate-hash` on head Pods and
`ray.io/hash-without-replicas-and-workers-to-delete` on a RayService's clusters.

KubeRay's `GenerateHashWithoutReplicasAndWorkersToDelete` takes a typed `RayClusterSpec`, mutes
what must not restart Pods — each worker group's `replicas`, `minReplicas`, `maxReplicas` and
`scaleStrategy.workersToDelete` (the autoscaler changes them), every template's `tolerations` and
`schedulingGates` (Kueue injects them after creation) and `upgradeStrategy` — and prints the SHA-1
of Go's `json.Marshal` of the rest in base32hex. `spec_hash` does the same over the spec as the
API server stores it (CRD defaults applied, nothing else: KubeRay hashes what it reads), with
`go_json` writing Go's exact bytes, so a takeover from KubeRay, or back, recreates nothing.

The head Pod's hash covers the whole spec, `suspend` included, after the one default KubeRay's
RayCluster controller applies in memory before hashing (`setDefaults`: an absent `rayStartParams`
becomes `{}`); a RayService's covers its `rayClusterConfig` as stored, without `suspend` (KubeRay's
`rayClusterSpecForHashing`), see `builders.rayservice`. A spec Go could not decode raises
`GoDecodeError`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from ray_operator.spec.go_json import GoDecodeError, marshal
from ray_operator.spec.raycluster import ClusterLike

__all__ = ["GoDecodeError", "pod_template_hash", "spec_hash", "spec_hash_of_first_groups"]

_WORKER_SCALING_FIELDS = frozenset({"replicas", "minReplicas", "maxReplicas"})
_SCHEDULING_FIELDS = frozenset({"tolerations", "schedulingGates"})


def pod_template_hash(cluster: ClusterLike) -> str:
    """`ray.io/upgrade-strategy-recreate-hash` of a RayCluster as stored (see the module doc)."""
    if isinstance(cluster, Mapping):
        cluster_spec = cluster.get("spec") or {}
    else:
        cluster_spec = cluster.model_dump(mode="json", by_alias=True, exclude_none=True)["spec"]
    return spec_hash(cluster_spec, ray_start_params_default=True)


def spec_hash(cluster_spec: Mapping[str, Any], *, ray_start_params_default: bool = False) -> str:
    """KubeRay's `GenerateHashWithoutReplicasAndWorkersToDelete` of a RayClusterSpec as stored;
    `ray_start_params_default` first applies the RayCluster controller's `setDefaults`."""
    muted = _muted_spec(
        cluster_spec,
        worker_groups=cluster_spec.get("workerGroupSpecs"),
        ray_start_params_default=ray_start_params_default,
    )
    return _hash(muted)


def spec_hash_of_first_groups(cluster_spec: Mapping[str, Any], count: int) -> str | None:
    """`spec_hash` as if the spec had only its first `count` worker groups (KubeRay's partial
    comparison, which lets a RayService add groups at the end without a new cluster); None when
    the spec has fewer than `count` groups (KubeRay then compares with an empty hash)."""
    groups = cluster_spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list) or count < 0 or len(groups) < count:
        return None
    return _hash(_muted_spec(cluster_spec, worker_groups=groups[:count]))


def _muted_spec(
    cluster_spec: Mapping[str, Any], *, worker_groups: Any, ray_start_params_default: bool = False
) -> dict[str, Any]:
    """A shallow copy of the spec with KubeRay's muted fields removed (the Go encoder writes a
    removed pointer as KubeRay's nil: omitted, or `null` where the field has no omitempty)."""
    muted = {key: value for key, value in cluster_spec.items() if key != "upgradeStrategy"}
    head = cluster_spec.get("headGroupSpec")
    if isinstance(head, Mapping):
        muted["headGroupSpec"] = _without_scheduling_fields(head, ray_start_params_default)
    if isinstance(worker_groups, list):
        muted["workerGroupSpecs"] = [
            _muted_group(group, ray_start_params_default) for group in worker_groups
        ]
    return muted


def _muted_group(group: Any, ray_start_params_default: bool) -> Any:
    if not isinstance(group, Mapping):
        return group  # not a group at all: the encoder reports it
    muted = {key: value for key, value in group.items() if key not in _WORKER_SCALING_FIELDS}
    scale_strategy = group.get("scaleStrategy")
    if isinstance(scale_strategy, Mapping):
        muted["scaleStrategy"] = {
            key: value for key, value in scale_strategy.items() if key != "workersToDelete"
        }
    return _without_scheduling_fields(muted, ray_start_params_default)


def _without_scheduling_fields(
    group: Mapping[str, Any], ray_start_params_default: bool
) -> dict[str, Any]:
    result = dict(group)
    if ray_start_params_default and group.get("rayStartParams") is None:
        result["rayStartParams"] = {}  # KubeRay's setDefaults: nil becomes an empty map
    template = group.get("template")
    if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
        pod_spec = {
            key: value for key, value in template["spec"].items() if key not in _SCHEDULING_FIELDS
        }
        result["template"] = {**template, "spec": pod_spec}
    return result


def _hash(cluster_spec: Mapping[str, Any]) -> str:
    digest = hashlib.sha1(marshal(cluster_spec), usedforsecurity=False).digest()
    return base64.b32hexencode(digest).decode()
