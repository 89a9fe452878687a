"""The Pod-template hash that `upgradeStrategy.type: Recreate` compares.

Definition: SHA-1 over the canonical JSON (sorted keys, no whitespace) of the RayCluster spec
with the fields that must not restart Pods removed, printed in base32hex (the encoding KubeRay
uses, so the annotation looks alike; the value itself differs from KubeRay's because Go orders
JSON by struct field, not by key).

Removed, as in KubeRay's `GenerateHashWithoutReplicasAndWorkersToDelete`: `replicas`,
`minReplicas`, `maxReplicas`, `scaleStrategy.workersToDelete` (the autoscaler changes them
constantly), every template's `tolerations` and `schedulingGates` (Kueue injects them after
creation) and `upgradeStrategy` itself. Also removed, which KubeRay does not: `suspend` of the
cluster and of each group, since suspending already deletes Pods and resuming must not count as
an upgrade.

The spec is first passed through the generated model, which applies the CRD defaults: the hash
is then the same whether it is computed from a typed RayCluster, the API server's copy
(defaults applied) or a raw manifest (defaults missing).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from typing import Any

from ray_io.v1 import RayClusterSpec

from ray_operator.builders.manifest import JSON, ClusterLike, as_manifest, spec

_WORKER_SCALING_FIELDS = ("replicas", "minReplicas", "maxReplicas", "suspend")
_SCHEDULING_FIELDS = ("tolerations", "schedulingGates")


def pod_template_hash(cluster: ClusterLike) -> str:
    """The Recreate-upgrade hash of a RayCluster's spec (see the module docstring)."""
    defaulted = RayClusterSpec.model_validate(spec(as_manifest(cluster)))
    return _hash_json(_hashed_spec(defaulted.model_dump(by_alias=True, exclude_none=True)))


def _hashed_spec(cluster_spec: JSON) -> JSON:
    result = copy.deepcopy(cluster_spec)
    result.pop("upgradeStrategy", None)
    result.pop("suspend", None)
    _drop_scheduling_fields(result.get("headGroupSpec") or {})
    for group in result.get("workerGroupSpecs") or []:
        for field in _WORKER_SCALING_FIELDS:
            group.pop(field, None)
        (group.get("scaleStrategy") or {}).pop("workersToDelete", None)
        if group.get("scaleStrategy") == {}:
            group.pop("scaleStrategy")
        _drop_scheduling_fields(group)
    return result


def _drop_scheduling_fields(group: JSON) -> None:
    pod_spec = (group.get("template") or {}).get("spec") or {}
    for field in _SCHEDULING_FIELDS:
        pod_spec.pop(field, None)


def _hash_json(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha1(canonical.encode(), usedforsecurity=False).digest()
    return base64.b32hexencode(digest).decode()
