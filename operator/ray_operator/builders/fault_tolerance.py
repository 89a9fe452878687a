"""GCS fault tolerance settings on Ray Pods (KubeRay's `configureGCSFaultTolerance`).

With GCS FT on, the head stores cluster metadata outside its own process — in Redis (the
default backend) or in an embedded RocksDB on a PersistentVolumeClaim — so that a new head can
take over and workers survive the gap. This module writes the env vars, rayStartParams,
annotations and volumes that make Ray do so, and builds the PVC of the embedded backend
(`build_gcs_storage_pvc`, KubeRay's `BuildGCSStoragePVC`), with the two decisions about a claim
that already exists: what differs that cannot be changed in place (`gcs_storage_pvc_drift`), and
the one write that adopts it (`gcs_storage_pvc_adoption_patch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ray_operator.builders.containers import append_env, has_env, set_env_default
from ray_operator.builders.metadata import owner_references
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.quantity import InvalidQuantityError, Quantity
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    cluster_annotations,
    cluster_name,
    cluster_namespace,
    is_gcs_ft_embedded,
    is_gcs_ft_enabled,
    metadata,
    spec,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster


# A worker waits this long for a restarted GCS before its raylet gives up; Ray's default (60 s)
# is shorter than a new head usually needs (~120 s), so workers would die needlessly.
WORKER_GCS_RECONNECT_TIMEOUT_S = "600"


def configure_gcs_fault_tolerance(
    cluster: RayCluster, *, node_type: str, pod_meta: JSON, pod_spec: JSON, params: dict[str, str]
) -> None:
    """Apply GCS FT to one Pod; the head always records whether FT is on in an annotation."""
    enabled = is_gcs_ft_enabled(cluster)
    pod_annotations = pod_meta.setdefault("annotations", {})
    if node_type == names.HEAD_NODE:
        pod_annotations[names.FT_ENABLED_ANNOTATION] = "true" if enabled else "false"
    if not enabled:
        return
    container = pod_spec["containers"][0]
    if node_type == names.WORKER_NODE:
        set_env_default(
            container,
            names.ENV_RAY_GCS_RPC_SERVER_RECONNECT_TIMEOUT_S,
            WORKER_GCS_RECONNECT_TIMEOUT_S,
        )
        return
    if is_gcs_ft_embedded(spec(cluster)):
        _configure_embedded(cluster, container=container, pod_spec=pod_spec)
    else:
        _configure_redis(
            cluster, container=container, pod_annotations=pod_annotations, params=params
        )


def external_storage_namespace(cluster: RayCluster) -> str:
    """The Redis key namespace: the option, else the legacy annotation, else the cluster's uid."""
    options = spec(cluster).get("gcsFaultToleranceOptions") or {}
    if options.get("externalStorageNamespace"):
        return str(options["externalStorageNamespace"])
    annotated = cluster_annotations(cluster).get(names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION)
    return annotated if annotated is not None else str(metadata(cluster).get("uid", ""))


def _configure_redis(
    cluster: RayCluster, *, container: JSON, pod_annotations: JSON, params: dict[str, str]
) -> None:
    namespace = external_storage_namespace(cluster)
    pod_annotations[names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION] = namespace
    set_env_default(container, names.ENV_RAY_EXTERNAL_STORAGE_NS, namespace)
    options = spec(cluster).get("gcsFaultToleranceOptions")
    if options is None:
        # Legacy annotation-only FT: a password given in rayStartParams is also exported, so that
        # the Redis cleanup Job can log in. Not recommended, but KubeRay supports it.
        if not has_env(container, names.ENV_REDIS_PASSWORD) and "redis-password" in params:
            append_env(
                container, {"name": names.ENV_REDIS_PASSWORD, "value": params["redis-password"]}
            )
        return
    append_env(
        container, {"name": names.ENV_RAY_REDIS_ADDRESS, "value": options.get("redisAddress", "")}
    )
    for credential, env_name, param in (
        (options.get("redisUsername"), names.ENV_REDIS_USERNAME, "redis-username"),
        (options.get("redisPassword"), names.ENV_REDIS_PASSWORD, "redis-password"),
    ):
        if credential is not None:
            # `ray start` reads the credential from the env var, so a Secret reference works.
            params[param] = f"${env_name}"
            append_env(container, {"name": env_name, **credential})


def _configure_embedded(cluster: RayCluster, *, container: JSON, pod_spec: JSON) -> None:
    storage = (spec(cluster).get("gcsFaultToleranceOptions") or {}).get("storage") or {}
    set_env_default(container, names.ENV_RAY_GCS_STORAGE, "rocksdb")
    set_env_default(container, names.ENV_RAY_GCS_STORAGE_PATH, names.GCS_STORAGE_MOUNT_PATH)
    mount: JSON = {"name": names.GCS_STORAGE_VOLUME_NAME, "mountPath": names.GCS_STORAGE_MOUNT_PATH}
    if storage.get("subPath"):
        mount["subPath"] = storage["subPath"]
    container.setdefault("volumeMounts", []).append(mount)
    claim = {"claimName": gcs_storage_claim_name(cluster)}
    pod_spec.setdefault("volumes", []).append(
        {"name": names.GCS_STORAGE_VOLUME_NAME, "persistentVolumeClaim": claim}
    )


def gcs_storage_claim_name(cluster: RayCluster) -> str:
    """The PVC behind embedded GCS storage: the user's claim, else `<cluster>-gcs-pvc`."""
    storage = (spec(cluster).get("gcsFaultToleranceOptions") or {}).get("storage") or {}
    return str(storage.get("claimName") or cluster_name(cluster) + names.GCS_STORAGE_PVC_SUFFIX)


