"""What a RayService creates, built purely: its RayClusters, its Serve and head Services, and the
Serve config it PUTs (with the hash that says whether a cluster already has it).

Mirrors KubeRay's `constructRayClusterForRayService`, `BuildServeServiceForRayService` and
`BuildHeadServiceForRayService`. A cluster carries the hash of the `rayClusterConfig` it was built
from (annotation `ray.io/hash-without-replicas-and-workers-to-delete`, KubeRay's exact value, so
clusters KubeRay made are recognised and ours are recognised by KubeRay): a RayService whose
config hashes differently needs a new cluster (zero-downtime upgrade).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.bounded_yaml import UnreadableYamlError, load_go_yaml
from ray_operator.builders.rayjob import (
    build_head_service_for_owner,
    originated_labels,
    owner_reference,
)
from ray_operator.builders.services import NoServePortError, head_ports
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.hashing import spec_hash, spec_hash_of_first_groups
from ray_operator.spec.object_names import serve_service_name
from ray_operator.spec.raycluster import JSON, json_copy

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService


Object = Mapping[str, Any]

CLUSTER_HASH_ANNOTATION = "ray.io/hash-without-replicas-and-workers-to-delete"
NUM_WORKER_GROUPS_ANNOTATION = "ray.io/num-worker-groups"
_ATOI = re.compile(r"[+-]?[0-9]{1,18}")  # what Go's strconv.Atoi reads (within int64)


class InvalidServeConfigError(ValueError):
    """`serveConfigV2` is not a YAML mapping."""


def cluster_config_hash(rayservice: RayService) -> str:
    """KubeRay's `ray.io/hash-without-replicas-and-workers-to-delete` of `rayClusterConfig` as
    stored: `hashing.spec_hash` without `suspend` (KubeRay's `rayClusterSpecForHashing`; KubeRay
    hands `suspend` to Kueue once the cluster exists). Raises `hashing.GoDecodeError` for a
    config KubeRay could not decode."""
    return spec_hash(_config_for_hashing(rayservice))


def cluster_config_hash_of_first_groups(rayservice: RayService, count: int) -> str | None:
    """`cluster_config_hash` over the first `count` worker groups only (None when the config has
    fewer): KubeRay's partial comparison, true when groups were only added at the end."""
    return spec_hash_of_first_groups(_config_for_hashing(rayservice), count)


def is_cluster_spec_hash_equal(
    rayservice: RayService, cluster: RayCluster, *, partial: bool
) -> bool:
    """KubeRay's `isClusterSpecHashEqual`: the cluster's recorded hash equals the RayService's,
    over all worker groups or (`partial`) over the `ray.io/num-worker-groups` it was built with."""
    annotations = cluster["metadata"].get("annotations") or {}
    recorded = str(annotations.get(CLUSTER_HASH_ANNOTATION, ""))
    if not partial:
        return recorded == cluster_config_hash(rayservice)
    text = str(annotations.get(NUM_WORKER_GROUPS_ANNOTATION, ""))
    if _ATOI.fullmatch(text) is None:
        return True  # KubeRay: a count strconv.Atoi cannot read compares as equal
    count = int(text)
    return recorded == (cluster_config_hash_of_first_groups(rayservice, count) or "")


def _config_for_hashing(rayservice: RayService) -> dict[str, Any]:
    config = rayservice.get("spec", {}).get("rayClusterConfig", {})
    return {key: value for key, value in config.items() if key != "suspend"}


def build_cluster_for_service(rayservice: RayService, *, name: str) -> JSON:
    """A RayCluster for the RayService, named `name`, owned by it, stamped with the config hash."""
    metadata = rayservice["metadata"]
    config: JSON = json_copy(rayservice.get("spec", {}).get("rayClusterConfig", {}))
    annotations = {
        **(metadata.get("annotations") or {}),
        CLUSTER_HASH_ANNOTATION: cluster_config_hash(rayservice),
        NUM_WORKER_GROUPS_ANNOTATION: str(len(config.get("workerGroupSpecs") or [])),
        names.KUBERAY_VERSION_ANNOTATION: names.KUBERAY_VERSION,
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": metadata["namespace"],
            "labels": {**(metadata.get("labels") or {}), **originated_labels(rayservice)},
            "annotations": annotations,
            "ownerReferences": [owner_reference(rayservice)],
        },
        "spec": config,
    }


def build_serve_service_for_service(rayservice: RayService, cluster: RayCluster) -> JSON:
    """`<rayservice>-serve-svc` over the Pods of `cluster` whose Serve proxy is healthy
    (`ray.io/serve: "true"`); `spec.serveService` replaces the default, minus its selector."""
    name = rayservice["metadata"]["name"]
    spec = rayservice.get("spec", {})
    ports = [
        {"name": port, "port": number}
        for port, number in sorted(head_ports(cluster).items())
        if port == names.SERVE_PORT_NAME or port.startswith(names.SERVE_PORT_NAME + "-")
    ]
    custom = spec.get("serveService")
    if not ports and not custom:
        raise NoServePortError(
            "Please specify a port named 'serve' (or with the prefix 'serve-', e.g. 'serve-grpc') "
            "in the Ray head container; otherwise, the Kubernetes service for Ray Serve will not "
            "be created."
        )
    labels = {
        **originated_labels(rayservice),
        names.SERVE_LABEL: f"{name}-serve",
        names.CREATED_BY_LABEL: names.CREATED_BY,
    }
    selector = {names.CLUSTER_LABEL: cluster["metadata"]["name"], names.SERVE_LABEL: "true"}
    service_type = (
        spec.get("rayClusterConfig", {}).get("headGroupSpec", {}).get("serviceType") or "ClusterIP"
    )
    service: JSON = json_copy(custom) if custom else {}
    service_meta = service.setdefault("metadata", {})
    service_meta["name"] = service_meta.get("name") or serve_service_name(name)
    service_meta["namespace"] = rayservice["metadata"]["namespace"]
    service_meta["labels"] = {**(service_meta.get("labels") or {}), **labels}
    service_meta["ownerReferences"] = [owner_reference(rayservice)]
    service_spec = service.setdefault("spec", {})
    service_spec["selector"] = selector
    if ports:
        by_name = {port.get("name"): port for port in service_spec.get("ports") or []}
        service_spec["ports"] = [by_name.get(port["name"], port) for port in ports]
    service_spec.setdefault("type", service_type)
    service.update(apiVersion="v1", kind="Service")
    service.pop("status", None)
    return service


def build_head_service_for_service(rayservice: RayService, cluster: RayCluster) -> JSON:
    """`<rayservice>-head-svc` selecting the head Pod of `cluster`."""
    return build_head_service_for_owner(rayservice, cluster)


def serve_config(rayservice: RayService) -> dict[str, Any]:
    """`serveConfigV2` parsed as KubeRay parses it (`bounded_yaml`: the loader admission uses too),
    the body of `PUT /api/serve/applications/`."""
    text = rayservice.get("spec", {}).get("serveConfigV2") or ""
    try:
        parsed = load_go_yaml(text) if text else {}
    except UnreadableYamlError as error:
        raise InvalidServeConfigError(f"spec.serveConfigV2: {error}") from error
    if not isinstance(parsed, dict):
        raise InvalidServeConfigError("spec.serveConfigV2 must be a YAML mapping")
    return parsed


def serve_config_hash(rayservice: RayService) -> str:
    """A digest of the parsed `serveConfigV2` (YAML formatting and key order do not count)."""
    canonical = json.dumps(serve_config(rayservice), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
