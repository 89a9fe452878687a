"""What KubeRay injects into the containers of a Ray Pod: env vars, probes, volumes, sidecars.

Each function here edits one container or Pod spec dict in place (a private deep copy made by
`pods.py`) and mirrors one piece of KubeRay's `common/pod.go`: the env vars Ray and its autoscaler
read, the liveness/readiness probes (only when the user set none), the `wait-gcs-ready` init
container, the autoscaler sidecar, the `/dev/shm` and `/tmp/ray` emptyDirs and token auth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.builders.mtls import is_tls_enabled, set_container_tls
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import check_name
from ray_operator.spec.raycluster import JSON, parse_version

if TYPE_CHECKING:
    from ray_io.v1_views import RayClusterSpec


_BASH = ["/bin/bash", "-c", "--"]
_BASH_LOGIN = ["/bin/bash", "-cl", "--"]
# Ray >= 2.53 serves one health endpoint on the dashboard agent; older Ray needs exec probes.
_UNIFIED_HEALTH_CHECK_SINCE = (2, 53, 0)
_TROUBLESHOOTING = "https://docs.ray.io/en/master/cluster/kubernetes/troubleshooting.html"
_WGET_HEALTH = "wget --tries 1 -T {timeout} -q -O- http://localhost:{port}/{path} | grep success"


def shell_command(*, login_shell: bool = False) -> list[str]:
    """KubeRay's container command; `-l` only when the operator enables login shells."""
    return list(_BASH_LOGIN if login_shell else _BASH)


def field_env(name: str, field_path: str) -> JSON:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def has_env(container: JSON, name: str) -> bool:
    return any(env.get("name") == name for env in container.get("env") or [])


def append_env(container: JSON, *entries: JSON) -> None:
    container.setdefault("env", []).extend(entries)


def set_env_default(container: JSON, name: str, value: str) -> None:
    """Add `name=value` unless the user already set `name` (KubeRay's `EnvVarExists` guard)."""
    if not has_env(container, name):
        append_env(container, {"name": name, "value": value})


def ensure_metrics_port(container: JSON) -> None:
    ports = container.setdefault("ports", [])
    if not any(port.get("name") == names.METRICS_PORT_NAME for port in ports):
        ports.append({"name": names.METRICS_PORT_NAME, "containerPort": names.METRICS_PORT})


def add_empty_dir(
    pod_spec: JSON, container: JSON, *, volume: str, mount_path: str, medium: str
) -> None:
    """Mount an emptyDir at `mount_path` unless something is mounted there already."""
    mounts = container.setdefault("volumeMounts", [])
    if any(mount.get("mountPath") == mount_path for mount in mounts):
        return
    volumes = pod_spec.setdefault("volumes", [])
    if not any(existing.get("name") == volume for existing in volumes):
        empty_dir: JSON = {}
        if medium:
            empty_dir["medium"] = medium
            size = _memory_limit_or_request(container)
            if size is not None:
                # /dev/shm is sized like the container's memory so Ray's object store can use it.
                empty_dir["sizeLimit"] = size
        volumes.append({"name": volume, "emptyDir": empty_dir})
    mounts.append({"mountPath": mount_path, "name": volume})


def _memory_limit_or_request(container: JSON) -> str | None:
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):
        memory = (resources.get(kind) or {}).get("memory")
        if memory is not None:
            return str(memory)
    return None


def ray_container_env(
    container: JSON, *, node_type: str, fqdn: str, port: str, start_command: str, creator: str
) -> None:
    """The env vars KubeRay sets in every Ray container, in KubeRay's order."""
    address_host = "127.0.0.1" if node_type == names.HEAD_NODE else fqdn
    if node_type == names.WORKER_NODE:
        append_env(container, *_ray_ip_env(fqdn))
    append_env(
        container,
        field_env(names.ENV_RAY_CLUSTER_NAME, f"metadata.labels['{names.CLUSTER_LABEL}']"),
        field_env(names.ENV_RAY_CLUSTER_NAMESPACE, "metadata.namespace"),
        # Autoscaler v2 identifies instances by Pod name and node types by group
        # (kuberay#1751, #1965).
        field_env(names.ENV_RAY_CLOUD_INSTANCE_ID, "metadata.name"),
        field_env(names.ENV_RAY_NODE_TYPE_NAME, f"metadata.labels['{names.GROUP_LABEL}']"),
        # Lets users wrap the generated command in their own (kuberay#1560).
        {"name": names.ENV_KUBERAY_GEN_RAY_START_CMD, "value": start_command},
    )
    set_env_default(container, names.ENV_RAY_PORT, port)
    if creator == names.CRD_RAY_SERVICE:
        set_env_default(container, names.ENV_RAY_TIMEOUT_MS_TASK_WAIT_FOR_DEATH_INFO, "0")
        set_env_default(container, names.ENV_RAY_GCS_SERVER_REQUEST_TIMEOUT_SECONDS, "5")
        set_env_default(container, names.ENV_RAY_SERVE_KV_TIMEOUT_S, "5")
    set_env_default(container, names.ENV_RAY_ADDRESS, f"{address_host}:{port}")
    set_env_default(container, names.ENV_RAY_USAGE_STATS_KUBERAY_IN_USE, "1")
    if node_type == names.HEAD_NODE:
        tags = f"kuberay_version={names.KUBERAY_VERSION};kuberay_crd={creator}"
        append_env(container, {"name": names.ENV_RAY_USAGE_STATS_EXTRA_TAGS, "value": tags})
    set_env_default(container, names.ENV_RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE, "1")


