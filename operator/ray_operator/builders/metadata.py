"""Labels and owner references on the objects a RayCluster owns.

KubeRay's label set (`common/pod.go: labelPod`, `common/service.go: HeadServiceLabels`) is what
Ray's autoscaler, dashboards and users select by, so it is reproduced exactly. Users may add labels
through the Pod template or a group's `labels` field; they may not override the cluster, group and
node-type labels (KubeRay's rule) nor, in ours, `app.kubernetes.io/created-by`: the runtime watches
Jobs and RBAC objects by that label (either operator's value). Pods are watched by
`ray.io/cluster`, so a Pod whose `created-by` label someone removed is still seen (and still
counted, being owned). No selector of ours requires `created-by`: the other operator's Pods must
match too (a takeover either way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import identifier
from ray_operator.spec.raycluster import JSON, cluster_name, cluster_namespace, metadata

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster


_PROTECTED_POD_LABELS = frozenset(
    {names.NODE_TYPE_LABEL, names.GROUP_LABEL, names.CLUSTER_LABEL, names.CREATED_BY_LABEL}
)


def pod_labels(
    cluster: RayCluster, *, node_type: str, group_name: str, extra: dict[str, str]
) -> dict[str, str]:
    """KubeRay's Pod labels, plus user labels that do not touch the protected keys."""
    result = {
        names.IS_RAY_NODE_LABEL: "yes",
        names.CLUSTER_LABEL: cluster_name(cluster),
        names.NODE_TYPE_LABEL: node_type,
        names.GROUP_LABEL: group_name,
        names.IDENTIFIER_LABEL: identifier(cluster, node_type),
        names.APP_NAME_LABEL: names.APP_NAME,
        names.CREATED_BY_LABEL: names.CREATED_BY,
    }
    result.update({key: value for key, value in extra.items() if key not in _PROTECTED_POD_LABELS})
    return result


def head_service_selector(cluster: RayCluster) -> dict[str, str]:
    """What the head Service selects: KubeRay's `HeadServiceLabels` without `created-by`.

    KubeRay's selector also requires `app.kubernetes.io/created-by=kuberay-operator`; ours must
    not require either operator's value: after a takeover (either way) the head Pod may be made
    by the other operator, and a head Service that does not select it leaves workers without a
    GCS address. The Service still carries the label (`head_service_labels`).
    """
    return {
        names.CLUSTER_LABEL: cluster_name(cluster),
        names.NODE_TYPE_LABEL: names.HEAD_NODE,
        names.IDENTIFIER_LABEL: identifier(cluster, names.HEAD_NODE),
        names.APP_NAME_LABEL: names.APP_NAME,
    }


def owner_references(cluster: RayCluster) -> list[JSON]:
    """A controller reference to the RayCluster, or none while its uid is unknown (dry builds)."""
    meta = metadata(cluster)
    if not meta.get("uid"):
        return []
    return [
        {
            "apiVersion": cluster.get("apiVersion", "ray.io/v1"),
            "kind": cluster.get("kind", "RayCluster"),
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def dependent_metadata(cluster: RayCluster, *, name: str) -> JSON:
    """Metadata of an object a RayCluster owns besides Pods and Services (RBAC, Secrets): its
    cluster label and our created-by label (RBAC is watched by it), and an owner reference."""
    meta: JSON = {
        "name": name,
        "namespace": cluster_namespace(cluster),
        "labels": {
            names.CLUSTER_LABEL: cluster_name(cluster),
            names.APP_NAME_LABEL: names.APP_NAME,
            names.CREATED_BY_LABEL: names.CREATED_BY,
        },
    }
    owners = owner_references(cluster)
    if owners:
        meta["ownerReferences"] = owners
    return meta
