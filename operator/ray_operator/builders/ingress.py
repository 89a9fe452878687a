"""The head's Ingress of `headGroupSpec.enableIngress` (KubeRay's `BuildIngressForHeadService`).

One rule sends `ingressOptions.path` (default `/`, pathType Prefix) of `ingressOptions.host` (any
host when unset) to the head Service's dashboard port. The RayCluster's annotations are copied
onto the Ingress — KubeRay's generic way to configure an ingress controller — except the
deprecated `kubernetes.io/ingress.class`, which becomes `spec.ingressClassName` instead (setting
both is refused by the API server). KubeRay's OpenShift Route alternative is not built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.metadata import owner_references
from ray_operator.builders.services import head_ports
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import check_name, head_service_name, identifier
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    cluster_annotations,
    cluster_name,
    cluster_namespace,
    head_group,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster


INGRESS_CLASS_ANNOTATION: Final = "kubernetes.io/ingress.class"
INGRESS_SUFFIX: Final = "head-ingress"


def wants_ingress(cluster: RayCluster) -> bool:
    """Whether `headGroupSpec.enableIngress` is true (asked every reconcile: no copy made)."""
    return head_group(cluster).get("enableIngress") is True


def head_ingress_name(cluster: RayCluster) -> str:
    """`<cluster>-head-ingress`, clipped as KubeRay clips object names."""
    return check_name(f"{cluster_name(cluster)}-{INGRESS_SUFFIX}")


def build_head_ingress(cluster: ClusterLike) -> JSON:
    """The Ingress to the head Service's dashboard port, owned by the RayCluster."""
    manifest = as_cluster_manifest(cluster)
    options = head_group(manifest).get("ingressOptions") or {}
    annotations = cluster_annotations(manifest)
    ingress_class = annotations.pop(INGRESS_CLASS_ANNOTATION, None)
    dashboard_port = head_ports(manifest).get(names.DASHBOARD_PORT_NAME, names.DASHBOARD_PORT)
    path: JSON = {
        "path": _given_or(options.get("path"), "/"),
        "pathType": _given_or(options.get("pathType"), "Prefix"),
        "backend": {
            "service": {
                "name": head_service_name(manifest),
                "port": {"number": dashboard_port},
            }
        },
    }
    rule: JSON = {"http": {"paths": [path]}}
    if options.get("host"):
        rule["host"] = options["host"]
    ingress_spec: JSON = {"rules": [rule]}
    if options.get("tls"):
        ingress_spec["tls"] = list(options["tls"])
    if ingress_class is not None:
        ingress_spec["ingressClassName"] = ingress_class
    meta: JSON = {
        "name": head_ingress_name(manifest),
        "namespace": cluster_namespace(manifest),
        "labels": {
            names.CLUSTER_LABEL: cluster_name(manifest),
            names.IDENTIFIER_LABEL: identifier(manifest, names.HEAD_NODE),
            names.APP_NAME_LABEL: names.APP_NAME,
            names.CREATED_BY_LABEL: names.CREATED_BY,
        },
        "annotations": annotations,
    }
    owners = owner_references(manifest)
    if owners:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": meta,
        "spec": ingress_spec,
    }


def _given_or(value: object, default: str) -> object:
    """`value` when the option is set at all (even to ""), as KubeRay reads its pointers."""
    return default if value is None else value


def ingress_annotation_patch(
    desired: Mapping[str, Any], existing: Mapping[str, Any]
) -> JSON | None:
    """The merge patch that gives the Ingress the cluster's current annotations; None: it has them.

    KubeRay updates the Ingress when the cluster's annotations change (how users configure their
    ingress controller). Only added or changed keys are written: annotations others put on the
    Ingress (an ingress controller's, kubectl's) stay, and nobody fights over them.
    """
    found = (existing.get("metadata") or {}).get("annotations") or {}
    wanted = desired["metadata"].get("annotations") or {}
    changed = {key: value for key, value in wanted.items() if found.get(key) != value}
    return {"metadata": {"annotations": changed}} if changed else None
