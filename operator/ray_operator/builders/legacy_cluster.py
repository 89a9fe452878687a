"""The ray.io/v1 RayCluster that serves a legacy `cluster.ray.io/v1` RayCluster: the conversion's
cluster (`legacy.conversion`), owned by the legacy object and stamped with two hashes.

- `LEGACY_SPEC_HASH_ANNOTATION` on the RayCluster: the hash of the spec converted from the legacy
  object. The API server defaults fields inside a stored RayCluster, and Ray's autoscaler changes
  its replicas, so the stored spec is never compared with ours: the RayCluster is rewritten only
  when this hash changes, that is when the legacy spec (or its annotations) did.
- `LEGACY_ANNOTATIONS_HASH_ANNOTATION` on every Pod template: the hash of the legacy object's
  annotations. The legacy operator's habit was "change an annotation and re-apply to restart the
  cluster"; a new template annotation changes KubeRay's upgrade hash, and the conversion asks for
  `upgradeStrategy.type: Recreate`, so every Pod is replaced.

When the RayCluster is rewritten, each worker group that stays keeps the replicas (within its new
bounds) and the pending `workersToDelete` that the autoscaler set: a spec edit must not undo a
scale-up.

Two things the legacy operator made are carried over:
- its head Service `<name>-ray-head` (`legacy_head_service`): workloads reach the cluster as
  `ray://example-cluster-ray-head:10001` and users port-forward to it, so the Service stays, with
  the legacy ports (client 10001, dashboard 8265, ray-serve 8000, and `headServicePorts` by name),
  selecting the new head Pod;
- its Pods (`is_legacy_operator_pod`): controlled by the legacy object and labelled
  `ray-cluster-name` (Ray's autoscaler tag); once the new cluster is ready they are deleted, so a
  migration does not run every cluster twice.

Pure: no I/O; O(size of the spec).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

from ray_operator.builders.rayjob import owner_reference
from ray_operator.spec import kuberay_names as names

JSON = dict[str, Any]

LEGACY_SPEC_HASH_ANNOTATION: Final = "ray-operator.io/legacy-spec-hash"
LEGACY_ANNOTATIONS_HASH_ANNOTATION: Final = "ray-operator.io/legacy-annotations-hash"

LEGACY_CLUSTER_NAME_LABEL: Final = "ray-cluster-name"
"""The legacy autoscaler's tag on every Pod it launched (`ray.autoscaler.tags`)."""

LEGACY_HEAD_SERVICE_PORTS: Final = (("client", 10001), ("dashboard", 8265), ("ray-serve", 8000))
"""The legacy operator's head Service ports (Ray's autoscaler/kubernetes/defaults.yaml)."""

MAX_SERVICE_NAME_LENGTH: Final = 63

# Rewritten by every `kubectl apply`: a spec edit re-applied must update the cluster, not restart
# it; only the user's own annotations count.
IGNORED_ANNOTATIONS: Final = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})


def annotations_hash(legacy: Mapping[str, Any]) -> str:
    """Hash of the legacy object's own annotations (not kubectl's last-applied copy)."""
    annotations = legacy["metadata"].get("annotations") or {}
    own = {key: value for key, value in annotations.items() if key not in IGNORED_ANNOTATIONS}
    return _digest(own)


def owned_cluster(legacy: Mapping[str, Any], converted: Mapping[str, Any]) -> JSON:
    """The RayCluster to create for `legacy`: `converted` (the conversion's RayCluster) in the
    legacy object's namespace, controlled by it, with both hashes stamped."""
    cluster: JSON = copy.deepcopy(dict(converted))
    metadata = cluster.setdefault("metadata", {})
    metadata["name"] = legacy["metadata"]["name"]
    metadata["namespace"] = legacy["metadata"]["namespace"]
    metadata["ownerReferences"] = [owner_reference(legacy)]
    restart_mark = annotations_hash(legacy)
    for template in _templates(cluster.get("spec", {})):
        annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[LEGACY_ANNOTATIONS_HASH_ANNOTATION] = restart_mark
    annotations = metadata.setdefault("annotations", {})
    annotations[LEGACY_SPEC_HASH_ANNOTATION] = _digest(cluster.get("spec", {}))
    return cluster