def _ray_ip_env(fqdn: str) -> list[JSON]:
    # RAY_IP (the bare service name) is deprecated but kept, as KubeRay keeps it.
    return [
        {"name": names.ENV_FQ_RAY_IP, "value": fqdn},
        {"name": names.ENV_RAY_IP, "value": fqdn.split(".")[0]},
    ]


def init_container_env(pod_spec: JSON, *, fqdn: str) -> None:
    """Every init container learns the head's address (KubeRay appends it to all of them)."""
    for container in pod_spec.get("initContainers") or []:
        append_env(container, *_ray_ip_env(fqdn))


def wait_gcs_ready_container(ray: JSON, *, fqdn: str, port: str, login_shell: bool) -> JSON:
    """The init container that holds a worker back until the head's GCS answers health checks."""
    container: JSON = {
        "name": names.WAIT_GCS_READY_CONTAINER_NAME,
        "image": ray.get("image"),
        "command": shell_command(login_shell=login_shell),
        "args": [_wait_gcs_script(f"{fqdn}:{port}")],
        # Env and mounts of the Ray container, so TLS settings that reference files still work.
        "env": [dict(env) for env in ray.get("env") or []],
        "volumeMounts": [dict(mount) for mount in ray.get("volumeMounts") or []],
        # Fixed, small resources: namespaces with a ResourceQuota need them, and GKE Autopilot
        # refuses GPU requests on init containers, so the Ray container's cannot be reused.
        "resources": {
            "limits": {"cpu": "200m", "memory": "256Mi"},
            "requests": {"cpu": "200m", "memory": "256Mi"},
        },
    }
    for key in ("imagePullPolicy", "securityContext"):
        if ray.get(key) is not None:
            container[key] = ray[key]
    return container


def _wait_gcs_script(address: str) -> str:
    # Quiet for two minutes (a head normally needs that long), then show health-check errors.
    return f"""
SECONDS=0
while true; do
  if (( SECONDS <= 120 )); then
    if ray health-check --address {address} > /dev/null 2>&1; then
      echo "GCS is ready."
      break
    fi
    echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."
  else
    if ray health-check --address {address}; then
      echo "GCS is ready. Any error messages above can be safely ignored."
      break
    fi
    echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready. For troubleshooting, \
refer to the FAQ at {_TROUBLESHOOTING}."
  fi
  sleep 5
done
"""


def supports_unified_health_check(ray_version: str | None) -> bool:
    """Whether `/api/healthz` on the dashboard agent exists (Ray >= 2.53); unknown means no."""
    version = parse_version(ray_version)
    return version is not None and version >= _UNIFIED_HEALTH_CHECK_SINCE


def inject_probes(
    container: JSON,
    *,
    node_type: str,
    params: Mapping[str, str],
    ray_version: str | None,
    creator: str,
) -> None:
    """KubeRay's liveness and readiness probes, each only if the user did not define it."""
    head = node_type == names.HEAD_NODE
    action = _probe_action(node_type=node_type, params=params, ray_version=ray_version)
    if container.get("livenessProbe") is None:
        container["livenessProbe"] = {
            "initialDelaySeconds": 30, "timeoutSeconds": 5 if head else 2, "periodSeconds": 5,
            "successThreshold": 1, "failureThreshold": 120, **action,
        }  # fmt: skip
    if container.get("readinessProbe") is None:
        container["readinessProbe"] = {
            "initialDelaySeconds": 10, "timeoutSeconds": 5 if head else 2, "periodSeconds": 5,
            "successThreshold": 1, "failureThreshold": 10, **action,
        }  # fmt: skip
        if creator == names.CRD_RAY_SERVICE and not head:
            _add_serve_proxy_check(container, params=params)


def _probe_action(*, node_type: str, params: Mapping[str, str], ray_version: str | None) -> JSON:
    agent_port = _int_param(params, "dashboard-agent-listen-port", names.DASHBOARD_AGENT_PORT)
    if supports_unified_health_check(ray_version):
        return {"httpGet": {"path": "/api/healthz", "port": agent_port}}
    return {"exec": {"command": ["bash", "-c", " && ".join(_health_commands(node_type, params))]}}


