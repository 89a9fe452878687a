"""A legacy Ray operator RayCluster (`cluster.ray.io/v1`) converted into a ray.io/v1 RayCluster.

Pure: a mapping in, a manifest and warnings out; no I/O, no YAML, no API client. The mapping of
every legacy field is the table in docs/migrating-from-legacy.md. Every
problem of the object is reported at once (`LegacyConversionError.problems`), and the result is
checked with the admission webhook's own validation, so a conversion that succeeds is a
RayCluster ray-operator accepts.

Work is linear in the size of the object (at most what the API server stores, ~1.5 MB): each
field is read once, shell commands are scanned once, and the validation is bounded. The one
place the output could multiply the input, cluster-wide worker commands copied into every worker
group, is refused beyond MAX_CONVERTED_BYTES.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_operator.legacy.fields import (
    MAX_INT32,
    read_count,
    read_list,
    read_mapping,
    read_number,
    read_string,
    read_string_map,
    read_strings,
    warn_unknown_fields,
)
from ray_operator.legacy.findings import (
    ConversionProblem,
    ConversionWarning,
    Findings,
    show,
)
from ray_operator.legacy.pod_templates import (
    RayContainerChanges,
    change_ray_container,
    read_pod_config,
)
from ray_operator.legacy.resources import resource_params
from ray_operator.legacy.start_commands import (
    KUBERAY_DEFAULT_OPEN_FILES,
    StartCommands,
    add_param,
    read_start_commands,
)
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycluster import is_label_name, validate_raycluster

__all__ = [
    "LEGACY_API_VERSION",
    "Conversion",
    "ConversionProblem",
    "ConversionWarning",
    "LegacyConversionError",
    "convert_legacy_cluster",
    "is_legacy_cluster",
]

LEGACY_API_VERSION = "cluster.ray.io/v1"

# The legacy autoscaler's defaults for a Kubernetes cluster config (ray-project/ray,
# python/ray/autoscaler/kubernetes/defaults.yaml: `max_workers: 2`, `upscaling_speed: 1.0`,
# `idle_timeout_minutes: 5`), merged under the operator's translation by `fillout_defaults`.
DEFAULT_MAX_WORKERS = 2
DEFAULT_UPSCALING_SPEED = 1.0
DEFAULT_IDLE_TIMEOUT_MINUTES = 5
# idleTimeoutSeconds is an int32.
_MAX_IDLE_TIMEOUT_MINUTES = MAX_INT32 // 60

_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# `status` is the legacy operator's own and is left behind without a warning.
_OBJECT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_SPEC_FIELDS = frozenset(
    {
        "maxWorkers",
        "upscalingSpeed",
        "idleTimeoutMinutes",
        "headServicePorts",
        "podTypes",
        "headPodType",
        "headStartRayCommands",
        "workerStartRayCommands",
        # Not in the legacy CRD's schema, but read by the legacy operator (operator_utils.py).
        "headSetupCommands",
        "workerSetupCommands",
        "setupCommands",
        "SetupCommands",
    }
)
_POD_TYPE_FIELDS = frozenset(
    {
        "name",
        "minWorkers",
        "maxWorkers",
        "rayResources",
        "setupCommands",
        "workerSetupCommands",
        "podConfig",
    }
)
_PORT_RANGE = range(1, 65536)
# The API server's limit on a request body: a larger RayCluster could not be created anyway.
MAX_CONVERTED_BYTES = 3 * 2**20


class LegacyConversionError(ValueError):
    """The legacy object cannot be converted; `problems` names every reason."""

    def __init__(self, problems: Sequence[ConversionProblem]) -> None:
        self.problems: tuple[ConversionProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


@dataclass(frozen=True)
class Conversion:
    """A converted RayCluster manifest and what the conversion changed or dropped."""

    cluster: dict[str, Any]
    warnings: tuple[ConversionWarning, ...]


@dataclass(frozen=True)
class _PodType:
    """One legacy pod type, read and defaulted as the legacy autoscaler did."""

    name: str
    path: str
    min_workers: int
    max_workers: int
    resource_params: dict[str, str]
    setup_commands: list[str] | None
    template: dict[str, Any]


@dataclass(frozen=True)
class _ClusterCommands:
    """The cluster-wide command lists, read once."""

    head_start: StartCommands
    worker_start: StartCommands
    head_setup: list[str]
    worker_setup: list[str]


def is_legacy_cluster(document: object) -> bool:
    """Whether `document` is a RayCluster of Ray's legacy operator."""
    return (
        isinstance(document, Mapping)
        and document.get("apiVersion") == LEGACY_API_VERSION
        and document.get("kind") == "RayCluster"
    )


