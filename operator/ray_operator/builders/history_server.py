"""The Ray history-server collector sidecar (`spec.historyServerOptions`, KubeRay's
`RayClusterHistoryServer` feature gate), as KubeRay builds it into head and worker Pods.

With the gate on and `historyServerOptions.collectorOptions` set, every Ray Pod gets a
`ray-history-collector` container (KubeRay's `BuildCollectorContainer`) that ships Ray's logs and
events to object storage; it shares `/tmp/ray` with the Ray container through the `ray-logs`
emptyDir, and the Ray container is told to export its events to the collector on
localhost:8084 (`setContainerEnvVars`). Nothing here touches KubeRay's hash annotations: KubeRay
hashes the RayCluster spec (where `historyServerOptions` is, and so is here), never the Pod.

Pure: each function edits the private copy of a Pod spec that `builders.pods` is building.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders import containers as inject
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import (
    JSON,
    cluster_name,
    cluster_namespace,
    is_auth_enabled,
    json_copy,
    metadata,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayClusterSpec

COLLECTOR_CONTAINER_NAME: Final = "ray-history-collector"
EVENTS_PORT: Final = "8084"
# What the collector reads from its env; KubeRay sets them and refuses them in collectorOptions.env.
ENV_POD_IP: Final = "POD_IP"
ENV_RAY_ROLE: Final = "RAY_ROLE"
ENV_OWNER_KIND: Final = "OWNER_KIND"
ENV_OWNER_NAME: Final = "OWNER_NAME"
ENV_EVENTS_PORT: Final = "EVENTS_PORT"
MANAGED_COLLECTOR_ENV: Final = (
    ENV_POD_IP,
    names.ENV_FQ_RAY_IP,
    names.ENV_RAY_CLUSTER_NAME,
    names.ENV_RAY_CLUSTER_NAMESPACE,
    ENV_RAY_ROLE,
    ENV_OWNER_KIND,
    ENV_OWNER_NAME,
    ENV_EVENTS_PORT,
)
ENV_RAY_DASHBOARD_ADDRESS: Final = "RAY_DASHBOARD_ADDRESS"
_HEAD_DASHBOARD_ADDRESS = "http://localhost:8265"
_DEFAULT_RESOURCES: Final[Mapping[str, Mapping[str, str]]] = {
    "limits": {"cpu": "200m", "memory": "256Mi"},
    "requests": {"cpu": "50m", "memory": "64Mi"},
}
_EXPOSABLE_EVENT_TYPES = ",".join(
    (
        "TASK_DEFINITION_EVENT",
        "TASK_LIFECYCLE_EVENT",
        "ACTOR_TASK_DEFINITION_EVENT",
        "TASK_PROFILE_EVENT",
        "DRIVER_JOB_DEFINITION_EVENT",
        "DRIVER_JOB_LIFECYCLE_EVENT",
        "ACTOR_DEFINITION_EVENT",
        "ACTOR_LIFECYCLE_EVENT",
        "NODE_DEFINITION_EVENT",
        "NODE_LIFECYCLE_EVENT",
    )
)
# The Ray container's side: Ray's event aggregator pushes to the collector (defaults only: a
# user's own value wins, as in KubeRay).
_RAY_EVENT_ENV: Final = (
    ("RAY_enable_ray_event", "true"),
    ("RAY_enable_core_worker_ray_event_to_aggregator", "true"),
    (
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR",
        f"http://localhost:{EVENTS_PORT}/v1/events",
    ),
    ("RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES", _EXPOSABLE_EVENT_TYPES),
    (
        "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES",
        _EXPOSABLE_EVENT_TYPES,
    ),
)


def collector_options(cluster_spec: RayClusterSpec) -> Mapping[str, Any] | None:
    """`historyServerOptions.collectorOptions`, or None when the cluster asks for no collector."""
    options = (cluster_spec.get("historyServerOptions") or {}).get("collectorOptions")
    return options if isinstance(options, Mapping) else None


def add_collector(
    pod_spec: JSON, *, cluster: RayCluster, cluster_spec: RayClusterSpec, node_type: str, fqdn: str
) -> None:
    """Append the collector container (KubeRay's `BuildCollectorContainer`), with the cluster's
    Ray token when auth is on: it reads the dashboard, which then asks for one."""
    options = collector_options(cluster_spec)
    if options is None:
        return
    container = _collector_container(options, cluster=cluster, node_type=node_type, fqdn=fqdn)
    if is_auth_enabled(cluster_spec):
        inject.token_auth_env(
            container,
            cluster_spec=cluster_spec,
            pod_spec=None,  # the Ray container's own call already added the token volume
            cluster_name=cluster_name(cluster),
        )
    pod_spec["containers"].append(container)


def _collector_container(
    options: Mapping[str, Any], *, cluster: RayCluster, node_type: str, fqdn: str
) -> JSON:
    user_env = [json_copy(env) for env in options.get("env") or []]
    resources = options.get("resources")
    env: list[JSON] = [
        inject.field_env(ENV_POD_IP, "status.podIP"),
        {"name": names.ENV_RAY_CLUSTER_NAME, "value": cluster_name(cluster)},
        {"name": names.ENV_RAY_CLUSTER_NAMESPACE, "value": cluster_namespace(cluster)},
        {"name": ENV_RAY_ROLE, "value": "Head" if node_type == names.HEAD_NODE else "Worker"},
        {"name": ENV_EVENTS_PORT, "value": EVENTS_PORT},
        {"name": names.ENV_FQ_RAY_IP, "value": fqdn},
    ]
    labels = metadata(cluster).get("labels") or {}
    for env_name, label in (
        (ENV_OWNER_KIND, names.ORIGINATED_FROM_CRD_LABEL),
        (ENV_OWNER_NAME, names.ORIGINATED_FROM_CR_NAME_LABEL),
    ):
        if labels.get(label):
            env.append({"name": env_name, "value": labels[label]})
    if node_type == names.HEAD_NODE and not any(
        e.get("name") == ENV_RAY_DASHBOARD_ADDRESS for e in user_env
    ):
        env.append({"name": ENV_RAY_DASHBOARD_ADDRESS, "value": _HEAD_DASHBOARD_ADDRESS})
    return {
        "name": COLLECTOR_CONTAINER_NAME,
        "image": options.get("image") or "",
        "imagePullPolicy": options.get("imagePullPolicy") or "IfNotPresent",
        # The user's resources replace the defaults whole, as in KubeRay (even `{}`).
        "resources": json_copy(resources if resources is not None else _DEFAULT_RESOURCES),
        "env": env + user_env,
    }


def connect_ray_container(pod_spec: JSON, ray: JSON) -> None:
    """KubeRay's `BuildPod` step: `/tmp/ray` shared with the collector; `setContainerEnvVars`'s
    last step: the Ray container exports its events to it. No-op in a Pod without a collector."""
    collector = next(
        (c for c in pod_spec["containers"] if c.get("name") == COLLECTOR_CONTAINER_NAME), None
    )
    if collector is None:
        return
    for container in (ray, collector):
        inject.add_empty_dir(
            pod_spec,
            container,
            volume=names.RAY_LOG_VOLUME_NAME,
            mount_path=names.RAY_LOG_MOUNT_PATH,
            medium="",
        )


def add_ray_event_env(pod_spec: JSON, ray: JSON) -> None:
    """The Ray container's event-export env vars, where the Pod has a collector."""
    if any(c.get("name") == COLLECTOR_CONTAINER_NAME for c in pod_spec["containers"]):
        for env_name, value in _RAY_EVENT_ENV:
            inject.set_env_default(ray, env_name, value)