def needs_gcs_storage_pvc(cluster: ClusterLike) -> bool:
    """Whether the operator must create a PVC: embedded GCS FT without the user's own claim."""
    manifest = as_cluster_manifest(cluster)
    storage = (spec(manifest).get("gcsFaultToleranceOptions") or {}).get("storage") or {}
    return is_gcs_ft_embedded(spec(manifest)) and not storage.get("claimName")


def build_gcs_storage_pvc(cluster: ClusterLike) -> JSON:
    """`<cluster>-gcs-pvc` for embedded GCS storage: 1Gi ReadWriteOnce unless `storage` says more.

    Owned by the RayCluster (deleted with it) unless `storage.deletionPolicy` is Retain.
    """
    manifest = as_cluster_manifest(cluster)
    storage = (spec(manifest).get("gcsFaultToleranceOptions") or {}).get("storage") or {}
    pvc_spec: JSON = {
        "accessModes": list(storage.get("accessModes") or ["ReadWriteOnce"]),
        "resources": {"requests": {"storage": str(storage.get("size") or "1Gi")}},
    }
    if storage.get("storageClassName") is not None:
        pvc_spec["storageClassName"] = storage["storageClassName"]
    meta: JSON = {
        "name": gcs_storage_claim_name(manifest),
        "namespace": cluster_namespace(manifest),
        "labels": {
            names.CLUSTER_LABEL: cluster_name(manifest),
            names.CREATED_BY_LABEL: names.CREATED_BY,
        },
    }
    if storage.get("deletionPolicy") != "Retain" and owner_references(manifest):
        meta["ownerReferences"] = owner_references(manifest)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": pvc_spec}


def retains_gcs_storage(cluster: ClusterLike) -> bool:
    """Whether the operator-made PVC outlives the cluster (`storage.deletionPolicy: Retain`)."""
    options = spec(as_cluster_manifest(cluster)).get("gcsFaultToleranceOptions", {})
    return options.get("storage", {}).get("deletionPolicy") == "Retain"


def gcs_storage_pvc_drift(desired: JSON, existing: Mapping[str, Any]) -> str:
    """What differs between the PVC we would build and the one that exists ("": nothing).

    Only what cannot be changed in place is compared (KubeRay's `gcsStoragePVCDrift`): requested
    size, an explicitly chosen storageClassName (an omitted one is filled in by the API server
    with the default class) and the access modes as a set. Nothing is repaired: a PVC is not
    reconfigured in place, so the difference is reported.
    """
    differences: list[str] = []
    wanted = _requested_storage(desired)
    found = _requested_storage(existing)
    if _quantity_or_text(wanted) != _quantity_or_text(found):
        differences.append(f"requested size {wanted} != current {found}")
    wanted_class = desired["spec"].get("storageClassName")
    found_class = (existing.get("spec") or {}).get("storageClassName")
    if wanted_class is not None and wanted_class != found_class:
        differences.append(
            f"storageClassName {wanted_class} != current {found_class or '<default>'}"
        )
    wanted_modes = list(desired["spec"].get("accessModes") or [])
    found_modes = list((existing.get("spec") or {}).get("accessModes") or [])
    if sorted(map(str, wanted_modes)) != sorted(map(str, found_modes)):
        differences.append(f"accessModes {wanted_modes} != current {found_modes}")
    return "; ".join(differences)


def gcs_storage_pvc_adoption_patch(
    cluster: ClusterLike, existing: Mapping[str, Any]
) -> JSON | None:
    """The merge patch that makes an existing `<cluster>-gcs-pvc` this cluster's; None: none needed.

    As KubeRay: the controller reference to the RayCluster is added (deleted with the cluster),
    or removed under `deletionPolicy: Retain`, so a policy change applies to a provisioned PVC.
    Ours besides: a claim without the `ray.io/cluster` label gets it, or the label-selected cache
    would never see it. A claim controlled by something else is not touched (`ValueError`).
    A PVC KubeRay made for this cluster needs no patch. The patch carries the resourceVersion:
    it fails on a claim that changed since it was read.
    """
    manifest = as_cluster_manifest(cluster)
    meta = existing.get("metadata") or {}
    references = list(meta.get("ownerReferences") or [])
    uid = metadata(manifest).get("uid")
    controller = next((r for r in references if r.get("controller")), None)
    if controller is not None and controller.get("uid") != uid:
        raise ValueError(
            f"PersistentVolumeClaim {meta.get('name')} is controlled by "
            f"{controller.get('kind')} {controller.get('name')}, not this RayCluster"
        )
    patch_meta: JSON = {}
    if retains_gcs_storage(manifest) and controller is not None:
        patch_meta["ownerReferences"] = [r for r in references if r is not controller]
    elif not retains_gcs_storage(manifest) and controller is None:
        patch_meta["ownerReferences"] = [*references, *owner_references(manifest)]
    if (meta.get("labels") or {}).get(names.CLUSTER_LABEL) != cluster_name(manifest):
        patch_meta["labels"] = {names.CLUSTER_LABEL: cluster_name(manifest)}
    if not patch_meta:
        return None
    patch_meta["resourceVersion"] = meta.get("resourceVersion")
    return {"metadata": patch_meta}


def _requested_storage(pvc: Mapping[str, Any]) -> str:
    requests = ((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}
    return str(requests.get("storage", ""))


def _quantity_or_text(text: str) -> Fraction | str:
    """The amount `text` means (so 1Gi equals 1024Mi), or the text itself if it is none."""
    try:
        return Quantity.parse(text).amount
    except InvalidQuantityError:
        return text
