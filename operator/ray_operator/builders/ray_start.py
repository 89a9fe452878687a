"""The `ray start` command line, built from a group's `rayStartParams` as KubeRay builds it.

KubeRay's rules (`common/pod.go`), reproduced because users read and script against the result
(it is also exported to the container as KUBERAY_GEN_RAY_START_CMD):
- a group's top-level `resources`/`labels` fields override the matching params;
- missing params are filled: workers get `address=<head svc FQDN>:<port>`, the head gets
  `dashboard-host=0.0.0.0`; both get `metrics-export-port=8080`, `dashboard-agent-listen-port=52365`
  (the probes rely on it, kuberay#1760) and always `block` (kuberay#675);
- `num-cpus` comes from the CPU limit else request, `memory` from the memory limit only, `num-gpus`
  from the first GPU-like limit, and the first TPU/Neuron limit becomes a custom resource;
- flags are sorted; "true" becomes a bare flag and "false" drops it, except for the flags that take
  an explicit boolean; each flag prints as " --name=value " (hence the double spaces).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ray_operator import bounded_json
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.quantity import InvalidQuantityError, Quantity, format_float_like_go
from ray_operator.spec.raycluster import JSON

if TYPE_CHECKING:
    from ray_operator.spec.raycluster import GroupSpec


# Flags that take an explicit boolean value, so "false" must be passed rather than dropped.
_EXPLICIT_BOOLEAN_FLAGS = frozenset({"log-color", "include-dashboard", "include-log-monitor"})
_ACCELERATOR_RESOURCES = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}
_MIG_RESOURCE_RE = re.compile(r"nvidia\.com/mig-\d+g\.\d+gb$")


def is_gpu_resource(name: str) -> bool:
    """KubeRay's GPU test: a name ending in "gpu", or an NVIDIA MIG slice."""
    return name.endswith("gpu") or _MIG_RESOURCE_RE.search(name) is not None


def head_port(head_params: Mapping[str, str]) -> str:
    """The GCS port workers connect to: the head's `port` param, else 6379."""
    return str(head_params.get("port", names.GCS_PORT))


def complete_params(
    group: GroupSpec, *, node_type: str, head_address: str | None, container_resources: JSON
) -> dict[str, str]:
    """The full `rayStartParams` of a group's Ray container, with every default KubeRay adds."""
    params = {str(key): str(value) for key, value in (group.get("rayStartParams") or {}).items()}
    _apply_group_resources(params, group.get("resources") or {})
    _apply_group_labels(params, group.get("labels") or {})
    if node_type == names.WORKER_NODE and head_address is not None:
        params.setdefault("address", head_address)
    if node_type == names.HEAD_NODE:
        params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", str(names.METRICS_PORT))
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", str(names.DASHBOARD_AGENT_PORT))
    _apply_container_resources(params, container_resources)
    return params


def ray_start_command(params: Mapping[str, str], *, node_type: str) -> str:
    """`ray start [--head] <sorted flags>`, byte for byte what KubeRay generates."""
    head = " --head" if node_type == names.HEAD_NODE else ""
    return f"ray start{head} {format_flags(params)}"


def format_flags(params: Mapping[str, str]) -> str:
    parts = []
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in _EXPLICIT_BOOLEAN_FLAGS:
            if value.lower() == "true":
                parts.append(f" --{key} ")
        else:
            parts.append(f" --{key}={value} ")
    return "".join(parts)


def _apply_group_resources(params: dict[str, str], resources: Mapping[str, str]) -> None:
    custom: dict[str, float] = {}
    for name, text in resources.items():
        try:
            quantity = Quantity.parse(str(text))
        except InvalidQuantityError:
            continue  # KubeRay skips quantities it cannot parse; validation reports them.
        lowered = name.lower()
        if lowered == "cpu":
            params["num-cpus"] = str(quantity.value())
        elif lowered == "memory":
            params["memory"] = str(quantity.value())
        elif is_gpu_resource(lowered):
            params["num-gpus"] = str(quantity.value())
        else:
            custom[name] = quantity.as_float()
    if custom:
        params["resources"] = f"'{_go_json(custom)}'"


def _apply_group_labels(params: dict[str, str], group_labels: Mapping[str, str]) -> None:
    if group_labels:
        params["labels"] = ",".join(f"{key}={group_labels[key]}" for key in sorted(group_labels))


def _apply_container_resources(params: dict[str, str], resources: JSON) -> None:
    limits = {str(k): Quantity.parse(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {str(k): Quantity.parse(v) for k, v in (resources.get("requests") or {}).items()}
    if "num-cpus" not in params:
        for source in (limits, requests):
            cpu = source.get("cpu")
            if cpu is not None and not cpu.is_zero():
                params["num-cpus"] = str(cpu.value())
                break
    memory = limits.get("memory")
    if "memory" not in params and memory is not None and not memory.is_zero():
        params["memory"] = str(memory.value())
    _apply_accelerators(params, limits)


def _apply_accelerators(params: dict[str, str], limits: Mapping[str, Quantity]) -> None:
    if not limits:
        return
    try:
        custom = bounded_json.loads(params.get("resources", "{}").strip("'\"` "))
    except ValueError:
        return  # KubeRay leaves a malformed `resources` param alone and adds nothing.
    if not isinstance(custom, dict):
        return
    custom_accelerator_set = any(name in custom for name in _ACCELERATOR_RESOURCES.values())
    for key in sorted(limits):
        quantity = limits[key]
        if quantity.is_zero():
            continue
        if "num-gpus" not in params and is_gpu_resource(key):
            params["num-gpus"] = str(quantity.value())
        ray_name = _ACCELERATOR_RESOURCES.get(key)
        if ray_name is not None and not custom_accelerator_set:
            custom[ray_name] = quantity.as_float()
            params["resources"] = f"'{_go_json(custom)}'"
            custom_accelerator_set = True


def _go_json(resources: Mapping[str, float]) -> str:
    """JSON as Go's encoding/json writes a map[string]float64: sorted keys, "4" not "4.0"."""
    body = ",".join(
        f"{json.dumps(key)}:{format_float_like_go(float(resources[key]))}"
        for key in sorted(resources)
    )
    return "{" + body + "}"