def convert_legacy_cluster(
    legacy: Mapping[str, Any], *, limits: ClusterLimits = DEFAULT_LIMITS
) -> Conversion:
    """The ray.io/v1 RayCluster for `legacy`; raises LegacyConversionError with every problem.
    `limits`: the operator's, which the result must also keep to."""
    findings = Findings()
    cluster = _convert(legacy, findings)
    if cluster is not None and not findings.problems:
        for error in validate_raycluster(cluster, limits=limits):
            findings.problem("(converted RayCluster)", f"ray-operator would refuse it: {error}")
    if cluster is None or findings.problems:
        raise LegacyConversionError(findings.problems)
    return Conversion(cluster=cluster, warnings=tuple(findings.warnings))


def _convert(legacy: object, findings: Findings) -> dict[str, Any] | None:
    if not isinstance(legacy, Mapping):
        findings.problem("(document)", f"must be an object, got {show(legacy)}")
        return None
    warn_unknown_fields(legacy, _OBJECT_FIELDS, path="", findings=findings)
    metadata = _cluster_metadata(legacy, findings)
    spec = read_mapping(legacy, "spec", path="spec", findings=findings, required=True)
    if spec is None:
        return None
    warn_unknown_fields(spec, _SPEC_FIELDS, path="spec", findings=findings)
    cluster_max_workers = _cluster_max_workers(spec, findings)
    head_name = read_string(
        spec, "headPodType", path="spec.headPodType", findings=findings, required=True
    )
    pod_types = _read_pod_types(
        spec, head_name=head_name, cluster_max_workers=cluster_max_workers, findings=findings
    )
    head = _head_pod_type(pod_types, head_name, findings)
    commands = _read_cluster_commands(spec, findings)
    ports = _head_service_ports(spec, findings)
    autoscaler_options = _autoscaler_options(spec, findings)
    if head is None or findings.problems:
        return None
    workers = _worker_groups(pod_types, head=head, commands=commands, findings=findings)
    _warn_cluster_max_workers(workers, cluster_max_workers, spec=spec, findings=findings)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": metadata,
        "spec": {
            "enableInTreeAutoscaling": True,
            "autoscalerOptions": autoscaler_options,
            # The legacy autoscaler replaced nodes whose pod config changed; so does Recreate.
            "upgradeStrategy": {"type": "Recreate"},
            "headGroupSpec": _head_group(head, commands=commands, ports=ports, findings=findings),
            "workerGroupSpecs": workers,
        },
    }


def _cluster_metadata(legacy: Mapping[str, Any], findings: Findings) -> dict[str, Any]:
    """Name, namespace, labels and annotations; what the API server set is not carried over."""
    legacy_metadata = read_mapping(legacy, "metadata", path="metadata", findings=findings) or {}
    name = read_string(
        legacy_metadata, "name", path="metadata.name", findings=findings, required=True
    )
    metadata: dict[str, Any] = {"name": name}
    namespace = read_string(
        legacy_metadata, "namespace", path="metadata.namespace", findings=findings
    )
    if namespace is not None:
        metadata["namespace"] = namespace
    for key in ("labels", "annotations"):
        values = read_string_map(legacy_metadata, key, path=f"metadata.{key}", findings=findings)
        kept = {k: v for k, v in values.items() if k != _LAST_APPLIED}
        if kept:
            metadata[key] = kept
    return metadata


def _cluster_max_workers(spec: Mapping[str, Any], findings: Findings) -> int:
    value = read_count(spec, "maxWorkers", path="spec.maxWorkers", findings=findings)
    return DEFAULT_MAX_WORKERS if value is None else value


def _read_pod_types(
    spec: Mapping[str, Any],
    *,
    head_name: str | None,
    cluster_max_workers: int,
    findings: Findings,
) -> list[_PodType]:
    items = read_list(spec, "podTypes", path="spec.podTypes", findings=findings, required=True)
    if items is None:
        return []
    pod_types: list[_PodType] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        path = f"spec.podTypes[{index}]"
        if not isinstance(item, Mapping):
            findings.problem(path, f"must be an object, got {show(item)}")
            continue
        name = _pod_type_name(item, path=path, findings=findings)
        if name is not None and name in seen:
            findings.problem(f"{path}.name", f"duplicate pod type name {show(name)}")
            name = None
        seen.add(name or "")
        pod_type = _read_pod_type(
            item,
            name=name,
            path=path,
            default_max_workers=0 if name == head_name else cluster_max_workers,
            findings=findings,
        )
        if pod_type is not None:
            pod_types.append(pod_type)
    return pod_types


