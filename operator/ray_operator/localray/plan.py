"""What a Pod on the fake node becomes on this machine: pure planning for the local Ray agent.

A head or worker Pod of a RayCluster becomes one `ray start --block` process. Its group's
`rayStartParams` are completed as KubeRay completes them (`num-cpus` from the CPU limit, `memory`
from the memory limit, custom resources, labels), then only the flags that describe the node's
shape pass (`PASSED_THROUGH_PARAMS`): addresses, ports and directories are the agent's to choose,
since every node shares this machine. Each cluster gets a loopback address of its own
(`cluster_address`), so the head's Serve proxy (always port 8000) and Ray's other listeners are told
apart per cluster. (Ray binds its GCS, raylet and agent gRPC ports on every address whatever
the node address; those are free ports the agent picks.)

A RayJob's submitter Pod becomes its container's command, with the head Service's address (the
RayJob's `status.dashboardURL`) replaced by the local dashboard's.

A Ray node's init containers of a Ray image (the Ray container's own, or a `rayproject/ray*` one)
run before it, in order, each its own command (`plan_init_containers`): the operator's
environment stands for a Ray image, as it does for the Ray container. Init containers of another
image, and the operator's own `wait-gcs-ready` (the agent starts a worker once its head's GCS is
up, which is that wait) and `wait-for-tls-ip-san`, are not run.

A SidecarMode RayJob's head Pod holds the submitter container (`ray-job-submitter`), which runs
beside the head as a second process (`plan_sidecar_submitter`); as it shares the head's network
namespace in a cluster, its `127.0.0.1:<Pod port>` and `localhost:<Pod port>` mean the head's
ports, which `pointed_at_pod_ports` turns into their local addresses.

A Pod's volumes and `valueFrom` env are planned in `volumes.py` and shown at their mount paths
by `sandbox.py`; where that cannot be, `rewrite_paths` points env values naming a mount path at
the volume's local directory. `pod_port_targets` says which of a node's ports a Pod port means.
Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray_operator.builders.mtls import WAIT_FOR_IP_SAN_CONTAINER
from ray_operator.builders.ray_start import complete_params
from ray_operator.builders.rayjob import SUBMITTER_CONTAINER_NAME
from ray_operator.builders.redis_cleanup import REDIS_CLEANUP_NODE
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import head_group, worker_groups

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

    from ray_operator.spec.raycluster import GroupSpec


Object = Mapping[str, Any]

PASSED_THROUGH_PARAMS = frozenset(
    {"num-cpus", "num-gpus", "memory", "resources", "labels", "object-store-memory"}
)
"""`rayStartParams` that shape a node (what Ray schedules on); the rest are about where a node
listens and keeps its files, which the agent decides for every node on this machine."""

SERVE_PROXY_PORT = 8000
"""Ray Serve's proxy port in a Pod (KubeRay's `serve` port)."""

DEFAULT_OBJECT_STORE_BYTES = 128 * 1024 * 1024
"""Object store per local node when the Pod sets none: Ray's own default (30 % of the machine's
memory per node) would let a few samples reserve the whole machine's shared memory."""

MAX_OBJECT_STORE_BYTES = 2 * 1024**3
"""A Pod asking for more gets this much: the cap on memory is the point of running locally."""

