"""The ServiceAccount, Role and RoleBinding that let Ray's autoscaler (in the head Pod) scale.

Ray's autoscaler runs as a sidecar of the head Pod and talks to the API server with the head
Pod's ServiceAccount: it lists and patches Pods and patches the RayCluster's `replicas` and
`workersToDelete`. KubeRay creates these three objects for every RayCluster with
`enableInTreeAutoscaling: true`, named after the cluster, with the same rules; so do we, so the
autoscaler of any Ray version finds what it expects. A ServiceAccount the user names in the head
template is the user's to create (KubeRay's rule, kuberay#1128): we only bind the Role to it.
"""

from __future__ import annotations

from ray_operator.builders.metadata import dependent_metadata
from ray_operator.spec.object_names import check_name
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    cluster_name,
    cluster_namespace,
    head_group,
    pod_spec,
)

AUTOSCALER_RULES: tuple[JSON, ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    # In-place Pod resize (Kubernetes 1.33+), which newer autoscalers use for vertical scaling.
    {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "patch"]},
)


def autoscaler_service_account_name(cluster: ClusterLike) -> str:
    """The head Pod's ServiceAccount: the one its template names, else the cluster's name."""
    manifest = as_cluster_manifest(cluster)
    return str(pod_spec(head_group(manifest)).get("serviceAccountName") or cluster_name(manifest))


def user_names_service_account(cluster: ClusterLike) -> bool:
    """Whether the head template names a ServiceAccount (then the user creates it, not us)."""
    manifest = as_cluster_manifest(cluster)
    return bool(pod_spec(head_group(manifest)).get("serviceAccountName"))


def build_autoscaler_service_account(cluster: ClusterLike) -> JSON:
    manifest = as_cluster_manifest(cluster)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": dependent_metadata(
            manifest, name=check_name(autoscaler_service_account_name(manifest))
        ),
    }


def build_autoscaler_role(cluster: ClusterLike) -> JSON:
    manifest = as_cluster_manifest(cluster)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": dependent_metadata(manifest, name=check_name(cluster_name(manifest))),
        "rules": [dict(rule) for rule in AUTOSCALER_RULES],
    }


def build_autoscaler_role_binding(cluster: ClusterLike) -> JSON:
    manifest = as_cluster_manifest(cluster)
    name = check_name(cluster_name(manifest))
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": dependent_metadata(manifest, name=name),
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": check_name(autoscaler_service_account_name(manifest)),
                "namespace": cluster_namespace(manifest),
            }
        ],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
    }
