"""Names of the objects a RayCluster owns, and the label values derived from names.

KubeRay lets the API server pick Pod names (`generateName: <cluster>-head-`); we take the random
suffix as an explicit argument instead, so a builder is deterministic and the reconciler knows a
Pod's name before it asks for it (which is what makes create expectations exact). The prefixes,
truncations and service names are KubeRay's (`utils.PodName`, `CheckName`, `CheckLabel`,
`GenerateHeadServiceName`, `GenerateFQDNServiceName`), because users and Ray address them.
"""

from __future__ import annotations

import secrets
import string
from typing import TYPE_CHECKING

from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import cluster_name, cluster_namespace, head_group

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster


# 63 (DNS label) - len("-worker-") - 5 (random suffix): the longest prefix KubeRay keeps.
_MAX_POD_NAME_PREFIX = 50
_MAX_LABEL_VALUE = 63
# The alphabet the API server uses for generateName suffixes (no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(length: int = 5) -> str:
    """A suffix like the API server's generateName ones; for the reconciler, not the builders."""
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def pod_name_prefix(prefix: str, node_type: str) -> str:
    """`<prefix>-<node type>-`, the prefix clipped to 50 characters and lowercased (KubeRay's)."""
    return f"{prefix[:_MAX_POD_NAME_PREFIX]}-{node_type}-".lower()


def head_pod_name(cluster: RayCluster, *, suffix: str) -> str:
    return pod_name_prefix(cluster_name(cluster), names.HEAD_NODE) + suffix


def worker_pod_name(cluster: RayCluster, group_name: str, *, suffix: str) -> str:
    return pod_name_prefix(f"{cluster_name(cluster)}-{group_name}", names.WORKER_NODE) + suffix


def head_service_name(cluster: RayCluster) -> str:
    """`<cluster>-head-svc`, unless `headGroupSpec.headService.metadata.name` overrides it."""
    override = ((head_group(cluster).get("headService") or {}).get("metadata") or {}).get("name")
    return str(override) if override else f"{cluster_name(cluster)}-{names.HEAD_SERVICE_SUFFIX}"


def head_service_fqdn(
    cluster: RayCluster, *, cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN
) -> str:
    """What workers join: `<head service>.<namespace>.svc.<cluster domain>`."""
    return f"{head_service_name(cluster)}.{cluster_namespace(cluster)}.svc.{cluster_domain}"


def serve_service_name(owner_name: str) -> str:
    return f"{owner_name}-{names.SERVE_SERVICE_SUFFIX}"


def headless_service_name(cluster: RayCluster) -> str:
    return f"{cluster_name(cluster)}-{names.HEADLESS_SERVICE_SUFFIX}"


def replica_group_name(group_name: str, *, suffix: str) -> str:
    """The `ray.io/worker-group-replica-name` of one multi-host replica: `<group>-<suffix>`."""
    return f"{group_name}-{suffix}"


def check_label(value: str) -> str:
    """KubeRay's label-value clipping: keep the last 63 characters, never start with punctuation."""
    value = value[-_MAX_LABEL_VALUE:]
    if value and value[0] in string.punctuation:
        value = "r" + value[1:]
    return value


def check_name(value: str) -> str:
    """KubeRay's object-name clipping: keep the last 50 characters, start with a letter."""
    value = value[-_MAX_POD_NAME_PREFIX:]
    if value and (value[0].isdigit() or value[0] in string.punctuation):
        value = "r" + value[1:]
    return value


def identifier(cluster: RayCluster, node_type: str) -> str:
    """The `ray.io/identifier` label value: `<cluster>-<node type>`."""
    return check_label(f"{cluster_name(cluster)}-{node_type}")