def needs_rewrite(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether the stored RayCluster was built from another legacy spec than `desired` was."""
    return _spec_hash(existing) != _spec_hash(desired)


def rewritten_cluster(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> JSON:
    """The RayCluster to store in place of `existing` (a PUT: its resourceVersion guards against
    a write made meanwhile): `desired`'s metadata and spec, the autoscaler's state kept."""
    cluster: JSON = copy.deepcopy(dict(existing))
    cluster.pop("status", None)
    metadata = cluster["metadata"]
    wanted = desired["metadata"]
    metadata["labels"] = {**(metadata.get("labels") or {}), **(wanted.get("labels") or {})}
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        **(wanted.get("annotations") or {}),
    }
    metadata["ownerReferences"] = copy.deepcopy(wanted["ownerReferences"])
    cluster["spec"] = keep_autoscaler_state(desired.get("spec", {}), existing.get("spec", {}))
    return cluster


def keep_autoscaler_state(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> JSON:
    """`desired`, where each worker group also in `existing` keeps that group's replicas
    (clamped into the new minReplicas..maxReplicas) and its scaleStrategy."""
    spec: JSON = copy.deepcopy(dict(desired))
    before = {
        group.get("groupName"): group
        for group in existing.get("workerGroupSpecs") or ()
        if isinstance(group, Mapping)
    }
    for group in spec.get("workerGroupSpecs") or ():
        previous = before.get(group.get("groupName"))
        if previous is None:
            continue
        replicas = previous.get("replicas")
        if isinstance(replicas, int) and not isinstance(replicas, bool):
            low = int(group.get("minReplicas") or 0)
            high = int(group.get("maxReplicas", replicas))
            group["replicas"] = max(low, min(high, replicas))
        if "scaleStrategy" in previous:
            group["scaleStrategy"] = copy.deepcopy(previous["scaleStrategy"])
    return spec


def _templates(spec: Mapping[str, Any]) -> Iterator[JSON]:
    head = spec.get("headGroupSpec") or {}
    if isinstance(head.get("template"), dict):
        yield head["template"]
    for group in spec.get("workerGroupSpecs") or ():
        if isinstance(group, dict) and isinstance(group.get("template"), dict):
            yield group["template"]


def _spec_hash(cluster: Mapping[str, Any]) -> str | None:
    annotations = cluster.get("metadata", {}).get("annotations") or {}
    value = annotations.get(LEGACY_SPEC_HASH_ANNOTATION)
    return value if isinstance(value, str) else None


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def legacy_head_service_name(legacy: Mapping[str, Any]) -> str:
    """`<name>-ray-head`, the legacy operator's head Service."""
    return f"{legacy['metadata']['name']}-ray-head"


def legacy_head_service(legacy: Mapping[str, Any]) -> JSON | None:
    """The legacy head Service, selecting the head Pod of the RayCluster that serves `legacy`;
    None when the name would be no DNS label (a legacy name above 54 characters)."""
    name = legacy_head_service_name(legacy)
    if len(name) > MAX_SERVICE_NAME_LENGTH:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": legacy["metadata"]["namespace"],
            "ownerReferences": [owner_reference(legacy)],
        },
        "spec": legacy_head_service_spec(legacy),
    }


def legacy_head_service_spec(legacy: Mapping[str, Any]) -> JSON:
    """Selector and ports of the legacy head Service: the defaults, overridden and extended by
    `spec.headServicePorts` by name, as the legacy operator merged them."""
    ports: dict[str, tuple[Any, Any]] = {
        name: (port, port) for name, port in LEGACY_HEAD_SERVICE_PORTS
    }
    for entry in (legacy.get("spec") or {}).get("headServicePorts") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            ports[entry["name"]] = (entry.get("port"), entry.get("targetPort"))
    return {
        "selector": {
            names.CLUSTER_LABEL: legacy["metadata"]["name"],
            names.NODE_TYPE_LABEL: "head",
        },
        "ports": [
            {"name": name, "protocol": "TCP", "port": port, "targetPort": target}
            for name, (port, target) in ports.items()
        ],
    }


def head_service_changes(existing: Mapping[str, Any], spec: Mapping[str, Any]) -> list[JSON]:
    """JSON patch operations that make `existing`'s selector and ports `spec`'s (none when they
    are): the legacy operator's Service selected its own head Pod."""
    current = existing.get("spec") or {}
    operations: list[JSON] = []
    for field in ("selector", "ports"):
        if _comparable_ports(current.get(field)) != _comparable_ports(spec[field]):
            operations.append({"op": "add", "path": f"/spec/{field}", "value": spec[field]})
    return operations


def is_legacy_operator_pod(pod: Mapping[str, Any], legacy: Mapping[str, Any]) -> bool:
    """Whether the legacy operator launched `pod` for `legacy`: controlled by the legacy object
    (the RayCluster's Pods are controlled by the RayCluster)."""
    uid = legacy["metadata"].get("uid")
    return any(
        ref.get("uid") == uid and ref.get("controller")
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or ()
    )


def _comparable_ports(value: Any) -> Any:
    """Ports as the API server stores them carry nodePort-less defaults we never set: compare
    only what we set."""
    if not isinstance(value, list):
        return value
    keys = ("name", "protocol", "port", "targetPort")
    return [
        {key: port.get(key) for key in keys} if isinstance(port, Mapping) else port
        for port in value
    ]
