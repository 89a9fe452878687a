"""The Secret holding a RayCluster's Ray auth token, for `authOptions.mode: token`.

Ray's token auth needs the same token in every Ray container (`RAY_AUTH_TOKEN`, read from this
Secret's `auth_token` key) and in every client of the dashboard. As KubeRay does, the operator
generates it when the user named no Secret of their own (`authOptions.secretName`) and did not
choose Kubernetes ServiceAccount tokens instead (`enableK8sTokenAuth`). The token is an input:
this module stays pure and never sees where randomness comes from.
"""

from __future__ import annotations

from ray_operator.builders.metadata import dependent_metadata
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import check_name
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    cluster_name,
    is_auth_enabled,
    is_k8s_token_auth_enabled,
    read_cluster_manifest,
    spec,
)


def needs_generated_auth_secret(cluster: ClusterLike) -> bool:
    """Token auth with neither a user-provided Secret nor Kubernetes ServiceAccount tokens."""
    cluster_spec = spec(read_cluster_manifest(cluster))
    return (
        is_auth_enabled(cluster_spec)
        and not is_k8s_token_auth_enabled(cluster_spec)
        and not cluster_spec.get("authOptions", {}).get("secretName")
    )


def auth_secret_name(cluster: ClusterLike) -> str:
    """The generated Secret's name: the cluster's (where the Ray containers look for it)."""
    return check_name(cluster_name(read_cluster_manifest(cluster)))


def build_auth_secret(cluster: ClusterLike, *, token: str) -> JSON:
    manifest = as_cluster_manifest(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": dependent_metadata(manifest, name=auth_secret_name(manifest)),
        "type": "Opaque",
        "stringData": {names.AUTH_TOKEN_SECRET_KEY: token},
    }