def _health_commands(node_type: str, params: Mapping[str, str]) -> list[str]:
    agent_port = _int_param(params, "dashboard-agent-listen-port", names.DASHBOARD_AGENT_PORT)
    commands = [_WGET_HEALTH.format(timeout=2, port=agent_port, path="api/local_raylet_healthz")]
    if node_type == names.HEAD_NODE:
        dashboard_port = _int_param(params, "dashboard-port", names.DASHBOARD_PORT)
        # The head also checks GCS through the dashboard (KubeRay uses a 10 s timeout here).
        commands.append(
            _WGET_HEALTH.format(timeout=10, port=dashboard_port, path="api/gcs_healthz")
        )
    return commands


def _add_serve_proxy_check(container: JSON, *, params: Mapping[str, str]) -> None:
    # Serving workers must leave the serve Service as soon as their proxy fails (kuberay#1808).
    serve_port = next(
        (
            p.get("containerPort")
            for p in container.get("ports") or []
            if p.get("name") == names.SERVE_PORT_NAME
        ),
        names.SERVE_PORT,
    )
    commands = [*_health_commands(names.WORKER_NODE, params)]
    commands.append(_WGET_HEALTH.format(timeout=10, port=serve_port, path="-/healthz"))
    probe = container["readinessProbe"]
    probe.pop("httpGet", None)
    probe["failureThreshold"] = 1
    probe["exec"] = {"command": ["bash", "-c", " && ".join(commands)]}


def _int_param(params: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(params[key])
    except (KeyError, ValueError):
        return default


def autoscaler_container(
    cluster_spec: RayClusterSpec, *, cluster_name: str, ray_image: str | None, login_shell: bool
) -> JSON:
    """The Ray autoscaler sidecar of the head Pod, with `autoscalerOptions` merged over defaults."""
    start = (
        "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) "
        "--cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
    )
    container: JSON = {
        "name": names.AUTOSCALER_CONTAINER_NAME,
        "image": ray_image,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            field_env(names.ENV_RAY_CLUSTER_NAME, f"metadata.labels['{names.CLUSTER_LABEL}']"),
            field_env(names.ENV_RAY_CLUSTER_NAMESPACE, "metadata.namespace"),
            field_env("RAY_HEAD_POD_NAME", "metadata.name"),
            {"name": "KUBERAY_CRD_VER", "value": "v1"},
            {"name": names.ENV_KUBERAY_GEN_AUTOSCALER_START_CMD, "value": start},
        ],
        "command": shell_command(login_shell=login_shell),
        "args": [start],
        "resources": {
            "limits": {"cpu": "500m", "memory": "512Mi"},
            "requests": {"cpu": "500m", "memory": "512Mi"},
        },
    }
    if (cluster_spec.get("authOptions") or {}).get("mode") == "token":
        token_auth_env(
            container, cluster_spec=cluster_spec, pod_spec=None, cluster_name=cluster_name
        )
    if is_tls_enabled(cluster_spec):
        set_container_tls(container)
    _merge_autoscaler_options(container, cluster_spec.get("autoscalerOptions") or {})
    return container


def _merge_autoscaler_options(container: JSON, options: Mapping[str, Any]) -> None:
    for key in ("resources", "image", "imagePullPolicy", "securityContext"):
        if options.get(key) is not None:
            container[key] = options[key]
    for key in ("env", "envFrom", "volumeMounts"):
        if options.get(key):
            container.setdefault(key, []).extend(options[key])
    for key in ("command", "args"):
        if options.get(key):
            container[key] = list(options[key])


def token_auth_env(
    container: JSON, *, cluster_spec: RayClusterSpec, pod_spec: JSON | None, cluster_name: str
) -> None:
    """Ray token auth: the mode, and either the cluster's token Secret or a projected SA token."""
    options = cluster_spec.get("authOptions") or {}
    set_env_default(container, names.ENV_RAY_AUTH_MODE, "token")
    if options.get("enableK8sTokenAuth") is True:
        set_env_default(container, names.ENV_RAY_ENABLE_K8S_TOKEN_AUTH, "true")
        mounts = container.setdefault("volumeMounts", [])
        if not any(mount.get("name") == names.RAY_TOKEN_VOLUME_NAME for mount in mounts):
            mounts.append(
                {
                    "name": names.RAY_TOKEN_VOLUME_NAME,
                    "mountPath": names.RAY_TOKEN_MOUNT_PATH,
                    "readOnly": True,
                }
            )
        if pod_spec is not None:
            _add_token_volume(pod_spec)
        return
    secret = options.get("secretName") or check_name(cluster_name)
    if not has_env(container, names.ENV_RAY_AUTH_TOKEN):
        ref = {"secretKeyRef": {"name": secret, "key": names.AUTH_TOKEN_SECRET_KEY}}
        append_env(container, {"name": names.ENV_RAY_AUTH_TOKEN, "valueFrom": ref})


def _add_token_volume(pod_spec: JSON) -> None:
    volumes = pod_spec.setdefault("volumes", [])
    if not any(volume.get("name") == names.RAY_TOKEN_VOLUME_NAME for volume in volumes):
        source = {"sources": [{"serviceAccountToken": {"path": "token"}}]}
        volumes.append({"name": names.RAY_TOKEN_VOLUME_NAME, "projected": source})