# Addresses Kubernetes DNS would resolve in a cluster; locally the agent sets its own.
AGENT_OWNED_ENV = frozenset(
    {"PATH", "PYTHONHOME", "VIRTUAL_ENV", "RAY_ADDRESS", "RAY_IP", "FQ_RAY_IP", "RAY_PORT"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,252}")


class UnplannablePodError(ValueError):
    """The Pod cannot get a local process; the message says why, for an Event on the Pod."""


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One Ray node for a head or worker Pod: its shape and literal environment."""

    namespace: str
    pod: str
    uid: str
    cluster: str
    cluster_uid: str
    node_type: str
    params: Mapping[str, str]
    env: Mapping[str, str]
    dropped_params: tuple[str, ...] = ()
    """Params the Pod sets that the agent chooses itself (reported once, not silently lost)."""
    autoscaler_env: Mapping[str, str] | None = None
    """The literal env of the head's Ray autoscaler sidecar; None when the Pod has none."""
    port_params: Mapping[str, str] = field(default_factory=dict)
    """The group's `rayStartParams` naming a port the Pod exposes (`dashboard-port`, ...)."""

    @property
    def is_head(self) -> bool:
        return self.node_type == names.HEAD_NODE


@dataclass(frozen=True, slots=True)
class SubmitterPlan:
    """A RayJob submitter Pod's container: its command and environment, as written."""

    namespace: str
    pod: str
    uid: str
    rayjob: str
    argv: tuple[str, ...]
    env: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    """A container of a Ray node's Pod besides the Ray one (an init container, the SidecarMode
    submitter) that runs locally: its command as written."""

    name: str
    argv: tuple[str, ...]
    container: Mapping[str, Any]
    """The container's spec (its env, volumeMounts and workingDir make its view)."""


@dataclass(frozen=True, slots=True)
class InitContainersPlan:
    """A Ray node Pod's init containers: those that run (in order) and those that do not."""

    run: tuple[ContainerPlan, ...]
    not_run: tuple[str, ...]
    """`name (why)` of each init container of another image (the operator's waits go unsaid)."""


@dataclass(frozen=True, slots=True)
class KubeAccess:
    """How a local process reaches the API server with a client certificate (Ray's autoscaler
    reads these from `RAY_KUBERAY_*` variables instead of a ServiceAccount token)."""

    host: str
    port: int
    ca_file: str
    cert_file: str
    key_file: str


@dataclass(frozen=True, slots=True)
class NodePorts:
    """The ports one local Ray node listens on (head-only ones are 0 on workers)."""

    node_manager: int
    object_manager: int
    runtime_env_agent: int
    dashboard_agent_grpc: int
    dashboard_agent_listen: int
    metrics_export: int
    gcs: int = 0
    dashboard: int = 0
    client_server: int = 0
    serve_worker_proxy: int = 0


def cluster_address(cluster_uid: str) -> str:
    """The loopback address of a cluster's local nodes: 127.x.y.z from its uid, never 127.0.0.1
    (Ray turns that into the machine's routable address) and never a network or broadcast one."""
    digest = hashlib.sha256(cluster_uid.encode()).digest()
    second, third, last = digest[0], digest[1], 2 + digest[2] % 252
    return f"127.{second}.{third}.{last}"


def is_ray_node_pod(pod: Pod) -> bool:
    """A head or worker Pod of a RayCluster (not a Job's Pod that copied the head's labels, as
    the GCS fault-tolerance cleanup Job's does)."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return (
        bool(labels.get(names.CLUSTER_LABEL))
        and labels.get(names.NODE_TYPE_LABEL) in (names.HEAD_NODE, names.WORKER_NODE)
        and not _owned_by_job(metadata)
    )


def is_ray_job_submitter_pod(pod: Pod) -> bool:
    """A Pod of a RayJob's submitter Job (K8sJobMode), not one of its cluster's nodes."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return labels.get(names.ORIGINATED_FROM_CRD_LABEL) == "RayJob" and _owned_by_job(metadata)


def is_redis_cleanup_pod(pod: Pod) -> bool:
    """A Pod of a deleted RayCluster's Redis cleanup Job (GCS fault tolerance on Redis)."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return (
        labels.get(names.NODE_TYPE_LABEL) == REDIS_CLEANUP_NODE
        and bool(labels.get(names.CLUSTER_LABEL))
        and _owned_by_job(metadata)
    )


def _owned_by_job(metadata: Object) -> bool:
    return any(owner.get("kind") == "Job" for owner in metadata.get("ownerReferences") or ())


def plan_node(pod: Pod, cluster: RayCluster) -> NodePlan:
    """The Ray node a head or worker Pod of `cluster` becomes; UnplannablePodError says why not."""
    metadata = pod["metadata"]
    labels = metadata.get("labels") or {}
    node_type = labels.get(names.NODE_TYPE_LABEL, "")
    group = _group_of(cluster, node_type=node_type, group_name=labels.get(names.GROUP_LABEL, ""))
    container = _ray_container(pod)
    params = complete_params(
        group,
        node_type=node_type,
        head_address=None,
        container_resources=container.get("resources") or {},
    )
    kept = {
        key: _as_the_shell_reads_it(key, value)
        for key, value in params.items()
        if key in PASSED_THROUGH_PARAMS
    }
    kept["object-store-memory"] = str(_object_store_bytes(kept.get("object-store-memory")))
    autoscaler = _container_named(pod, names.AUTOSCALER_CONTAINER_NAME)
    if autoscaler is not None:
        # As in the Pod: the sidecar scales the cluster, so Ray's own monitor must not.
        kept["no-monitor"] = "true"
    dropped = sorted(
        key
        for key in (group.get("rayStartParams") or {})
        if key not in PASSED_THROUGH_PARAMS and key != "block"
    )
    return NodePlan(
        namespace=metadata.get("namespace", ""),
        pod=metadata["name"],
        uid=metadata.get("uid", ""),
        cluster=cluster["metadata"]["name"],
        cluster_uid=cluster["metadata"].get("uid", ""),
        node_type=node_type,
        params=kept,
        env=container_env(container),
        dropped_params=tuple(dropped),
        autoscaler_env=None if autoscaler is None else container_env(autoscaler),
        port_params={
            key: str(value)
            for key, value in (group.get("rayStartParams") or {}).items()
            if key in _PORT_PARAMS
        },
    )


def plan_submitter(pod: Pod) -> SubmitterPlan:
    """The command a RayJob submitter Pod runs; UnplannablePodError when it names none (an image's
    own entrypoint cannot run here)."""
    metadata = pod["metadata"]
    container = _ray_container(pod)
    argv = [str(word) for word in (container.get("command") or [])]
    argv += [str(word) for word in (container.get("args") or [])]
    if not container.get("command"):
        raise UnplannablePodError(
            "the submitter container sets no command; only an explicit command can run locally"
        )
    return SubmitterPlan(
        namespace=metadata.get("namespace", ""),
        pod=metadata["name"],
        uid=metadata.get("uid", ""),
        rayjob=(metadata.get("labels") or {}).get(names.ORIGINATED_FROM_CR_NAME_LABEL, ""),
        argv=tuple(argv),
        env=container_env(container),
    )


OPERATORS_WAITS = frozenset({names.WAIT_GCS_READY_CONTAINER_NAME, WAIT_FOR_IP_SAN_CONTAINER})
"""Init containers the operator adds, not run: `wait-gcs-ready` waits for what the agent waits
for itself (a worker starts once its head's GCS is up), `wait-for-tls-ip-san` for cert-manager to
reissue a certificate with the Pod's IP, which a local Pod (the cluster's loopback address) never
gets."""


def plan_init_containers(pod: Pod) -> InitContainersPlan:
    """Which of a Ray node Pod's init containers run locally, in order; UnplannablePodError when
    one of a Ray image names no command (its image's entrypoint cannot run here)."""
    ray_image = str(_ray_container(pod).get("image") or "")
    run, not_run = [], []
    for container in pod.get("spec", {}).get("initContainers") or ():
        name, image = str(container.get("name") or ""), str(container.get("image") or "")
        if name in OPERATORS_WAITS:
            continue
        if image != ray_image and not is_ray_image(image):
            not_run.append(f"{name} (image {image[:100]!r}: only Ray-image containers run locally)")
        elif not container.get("command"):
            raise UnplannablePodError(
                f"init container {name} sets no command; only an explicit command can run locally"
            )
        else:
            run.append(ContainerPlan(name=name, argv=_argv(container), container=dict(container)))
    return InitContainersPlan(run=tuple(run), not_run=tuple(not_run))


def plan_sidecar_submitter(pod: Pod) -> ContainerPlan | None:
    """The head Pod's SidecarMode submitter container, when it has one of a Ray image with a
    command (the operator builds it with the head's image and a `bash -c` command)."""
    containers = pod.get("spec", {}).get("containers") or ()
    ray_image = str(_ray_container(pod).get("image") or "")
    for container in containers[1:]:
        if container.get("name") != SUBMITTER_CONTAINER_NAME or not container.get("command"):
            continue
        image = str(container.get("image") or "")
        if image == ray_image or is_ray_image(image):
            return ContainerPlan(
                name=SUBMITTER_CONTAINER_NAME, argv=_argv(container), container=dict(container)
            )
    return None


def _argv(container: Object) -> tuple[str, ...]:
    """A container's `command` then `args`, as the runtime joins them."""
    words = [*(container.get("command") or ()), *(container.get("args") or ())]
    return tuple(str(word) for word in words)


def pointed_at_pod_ports(text: str, ports: Mapping[int, tuple[str, int]]) -> str:
    """`text` with `127.0.0.1:<port>` and `localhost:<port>` of each Pod port replaced by where
    that port listens locally (a container's loopback is its Pod's in a cluster)."""
    for pod_port, (host, port) in ports.items():
        pattern = rf"(?<![\w.-])(?:127\.0\.0\.1|localhost):{pod_port}(?!\d)"
        text = re.sub(pattern, _constant(f"{host}:{port}"), text)
    return text


def is_ray_image(image: str) -> bool:
    """Ray's own images (`rayproject/ray`, `rayproject/ray-ml`, any registry, tag or digest)."""
    repository = image.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    parts = repository.split("/")
    return (
        len(parts) >= 2
        and parts[-2] == "rayproject"
        and (parts[-1] == "ray" or parts[-1].startswith("ray-"))
    )


def without_agent_owned(env: Mapping[str, str]) -> dict[str, str]:
    """A container's env less the names the agent sets itself."""
    return {name: value for name, value in env.items() if name not in AGENT_OWNED_ENV}


def container_env(container: Object) -> dict[str, str]:
    """The container's literal env values (`valueFrom` needs a kubelet; agent-owned names are
    set by the agent)."""
    env: dict[str, str] = {}
    for entry in container.get("env") or ():
        name = entry.get("name")
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name) or name in AGENT_OWNED_ENV:
            continue
        if "valueFrom" in entry:
            continue
        env[name] = str(entry.get("value") or "")
    return env


def rewrite_paths(value: str, local_dirs: Mapping[str, str]) -> str:
    """`value` with each mount path (as a whole path component) replaced by its local copy."""
    for mount_path in sorted(local_dirs, key=len, reverse=True):
        pattern = rf"(?<![^:=\s'\"]){re.escape(mount_path)}(?=/|:|$|\s|'|\")"
        # A function, not a template: a local path may hold backslashes.
        value = re.sub(pattern, _constant(local_dirs[mount_path]), value)
    return value


def replace_address(text: str, *, old: str, new: str) -> str:
    """`text` with the head Service's `host:port` replaced by the local one."""
    return text.replace(old, new) if old else text


def ray_start_argv(
    plan: NodePlan,
    *,
    ray: str,
    node_ip: str,
    ports: NodePorts,
    temp_dir: str,
    gcs_address: str | None = None,
) -> list[str]:
    """`ray start --block` for the node: its shape flags, then the agent's addresses and ports.

    Workers need `gcs_address` (`ip:port` of their head's GCS).
    """
    argv = [ray, "start", "--block", "--disable-usage-stats", f"--node-ip-address={node_ip}"]
    if plan.is_head:
        argv += [
            "--head",
            f"--port={ports.gcs}",
            "--include-dashboard=true",
            f"--dashboard-host={node_ip}",
            f"--dashboard-port={ports.dashboard}",
            f"--ray-client-server-port={ports.client_server}",
        ]
    else:
        if not gcs_address:
            raise ValueError(f"worker Pod {plan.pod} needs its head's GCS address")
        argv.append(f"--address={gcs_address}")
    argv += [
        f"--node-manager-port={ports.node_manager}",
        f"--object-manager-port={ports.object_manager}",
        f"--runtime-env-agent-port={ports.runtime_env_agent}",
        f"--dashboard-agent-grpc-port={ports.dashboard_agent_grpc}",
        f"--dashboard-agent-listen-port={ports.dashboard_agent_listen}",
        f"--metrics-export-port={ports.metrics_export}",
        f"--temp-dir={temp_dir}",
    ]
    for key in sorted(plan.params):
        value = plan.params[key]
        if value.lower() == "true":
            argv.append(f"--{key}")
        elif value.lower() != "false":
            argv.append(f"--{key}={value}")
    return argv


def node_env(
    plan: NodePlan, *, base: Mapping[str, str], node_ip: str, ports: NodePorts
) -> dict[str, str]:
    """The process environment: the machine's, the Pod's literal values, then what the agent
    owns (Serve proxies bind the cluster's address; worker proxies each get their own port)."""
    env = {**base, **plan.env}
    env["RAY_SERVE_DEFAULT_HTTP_HOST"] = node_ip
    if not plan.is_head and ports.serve_worker_proxy:
        env["RAY_SERVE_WORKER_PROXY_HTTP_PORT"] = str(ports.serve_worker_proxy)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def autoscaler_argv(plan: NodePlan, *, ray: str, gcs_address: str) -> list[str]:
    """Ray's KubeRay autoscaler for the head's cluster, as its sidecar runs it."""
    return [
        ray,
        "kuberay-autoscaler",
        f"--cluster-name={plan.cluster}",
        f"--cluster-namespace={plan.namespace}",
        f"--gcs-address={gcs_address}",
    ]


def autoscaler_env(
    plan: NodePlan, *, base: Mapping[str, str], access: KubeAccess
) -> dict[str, str]:
    """The sidecar's env, and the API server it patches RayClusters on (`KUBERNETES_SERVICE_*`
    as in a Pod, a client certificate instead of a ServiceAccount token)."""
    return {
        **base,
        **(plan.autoscaler_env or {}),
        "RAY_CLUSTER_NAME": plan.cluster,
        "RAY_CLUSTER_NAMESPACE": plan.namespace,
        "RAY_HEAD_POD_NAME": plan.pod,
        "KUBERNETES_SERVICE_HOST": access.host,
        "KUBERNETES_SERVICE_PORT_HTTPS": str(access.port),
        "RAY_KUBERAY_CA_CERT_PATH": access.ca_file,
        "RAY_KUBERAY_CLIENT_CERT_PATH": access.cert_file,
        "RAY_KUBERAY_CLIENT_KEY_PATH": access.key_file,
        "RAY_USAGE_STATS_ENABLED": "0",
    }


_PORT_PARAMS = {
    "port": (6379, "gcs"),
    "dashboard-port": (8265, "dashboard"),
    "ray-client-server-port": (10001, "client_server"),
    "metrics-export-port": (8080, "metrics_export"),
    "dashboard-agent-listen-port": (52365, "dashboard_agent_listen"),
}
"""`rayStartParams` naming a Pod port: (KubeRay's default number, the `NodePorts` field)."""
_WORKER_PORT_PARAMS = ("metrics-export-port", "dashboard-agent-listen-port")
SERVE_TARGET = "serve"


def pod_port_targets(plan: NodePlan) -> dict[int, str]:
    """Pod port → the `NodePorts` field that listens for it here (`SERVE_TARGET`: the Serve
    proxy), with the group's `rayStartParams` overrides of the numbers honoured."""
    params = _WORKER_PORT_PARAMS if not plan.is_head else tuple(_PORT_PARAMS)
    targets = {}
    for param in params:
        default, target = _PORT_PARAMS[param]
        try:
            number = int(plan.port_params.get(param, default))
        except ValueError:
            number = default
        targets[number] = target
    targets[SERVE_PROXY_PORT] = SERVE_TARGET if plan.is_head else "serve_worker_proxy"
    return targets


def shape_summary(plan: NodePlan) -> str:
    """`num-cpus=1 memory=1073741824 resources={"x": 1}`: what an Event says the node got."""
    return " ".join(f"{key}={plan.params[key]}" for key in sorted(plan.params))


def _as_the_shell_reads_it(key: str, value: str) -> str:
    """A param's value as `ray start` gets it in a KubeRay Pod, whose command is a shell line:
    `'{"highmem":2}'` and `"{\\"highmem\\": 2}"` both become `{"highmem": 2}`."""
    try:
        words = shlex.split(value)
    except ValueError as error:
        raise UnplannablePodError(f"rayStartParams {key}: {error} in {value[:60]!r}") from None
    if len(words) > 1:
        raise UnplannablePodError(
            f"rayStartParams {key}: {value[:60]!r} is {len(words)} words to the shell; quote it"
        )
    return words[0] if words else ""


def _constant(text: str) -> Callable[[re.Match[str]], str]:
    return lambda _: text


def _group_of(cluster: RayCluster, *, node_type: str, group_name: str) -> GroupSpec:
    if node_type == names.HEAD_NODE:
        return head_group(cluster)
    for group in worker_groups(cluster):
        if group.get("groupName") == group_name:
            return group
    raise UnplannablePodError(
        f"worker group {group_name!r} is not in RayCluster {cluster['metadata']['name']}"
    )


def _container_named(pod: Pod, name: str) -> Mapping[str, Any] | None:
    for container in pod.get("spec", {}).get("containers") or ():
        if container.get("name") == name:
            return dict(container)
    return None


def _ray_container(pod: Pod) -> Mapping[str, Any]:
    containers = pod.get("spec", {}).get("containers") or ()
    if not containers:
        raise UnplannablePodError("the Pod has no container")
    return dict(containers[0])


def _object_store_bytes(requested: str | None) -> int:
    if requested is None:
        return DEFAULT_OBJECT_STORE_BYTES
    try:
        value = int(float(requested))  # already unquoted as the shell would
    except (ValueError, OverflowError):
        raise UnplannablePodError(
            f"rayStartParams object-store-memory {requested[:40]!r} is not a number of bytes"
        ) from None
    return max(min(value, MAX_OBJECT_STORE_BYTES), 80 * 1024 * 1024)
