"""Head and worker Pods of a RayCluster, as KubeRay would create them for the same spec.

`build_head_pod` and `build_worker_pod` are pure: the typed RayCluster (or its mapping) in, one Pod
dict out, ready to POST. The random part of the name is an argument (`suffix`), so the same input
always gives the same Pod, and the reconciler can record the name before the create call.
The step order follows KubeRay's `DefaultHeadPodTemplate`/`DefaultWorkerPodTemplate` and `BuildPod`
because env var order is visible to users (later duplicates win in Kubernetes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray_operator import features
from ray_operator.builders import containers as inject
from ray_operator.builders import history_server
from ray_operator.builders.batch_scheduling import HEAD_GROUP, add_scheduling_metadata
from ray_operator.builders.fault_tolerance import configure_gcs_fault_tolerance
from ray_operator.builders.metadata import owner_references, pod_labels
from ray_operator.builders.mtls import configure_tls
from ray_operator.builders.ray_start import complete_params, head_port, ray_start_command
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.hashing import pod_template_hash
from ray_operator.spec.object_names import (
    check_name,
    head_pod_name,
    head_service_fqdn,
    worker_pod_name,
)
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    autoscaler_version,
    cluster_annotations,
    cluster_name,
    cluster_namespace,
    creator_kind,
    find_worker_group,
    head_group,
    is_auth_enabled,
    is_autoscaling_enabled,
    json_copy,
    ray_container,
    spec,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

    from ray_operator.spec.raycluster import GroupSpec


_ULIMIT = f"ulimit -n ${{{names.ENV_RAY_START_ULIMIT_OPEN_FILES}:-65536}}"


@dataclasses.dataclass(frozen=True)
class PodOptions:
    """Operator-wide settings that change the Pods built (KubeRay's operator flags and env)."""

    cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN
    """DNS domain of the Kubernetes cluster, used in the head Service FQDN workers join."""
    default_container_env: tuple[Mapping[str, Any], ...] = ()
    """Env vars added to every Ray container unless it already sets them."""
    inject_wait_gcs_ready: bool = True
    """Give workers the `wait-gcs-ready` init container (ENABLE_INIT_CONTAINER_INJECTION)."""
    inject_probes: bool = True
    """Add liveness/readiness probes the user did not set (KubeRay's ENABLE_PROBES_INJECTION)."""
    login_shell: bool = False
    """Run generated commands in a login shell, `bash -lc` (KubeRay's ENABLE_LOGIN_SHELL)."""
    history_server: bool = False
    """Add the history-server collector sidecar (KubeRay's RayClusterHistoryServer gate)."""
    batch_scheduler: str = ""
    """`--batch-scheduler`: its labels, annotations and `schedulerName` on every Pod."""


def with_feature_gates(options: PodOptions, gates: features.FeatureGates) -> PodOptions:
    """`options` with what the operator's feature gates turn on in the Pods it builds."""
    return dataclasses.replace(
        options, history_server=gates.enabled(features.RAY_CLUSTER_HISTORY_SERVER)
    )


@dataclasses.dataclass
class _PodDraft:
    """The Pod being built: a private copy of the group's template, plus what is known about it."""

    cluster: RayCluster
    group: GroupSpec
    node_type: str
    meta: JSON
    spec: JSON
    fqdn: str
    port: str
    params: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ray(self) -> JSON:
        return ray_container(self.spec)


def build_head_pod(cluster: ClusterLike, *, suffix: str, options: PodOptions | None = None) -> JSON:
    """The head Pod `<cluster>-head-<suffix>`."""
    options = options or PodOptions()
    manifest = as_cluster_manifest(cluster)
    draft = _draft(
        manifest,
        head_group(manifest),
        node_type=names.HEAD_NODE,
        group_name=names.HEAD_GROUP_NAME,
        options=options,
    )
    if is_autoscaling_enabled(spec(manifest)):
        _add_autoscaler(draft, options=options)
    _configure_shared(draft)
    _add_history_collector(draft, options=options)
    pod = _finish(draft, name=head_pod_name(manifest, suffix=suffix), options=options)
    return add_scheduling_metadata(
        options.batch_scheduler, parent=manifest, child=pod, group_name=HEAD_GROUP
    )


def build_worker_pod(
    cluster: ClusterLike,
    group_name: str,
    *,
    suffix: str,
    replica_index: int,
    replica_name: str | None = None,
    host_index: int = 0,
    options: PodOptions | None = None,
) -> JSON:
    """A worker Pod `<cluster>-<group>-worker-<suffix>`; multi-host replicas pass `replica_name`."""
    options = options or PodOptions()
    manifest = as_cluster_manifest(cluster)
    group = find_worker_group(manifest, group_name)
    draft = _draft(
        manifest, group, node_type=names.WORKER_NODE, group_name=group_name, options=options
    )
    draft.meta["labels"].update(
        _replica_labels(index=replica_index, name=replica_name, host_index=host_index)
    )
    if options.inject_wait_gcs_ready:
        init = inject.wait_gcs_ready_container(
            draft.ray, fqdn=draft.fqdn, port=draft.port, login_shell=options.login_shell
        )
        draft.spec.setdefault("initContainers", []).append(init)
    _configure_shared(draft)
    if is_autoscaling_enabled(spec(manifest)) and autoscaler_version(spec(manifest)) == "v2":
        # Autoscaler v2 replaces failed workers itself; a restarting container would confuse it.
        draft.spec["restartPolicy"] = "Never"
    _add_history_collector(draft, options=options)
    name = worker_pod_name(manifest, group_name, suffix=suffix)
    pod = _finish(draft, name=name, options=options)
    return add_scheduling_metadata(
        options.batch_scheduler, parent=manifest, child=pod, group_name=group_name
    )


def _draft(
    cluster: RayCluster, group: GroupSpec, *, node_type: str, group_name: str, options: PodOptions
) -> _PodDraft:
    """A private copy of the group's template with KubeRay's labels and `rayStartParams`."""
    template: JSON = json_copy(group.get("template", {}))
    meta = {
        key: value
        for key, value in (template.get("metadata") or {}).items()
        if key not in ("name", "generateName", "namespace")
    }
    meta["annotations"] = dict(meta.get("annotations") or {})
    draft = _PodDraft(
        cluster=cluster,
        group=group,
        node_type=node_type,
        meta=meta,
        spec=template.get("spec") or {},
        fqdn=head_service_fqdn(cluster, cluster_domain=options.cluster_domain),
        port=head_port(head_group(cluster).get("rayStartParams") or {}),
    )
    is_head = node_type == names.HEAD_NODE
    extra = _user_labels(group)
    meta["labels"] = pod_labels(cluster, node_type=node_type, group_name=group_name, extra=extra)
    draft.params = complete_params(
        group,
        node_type=node_type,
        head_address=None if is_head else f"{draft.fqdn}:{draft.port}",
        container_resources=draft.ray.get("resources") or {},
    )
    _copy_overwrite_annotation(draft)
    return draft


def _user_labels(group: GroupSpec) -> dict[str, str]:
    """Template labels overlaid with the group's top-level `labels` field (which wins)."""
    template_labels = ((group.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return {**template_labels, **(group.get("labels") or {})}


def _replica_labels(*, index: int, name: str | None, host_index: int) -> dict[str, str]:
    result = {names.WORKER_REPLICA_INDEX_LABEL: str(index)}
    if name is not None:
        result[names.WORKER_REPLICA_NAME_LABEL] = name
        result[names.REPLICA_HOST_INDEX_LABEL] = str(host_index)
    return result


def _copy_overwrite_annotation(draft: _PodDraft) -> None:
    value = cluster_annotations(draft.cluster).get(names.OVERWRITE_CONTAINER_CMD_ANNOTATION, "")
    if value.lower() == "true":
        draft.meta["annotations"][names.OVERWRITE_CONTAINER_CMD_ANNOTATION] = "true"


def _add_autoscaler(draft: _PodDraft, *, options: PodOptions) -> None:
    """The autoscaler sidecar, its service account and the v1/v2 switch on the Ray container."""
    cluster_spec = spec(draft.cluster)
    # Ray's own monitor does not understand Kubernetes; the sidecar autoscaler replaces it.
    draft.params["no-monitor"] = "true"
    account = draft.spec.get("serviceAccountName") or cluster_name(draft.cluster)
    draft.spec["serviceAccountName"] = check_name(account)
    sidecar = inject.autoscaler_container(
        cluster_spec,
        cluster_name=cluster_name(draft.cluster),
        ray_image=draft.ray.get("image"),
        login_shell=options.login_shell,
    )
    draft.spec["containers"].append(sidecar)
    version = autoscaler_version(cluster_spec)
    if version == "v2":
        inject.append_env(draft.ray, {"name": names.ENV_RAY_ENABLE_AUTOSCALER_V2, "value": "true"})
        draft.spec["restartPolicy"] = "Never"
    elif version == "v1":
        inject.append_env(draft.ray, {"name": names.ENV_RAY_ENABLE_AUTOSCALER_V2, "value": "false"})


def _configure_shared(draft: _PodDraft) -> None:
    """The template steps head and workers share: GCS FT, the metrics port, token auth, mTLS."""
    configure_gcs_fault_tolerance(
        draft.cluster,
        node_type=draft.node_type,
        pod_meta=draft.meta,
        pod_spec=draft.spec,
        params=draft.params,
    )
    inject.ensure_metrics_port(draft.ray)
    _configure_token_auth(draft)
    configure_tls(draft.cluster, draft.spec, node_type=draft.node_type)


def _configure_token_auth(draft: _PodDraft) -> None:
    cluster_spec = spec(draft.cluster)
    if not is_auth_enabled(cluster_spec):
        return
    name = cluster_name(draft.cluster)
    inject.token_auth_env(
        draft.ray, cluster_spec=cluster_spec, pod_spec=draft.spec, cluster_name=name
    )
    for init in draft.spec.get("initContainers") or []:
        if init.get("name") == names.WAIT_GCS_READY_CONTAINER_NAME:
            inject.token_auth_env(init, cluster_spec=cluster_spec, pod_spec=None, cluster_name=name)


def _add_history_collector(draft: _PodDraft, *, options: PodOptions) -> None:
    if options.history_server:
        history_server.add_collector(
            draft.spec,
            cluster=draft.cluster,
            cluster_spec=spec(draft.cluster),
            node_type=draft.node_type,
            fqdn=draft.fqdn,
        )


def _finish(draft: _PodDraft, *, name: str, options: PodOptions) -> JSON:
    """KubeRay's `BuildPod`: volumes, the command, env vars and probes; then the Pod's metadata."""
    creator = creator_kind(draft.cluster)
    _add_serve_label(draft, creator=creator)
    _add_volumes(draft)
    if options.history_server:
        history_server.connect_ray_container(draft.spec, draft.ray)
    start_command = ray_start_command(draft.params, node_type=draft.node_type)
    _set_command(draft, start_command=start_command, login_shell=options.login_shell)
    inject.init_container_env(draft.spec, fqdn=draft.fqdn)
    for env in options.default_container_env:
        if not inject.has_env(draft.ray, str(env["name"])):
            inject.append_env(draft.ray, dict(env))
    inject.ray_container_env(
        draft.ray,
        node_type=draft.node_type,
        fqdn=draft.fqdn,
        port=draft.port,
        start_command=start_command,
        creator=creator,
    )
    if options.history_server:
        history_server.add_ray_event_env(draft.spec, draft.ray)
    if options.inject_probes:
        ray_version = spec(draft.cluster).get("rayVersion")
        inject.inject_probes(
            draft.ray,
            node_type=draft.node_type,
            params=draft.params,
            ray_version=ray_version,
            creator=creator,
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _pod_metadata(draft, name=name),
        "spec": draft.spec,
    }


def _add_serve_label(draft: _PodDraft, *, creator: str) -> None:
    # For RayService, workers always receive serve traffic (their readiness probe gates it); the
    # head starts out of the serve Service until the RayService controller flips the label.
    if creator == names.CRD_RAY_SERVICE:
        draft.meta["labels"][names.SERVE_LABEL] = (
            "false" if draft.node_type == names.HEAD_NODE else "true"
        )


def _add_volumes(draft: _PodDraft) -> None:
    # /dev/shm backs Ray's object store (a container's default /dev/shm is 64 MiB), unless the
    # user moved the object store elsewhere with `plasma-directory`.
    if "plasma-directory" not in draft.params:
        inject.add_empty_dir(
            draft.spec,
            draft.ray,
            volume=names.SHARED_MEMORY_VOLUME_NAME,
            mount_path=names.SHARED_MEMORY_MOUNT_PATH,
            medium="Memory",
        )
    sidecar = next(
        (c for c in draft.spec["containers"] if c.get("name") == names.AUTOSCALER_CONTAINER_NAME),
        None,
    )
    if (
        draft.node_type == names.HEAD_NODE
        and sidecar is not None
        and is_autoscaling_enabled(spec(draft.cluster))
    ):
        # The autoscaler writes event logs that the head's dashboard reads (ray-project/ray#13434).
        for container in (draft.ray, sidecar):
            inject.add_empty_dir(
                draft.spec,
                container,
                volume=names.RAY_LOG_VOLUME_NAME,
                mount_path=names.RAY_LOG_MOUNT_PATH,
                medium="",
            )


def _set_command(draft: _PodDraft, *, start_command: str, login_shell: bool) -> None:
    """Run the generated `ray start` after the user's own command, unless told not to."""
    ray = draft.ray
    existing = "".join(f" {part} " for part in ray.get("command") or [])
    existing += "".join(f" {part} " for part in ray.get("args") or [])
    overwrite = (
        draft.meta["annotations"].get(names.OVERWRITE_CONTAINER_CMD_ANNOTATION, "").lower()
        == "true"
    )
    # A command that already runs `ray start` is left alone (KubeRay's legacy escape hatch).
    if overwrite or "ray start" in existing:
        return
    generated = f"{_ULIMIT}; {start_command}"
    ray["command"] = inject.shell_command(login_shell=login_shell)
    # `ray start --block` never returns, so the user's command must run first.
    ray["args"] = [f"{existing} && {generated}" if existing else generated]


def _pod_metadata(draft: _PodDraft, *, name: str) -> JSON:
    meta = draft.meta
    meta["name"] = name
    meta["namespace"] = cluster_namespace(draft.cluster)
    if draft.node_type == names.HEAD_NODE:
        # Only the head, as KubeRay (`createHeadPod`): the Recreate upgrade reads the head's.
        meta["annotations"][names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION] = pod_template_hash(
            draft.cluster
        )
        meta["annotations"][names.KUBERAY_VERSION_ANNOTATION] = names.KUBERAY_VERSION
    restart = cluster_annotations(draft.cluster).get(names.RESTART_ANNOTATION)
    if restart is not None:
        meta["annotations"][names.RESTART_ANNOTATION] = restart
    owners = owner_references(draft.cluster)
    if owners:
        meta["ownerReferences"] = owners
    return meta