def _pod_type_name(item: Mapping[str, Any], *, path: str, findings: Findings) -> str | None:
    name = read_string(item, "name", path=f"{path}.name", findings=findings, required=True)
    if name is not None and not is_label_name(name):
        findings.problem(
            f"{path}.name",
            f"{show(name)} is not a valid worker group name: at most 63 alphanumeric characters, "
            "'-', '_' or '.', starting and ending with an alphanumeric character",
        )
    return name


def _read_pod_type(
    item: Mapping[str, Any],
    *,
    name: str | None,
    path: str,
    default_max_workers: int,
    findings: Findings,
) -> _PodType | None:
    """The pod type at `path`, or None when it has a problem (recorded)."""
    warn_unknown_fields(item, _POD_TYPE_FIELDS, path=path, findings=findings)
    bounds = _worker_bounds(
        item, path=path, default_max_workers=default_max_workers, findings=findings
    )
    resource_params = _resource_params(item, path=f"{path}.rayResources", findings=findings)
    setup_commands = _pod_type_setup_commands(item, path=path, findings=findings)
    template = read_pod_config(item, path=path, findings=findings)
    if name is None or bounds is None or template is None:
        return None
    return _PodType(
        name=name,
        path=path,
        min_workers=bounds[0],
        max_workers=bounds[1],
        resource_params=resource_params,
        setup_commands=setup_commands,
        template=template,
    )


def _worker_bounds(
    item: Mapping[str, Any], *, path: str, default_max_workers: int, findings: Findings
) -> tuple[int, int] | None:
    """minWorkers and maxWorkers with the legacy defaults: Ray's `fill_node_type_min_max_workers`
    (autoscaler/_private/util.py) gives a worker type the cluster-wide maximum, the head type 0,
    and every type a minimum of 0."""
    low = read_count(item, "minWorkers", path=f"{path}.minWorkers", findings=findings)
    high = read_count(item, "maxWorkers", path=f"{path}.maxWorkers", findings=findings)
    if (low is None and item.get("minWorkers") is not None) or (
        high is None and item.get("maxWorkers") is not None
    ):
        return None
    low = 0 if low is None else low
    high = default_max_workers if high is None else high
    if low > high:
        findings.problem(f"{path}.minWorkers", f"must not exceed maxWorkers ({high}), got {low}")
        return None
    return low, high


def _pod_type_setup_commands(
    item: Mapping[str, Any], *, path: str, findings: Findings
) -> list[str] | None:
    """The type's own setup commands, or None to use the cluster's. Both legacy spellings map to
    the node type's `worker_setup_commands`, the later one winning (operator_utils.py)."""
    setup = read_strings(item, "setupCommands", path=f"{path}.setupCommands", findings=findings)
    worker_setup = read_strings(
        item, "workerSetupCommands", path=f"{path}.workerSetupCommands", findings=findings
    )
    if item.get("workerSetupCommands") is not None:
        if item.get("setupCommands") is not None:
            findings.warn(
                f"{path}.setupCommands",
                "dropped: workerSetupCommands replaces it, as in the legacy operator",
            )
        return worker_setup
    return setup if item.get("setupCommands") is not None else None


def _resource_params(item: Mapping[str, Any], *, path: str, findings: Findings) -> dict[str, str]:
    resources = read_mapping(item, "rayResources", path=path, findings=findings) or {}
    return resource_params(resources, path=path, findings=findings)


def _head_pod_type(
    pod_types: list[_PodType], head_name: str | None, findings: Findings
) -> _PodType | None:
    if head_name is None:
        return None
    for pod_type in pod_types:
        if pod_type.name == head_name:
            return pod_type
    findings.problem("spec.headPodType", f"names no pod type of spec.podTypes: {show(head_name)}")
    return None


def _read_cluster_commands(spec: Mapping[str, Any], findings: Findings) -> _ClusterCommands:
    """The start and setup commands, in the order the legacy autoscaler ran them: common setup
    commands, then the head's or the workers' own (`merge_setup_commands`)."""
    common = []
    for key in ("SetupCommands", "setupCommands"):
        common += read_strings(spec, key, path=f"spec.{key}", findings=findings)
    return _ClusterCommands(
        head_start=read_start_commands(
            read_strings(
                spec, "headStartRayCommands", path="spec.headStartRayCommands", findings=findings
            ),
            path="spec.headStartRayCommands",
            node="head",
            findings=findings,
        ),
        worker_start=read_start_commands(
            read_strings(
                spec,
                "workerStartRayCommands",
                path="spec.workerStartRayCommands",
                findings=findings,
            ),
            path="spec.workerStartRayCommands",
            node="worker",
            findings=findings,
        ),
        head_setup=common
        + read_strings(spec, "headSetupCommands", path="spec.headSetupCommands", findings=findings),
        worker_setup=common
        + read_strings(
            spec, "workerSetupCommands", path="spec.workerSetupCommands", findings=findings
        ),
    )


