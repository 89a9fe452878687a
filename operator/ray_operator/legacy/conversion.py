"""A legacy Ray operator RayCluster (`cluster.ray.io/v1`) converted into a ray.io/v1 RayCluster.

Pure: a mapping in, a manifest and warnings out; no I/O, no YAML, no API client. The mapping of
every legacy field is the table in README.md ("Migrating from Ray's legacy operator"). Every
problem of the object is reported at once (`LegacyConversionError.problems`), and the result is
checked with the admission webhook's own validation, so a conversion that succeeds is a
RayCluster ray-operator accepts.

Work is linear in the size of the object (at most what the API server stores, ~1.5 MB): each
field is read once, shell commands are scanned once, and the validation is bounded.
"""

from __future__ import annotations

import copy
import json
import math
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
from ray_operator.legacy.start_commands import (
    KUBERAY_DEFAULT_OPEN_FILES,
    StartCommands,
    add_param,
    read_start_commands,
)
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
# Ray's own resource names and the `ray start` flags that set them (Ray's `--resources` refuses
# CPU and GPU); each flag takes an integer.
_RESOURCE_FLAGS = {
    "CPU": "num-cpus",
    "GPU": "num-gpus",
    "memory": "memory",
    "object_store_memory": "object-store-memory",
}
# Ray resources are floats; a whole number beyond 2^53 would not survive the trip.
_MAX_RESOURCE_AMOUNT = 2**53
# `resources` is written inside double quotes in a bash command; these would be expanded there.
_SHELL_ESCAPED = str.maketrans({"$": "\\$", "`": "\\`", '"': '\\"'})
_PORT_RANGE = range(1, 65536)


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


def convert_legacy_cluster(legacy: Mapping[str, Any]) -> Conversion:
    """The ray.io/v1 RayCluster for `legacy`; raises LegacyConversionError with every problem."""
    findings = Findings()
    cluster = _convert(legacy, findings)
    if cluster is not None and not findings.problems:
        for error in validate_raycluster(cluster):
            findings.problem("(converted RayCluster)", f"ray-operator would refuse it: {error}")
    if cluster is None or findings.problems:
        raise LegacyConversionError(findings.problems)
    return Conversion(cluster=cluster, warnings=tuple(findings.warnings))


def _convert(legacy: object, findings: Findings) -> dict[str, Any] | None:
    if not isinstance(legacy, Mapping):
        findings.problem("(document)", f"must be an object, got {show(legacy)}")
        return None
    metadata = _cluster_metadata(legacy, findings)
    spec = read_mapping(legacy, "spec", path="spec", findings=findings)
    if spec is None:
        if "spec" not in legacy:
            findings.problem("spec", "is required")
        return None
    warn_unknown_fields(spec, _SPEC_FIELDS, path="spec", findings=findings)
    cluster_max_workers = _cluster_max_workers(spec, findings)
    head_name = read_string(spec, "headPodType", path="spec.headPodType", findings=findings)
    if "headPodType" not in spec:
        findings.problem("spec.headPodType", "is required")
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
    name = read_string(legacy_metadata, "name", path="metadata.name", findings=findings)
    if "name" not in legacy_metadata:
        findings.problem("metadata.name", "is required")
    metadata: dict[str, Any] = {"name": name}
    namespace = read_string(
        legacy_metadata, "namespace", path="metadata.namespace", findings=findings
    )
    if namespace is not None:
        metadata["namespace"] = namespace
    for key in ("labels", "annotations"):
        values = read_mapping(legacy_metadata, key, path=f"metadata.{key}", findings=findings)
        kept = {k: v for k, v in (values or {}).items() if k != _LAST_APPLIED}
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
    items = read_list(spec, "podTypes", path="spec.podTypes", findings=findings)
    if items is None:
        if "podTypes" not in spec:
            findings.problem("spec.podTypes", "is required")
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
    name = read_string(item, "name", path=f"{path}.name", findings=findings)
    if "name" not in item:
        findings.problem(f"{path}.name", "is required")
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
    if (low is None and "minWorkers" in item) or (high is None and "maxWorkers" in item):
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
    if "workerSetupCommands" in item:
        if "setupCommands" in item:
            findings.warn(
                f"{path}.setupCommands",
                "dropped: workerSetupCommands replaces it, as in the legacy operator",
            )
        return worker_setup
    return setup if "setupCommands" in item else None


def _resource_params(item: Mapping[str, Any], *, path: str, findings: Findings) -> dict[str, str]:
    """`rayResources` as rayStartParams: Ray's own resources as their flags, the others as
    `resources` in the JSON form KubeRay's samples (and Ray's autoscaler) read."""
    resources = read_mapping(item, "rayResources", path=path, findings=findings) or {}
    params: dict[str, str] = {}
    custom: dict[str, int] = {}
    for name in sorted(resources, key=str):
        amount = _resource_amount(resources[name], path=f"{path}.{name}", findings=findings)
        if amount is None:
            continue
        if name in _RESOURCE_FLAGS:
            params[_RESOURCE_FLAGS[name]] = str(amount)
        elif not isinstance(name, str) or not name or "\\" in name or '"' in name:
            findings.problem(f"{path}.{name}", 'a resource name must be a string without \\ or "')
        else:
            custom[name] = amount
    if custom:
        text = json.dumps(custom, ensure_ascii=False, sort_keys=True)
        params["resources"] = '"' + text.translate(_SHELL_ESCAPED) + '"'
    return params


def _resource_amount(value: Any, *, path: str, findings: Findings) -> int | None:
    """A whole, non-negative amount: `ray start` takes integers for its resource flags, and
    Ray's KubeRay autoscaler reads `resources` values as integers (kuberay/
    autoscaling_config.py, `_get_custom_resources`)."""
    number_like = isinstance(value, int | float) and not isinstance(value, bool)
    if not number_like or not math.isfinite(value) or value < 0:
        findings.problem(path, f"must be a non-negative number, got {show(value)}")
        return None
    if value > _MAX_RESOURCE_AMOUNT:
        findings.problem(path, f"must be at most {_MAX_RESOURCE_AMOUNT}, got {show(value)}")
        return None
    if value != int(value):
        findings.problem(path, f"must be a whole number, got {show(value)}")
        return None
    return int(value)


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
    name = read_string(item, "name", path=f"{path}.name", findings=findings)
    port, target = item.get("port"), item.get("targetPort", item.get("port"))
    if isinstance(port, bool) or not isinstance(port, int) or port not in _PORT_RANGE:
        findings.problem(f"{path}.port", f"must be a port number (1-65535), got {show(port)}")
        return None
    if name is None:
        if "name" not in item:
            findings.problem(f"{path}.name", "is required")
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
    groups = []
    for pod_type in pod_types:
        if pod_type is head:
            if pod_type.max_workers == 0:
                continue
            findings.warn(
                f"{pod_type.path}.maxWorkers",
                f"the legacy autoscaler could also start workers of the head type: worker group "
                f"{show(pod_type.name)} made from it",
            )
        groups.append(_worker_group(pod_type, commands=commands, findings=findings))
    return groups


def _worker_group(
    pod_type: _PodType, *, commands: _ClusterCommands, findings: Findings
) -> dict[str, Any]:
    # A type's own setup commands replace the cluster's worker setup commands, as the legacy
    # autoscaler's node-type-specific `worker_setup_commands` did.
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
    `_generate_autoscaling_config_from_ray_cr`)."""
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