def _head_service_ports(spec: Mapping[str, Any], findings: Findings) -> list[dict[str, Any]]:
    """`headServicePorts` as named ports of the head's Ray container: KubeRay builds the head
    Service's ports from them."""
    items = read_list(spec, "headServicePorts", path="spec.headServicePorts", findings=findings)
    ports = []
    for index, item in enumerate(items or []):
        path = f"spec.headServicePorts[{index}]"
        if not isinstance(item, Mapping):
            findings.problem(path, f"must be an object, got {show(item)}")
            continue
        port = _head_service_port(item, path=path, findings=findings)
        if port is not None:
            ports.append(port)
    return ports


def _head_service_port(
    item: Mapping[str, Any], *, path: str, findings: Findings
) -> dict[str, Any] | None:
    name = read_string(item, "name", path=f"{path}.name", findings=findings, required=True)
    port, target = item.get("port"), item.get("targetPort", item.get("port"))
    if isinstance(port, bool) or not isinstance(port, int) or port not in _PORT_RANGE:
        findings.problem(f"{path}.port", f"must be a port number (1-65535), got {show(port)}")
        return None
    if name is None:
        return None
    if isinstance(target, str):
        findings.warn(
            f"{path}.targetPort",
            f"dropped the named target port {show(target)}: the head Service targets the "
            f"container port {port}",
        )
        target = port
    if isinstance(target, bool) or not isinstance(target, int) or target not in _PORT_RANGE:
        findings.problem(f"{path}.targetPort", f"must be a port number or name, got {show(target)}")
        return None
    if target != port:
        findings.warn(
            f"{path}.port",
            f"dropped: KubeRay's head Service uses the container port, {target}, not {port}",
        )
    return {"name": name, "containerPort": target}


def _head_group(
    head: _PodType,
    *,
    commands: _ClusterCommands,
    ports: Sequence[Mapping[str, Any]],
    findings: Findings,
) -> dict[str, Any]:
    if head.setup_commands:
        findings.warn(
            f"{head.path}.setupCommands",
            "dropped: the legacy autoscaler ran a pod type's setup commands on its workers only",
        )
    changes = RayContainerChanges(
        commands_before_ray=[*commands.head_setup, *commands.head_start.other_commands],
        open_files=_open_files(commands.head_start),
        ports=ports,
    )
    return {
        "rayStartParams": _group_params(head, commands.head_start, findings=findings),
        "template": _group_template(head, changes, findings=findings),
    }


def _worker_groups(
    pod_types: list[_PodType],
    *,
    head: _PodType,
    commands: _ClusterCommands,
    findings: Findings,
) -> list[dict[str, Any]]:
    """A worker group per worker pod type, in list order; the head type too when the legacy
    autoscaler could start workers of it."""
    worker_types = [t for t in pod_types if t is not head or t.max_workers > 0]
    if head in worker_types:
        findings.warn(
            f"{head.path}.maxWorkers",
            f"the legacy autoscaler could also start workers of the head type: worker group "
            f"{show(head.name)} made from it",
        )
    copied = _copied_worker_commands_size(worker_types, commands)
    if copied > MAX_CONVERTED_BYTES:
        # The cluster-wide worker commands are written into every group: without this bound a
        # 1.5 MB legacy object could ask for gigabytes.
        findings.problem(
            "spec.workerStartRayCommands",
            f"with the worker setup commands, copied into each of {len(worker_types)} worker "
            f"groups, they would make a RayCluster of more than {MAX_CONVERTED_BYTES} bytes",
        )
        return []
    return [_worker_group(t, commands=commands, findings=findings) for t in worker_types]


def _copied_worker_commands_size(worker_types: list[_PodType], commands: _ClusterCommands) -> int:
    """About how many bytes of commands and flags the worker groups get from cluster-wide
    fields (each group its own copy)."""
    start = commands.worker_start
    shared = sum(len(c) + 4 for c in start.other_commands)
    shared += sum(len(k) + len(v) + 8 for k, v in start.params.items())
    cluster_setup = sum(len(c) + 4 for c in commands.worker_setup)
    return sum(
        shared
        + (cluster_setup if t.setup_commands is None else sum(len(c) + 4 for c in t.setup_commands))
        for t in worker_types
    )


def _worker_group(
    pod_type: _PodType, *, commands: _ClusterCommands, findings: Findings
) -> dict[str, Any]:
    # A type's own setup commands replace the cluster's worker setup commands, as the legacy
    # autoscaler's node-type-specific `worker_setup_commands` did (Ray's autoscaler.py,
    # `_get_node_type_specific_fields`).
    setup = commands.worker_setup if pod_type.setup_commands is None else pod_type.setup_commands
    changes = RayContainerChanges(
        commands_before_ray=[*setup, *commands.worker_start.other_commands],
        open_files=_open_files(commands.worker_start),
    )
    return {
        "groupName": pod_type.name,
        "replicas": pod_type.min_workers,
        "minReplicas": pod_type.min_workers,
        "maxReplicas": pod_type.max_workers,
        "rayStartParams": _group_params(pod_type, commands.worker_start, findings=findings),
        "template": _group_template(pod_type, changes, findings=findings),
    }


def _group_params(
    pod_type: _PodType, start: StartCommands, *, findings: Findings
) -> dict[str, str]:
    """The start commands' flags and the type's resources, which must not disagree."""
    merged = StartCommands(params=dict(start.params), param_paths=dict(start.param_paths))
    for flag, value in pod_type.resource_params.items():
        add_param(merged, flag, value, path=f"{pod_type.path}.rayResources", findings=findings)
    return {flag: merged.params[flag] for flag in sorted(merged.params)}


def _group_template(
    pod_type: _PodType, changes: RayContainerChanges, *, findings: Findings
) -> dict[str, Any]:
    # Each group gets its own copy: the head type may also make a worker group.
    template: dict[str, Any] = copy.deepcopy(pod_type.template)
    change_ray_container(
        template, changes, path=f"{pod_type.path}.podConfig.spec.containers[0]", findings=findings
    )
    return template


def _open_files(start: StartCommands) -> str | None:
    """The open-files limit for RAY_START_ULIMIT_OPEN_FILES; None for KubeRay's default."""
    return None if start.open_files in (None, KUBERAY_DEFAULT_OPEN_FILES) else start.open_files


def _autoscaler_options(spec: Mapping[str, Any], findings: Findings) -> dict[str, Any]:
    return {
        "idleTimeoutSeconds": _idle_timeout_seconds(spec, findings),
        "upscalingMode": _upscaling_mode(spec, findings),
    }


def _idle_timeout_seconds(spec: Mapping[str, Any], findings: Findings) -> int:
    path = "spec.idleTimeoutMinutes"
    minutes = read_count(spec, "idleTimeoutMinutes", path=path, findings=findings)
    if minutes is None:
        minutes = DEFAULT_IDLE_TIMEOUT_MINUTES
    if minutes > _MAX_IDLE_TIMEOUT_MINUTES:
        findings.problem(
            path,
            f"must be at most {_MAX_IDLE_TIMEOUT_MINUTES} (idleTimeoutSeconds is a 32-bit "
            f"integer), got {minutes}",
        )
    return minutes * 60


def _upscaling_mode(spec: Mapping[str, Any], findings: Findings) -> str:
    """Ray's KubeRay config reader turns Conservative into upscaling speed 1 and Default or
    Aggressive into 1000, i.e. unlimited (kuberay/autoscaling_config.py,
    `_derive_autoscaling_config_from_ray_cr`)."""
    path = "spec.upscalingSpeed"
    speed = read_number(spec, "upscalingSpeed", path=path, findings=findings)
    if speed is None:
        speed = DEFAULT_UPSCALING_SPEED
    if speed > 1:
        findings.warn(
            path,
            f"{speed:g} is not kept: upscalingMode Default does not limit scale-up",
        )
        return "Default"
    if speed != 1:
        findings.warn(
            path,
            f"{speed:g} is not kept: upscalingMode Conservative is rate limited to the cluster "
            "size (speed 1)",
        )
    return "Conservative"


def _warn_cluster_max_workers(
    workers: list[dict[str, Any]],
    cluster_max_workers: int,
    *,
    spec: Mapping[str, Any],
    findings: Findings,
) -> None:
    total = sum(group["maxReplicas"] for group in workers)
    if total > cluster_max_workers:
        given = "" if "maxWorkers" in spec else f" (the legacy default, {DEFAULT_MAX_WORKERS})"
        findings.warn(
            "spec.maxWorkers",
            f"not kept: ray.io/v1 has no cluster-wide worker limit, and the worker groups' "
            f"maxReplicas add up to {total}, above maxWorkers {cluster_max_workers}{given}",
        )
