"""A legacy pod type's `podConfig` (a whole Pod) as a ray.io/v1 Pod template, and the changes its
Ray container (the first container) needs so that KubeRay's generated command starts Ray.

KubeRay prepends a container's own command and args to its `ray start` with `&&` (pod.go,
`BuildPod`), so the legacy keep-alive command (`sleep infinity`, which never returns) must go:
kept, it would never let Ray start. Any other command is the user's and is kept.
"""

from __future__ import annotations

import copy
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_operator.legacy.fields import read_mapping
from ray_operator.legacy.findings import Findings, show
from ray_operator.legacy.start_commands import split_shell_commands
from ray_operator.spec import kuberay_names as names

_KEPT_METADATA = ("labels", "annotations")
# KubeRay names its Pods `<cluster>-head-…` and `<cluster>-<group>-worker-…` itself.
_SILENTLY_DROPPED_METADATA = frozenset({"generateName"})
_OWNED_BY_KUBERAY_METADATA = frozenset({"name", "namespace", "ownerReferences"})
_POD_CONFIG_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec"})
_SHELLS = frozenset({"bash", "sh"})
# The words a keep-alive script is made of: `trap : TERM INT; sleep infinity & wait;` and the like.
_KEEP_ALIVE_WORDS = frozenset({"trap", "sleep", "wait", "exec", ":", "true"})
_RESTART_POLICIES = ("Always", "OnFailure", "Never")


@dataclass(frozen=True)
class RayContainerChanges:
    """What the Ray container gets besides its legacy podConfig."""

    commands_before_ray: Sequence[str]
    open_files: str | None
    ports: Sequence[Mapping[str, Any]] = ()


def read_pod_config(
    pod_type: Mapping[str, Any], *, path: str, findings: Findings
) -> dict[str, Any] | None:
    """The Pod template of `podConfig` (a copy), or None with a problem when it has no usable
    containers."""
    config = read_mapping(
        pod_type, "podConfig", path=f"{path}.podConfig", findings=findings, required=True
    )
    if config is None:
        return None
    path = f"{path}.podConfig"
    for key in config:
        if key not in _POD_CONFIG_FIELDS:
            findings.warn(f"{path}.{key}", "dropped: not part of a Pod template")
    pod_spec = read_mapping(config, "spec", path=f"{path}.spec", findings=findings)
    if pod_spec is None or not _has_containers(pod_spec, path=f"{path}.spec", findings=findings):
        return None
    template: dict[str, Any] = {}
    template_metadata = _template_metadata(config, path=f"{path}.metadata", findings=findings)
    if template_metadata:
        template["metadata"] = template_metadata
    template["spec"] = _template_spec(pod_spec, path=f"{path}.spec", findings=findings)
    return template


def _has_containers(pod_spec: Mapping[str, Any], *, path: str, findings: Findings) -> bool:
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        findings.problem(f"{path}.containers", "must list at least one container")
        return False
    if not isinstance(containers[0], Mapping):
        findings.problem(f"{path}.containers[0]", f"must be an object, got {show(containers[0])}")
        return False
    return True


def _template_metadata(
    config: Mapping[str, Any], *, path: str, findings: Findings
) -> dict[str, Any]:
    legacy = read_mapping(config, "metadata", path=path, findings=findings) or {}
    for key in legacy:
        if key in _OWNED_BY_KUBERAY_METADATA:
            findings.warn(f"{path}.{key}", "dropped: KubeRay names and owns the Pods it creates")
        elif key not in _SILENTLY_DROPPED_METADATA and key not in _KEPT_METADATA:
            findings.warn(f"{path}.{key}", "dropped: not part of a Pod template's metadata")
    return {key: copy.deepcopy(legacy[key]) for key in _KEPT_METADATA if key in legacy}


def _template_spec(pod_spec: Mapping[str, Any], *, path: str, findings: Findings) -> dict[str, Any]:
    template_spec = copy.deepcopy(dict(pod_spec))
    policy = template_spec.get("restartPolicy")
    if policy in ("Always", "OnFailure"):
        # KubeRay recreates failed Ray Pods itself, and its autoscaler v2 refuses any policy but
        # Never (or none).
        findings.warn(
            f"{path}.restartPolicy",
            f"dropped {policy}: KubeRay replaces failed Ray Pods itself",
        )
        del template_spec["restartPolicy"]
    elif policy is not None and policy != "Never":
        findings.problem(
            f"{path}.restartPolicy",
            f"must be one of {', '.join(_RESTART_POLICIES)}, got {show(policy)}",
        )
    return template_spec


def change_ray_container(
    template: dict[str, Any], changes: RayContainerChanges, *, path: str, findings: Findings
) -> None:
    """Apply `changes` to the template's first container: no keep-alive command, the commands to
    run before Ray as args, the open-files limit and the ports."""
    container = template["spec"]["containers"][0]
    for key in ("command", "args", "env", "ports"):
        if not isinstance(container.get(key, []), list):
            findings.problem(f"{path}.{key}", f"must be a list, got {show(container[key])}")
            return
    if is_keep_alive(container.get("command"), container.get("args")):
        container.pop("command", None)
        container.pop("args", None)
    elif "sleep infinity" in " ".join(
        map(str, [*container.get("command", []), *container.get("args", [])])
    ):
        # Kept, it would run before KubeRay's `ray start`, which would then never run.
        findings.problem(
            f"{path}.command",
            "runs `sleep infinity` besides other commands: KubeRay runs the container's command "
            "before `ray start`, so Ray would never start; keep only the other commands",
        )
        return
    if changes.commands_before_ray:
        _run_before_ray(container, changes.commands_before_ray)
    if changes.open_files is not None:
        _set_open_files(container, changes.open_files, path=path, findings=findings)
    if changes.ports:
        _add_ports(container, changes.ports, path=path, findings=findings)


def is_keep_alive(command: Any, args: Any) -> bool:
    """Whether the container's command only keeps it alive: `sleep infinity`, alone or in a
    `bash -c` script of trap/sleep/wait."""
    words = [*(command or []), *(args or [])]
    if not words or not all(isinstance(word, str) for word in words):
        return False
    if words == ["sleep", "infinity"]:
        return True
    if posixpath.basename(words[0]) not in _SHELLS or len(words) < 3 or words[1] != "-c":
        return False
    script = words[3:] if words[2] == "--" else words[2:]
    return len(script) == 1 and _is_keep_alive_script(script[0])


def _is_keep_alive_script(script: str) -> bool:
    if "sleep infinity" not in script:
        return False
    for command in split_shell_commands(script) or [""]:
        for part in command.split("&"):
            try:
                words = shlex.split(part)
            except ValueError:
                return False
            if words and words[0] not in _KEEP_ALIVE_WORDS:
                return False
    return True


def _run_before_ray(container: dict[str, Any], commands: Sequence[str]) -> None:
    # KubeRay joins the container's command and args with spaces and runs `… && ray start` in
    # bash; writing the same text as one script keeps the user's command first.
    kept = [
        str(word)
        for word in [*(container.pop("command", None) or []), *(container.get("args") or [])]
    ]
    container["args"] = [" && ".join([" ".join(kept), *commands] if kept else commands)]


def _set_open_files(
    container: dict[str, Any], open_files: str, *, path: str, findings: Findings
) -> None:
    env = container.setdefault("env", [])
    for variable in env:
        if (
            isinstance(variable, Mapping)
            and variable.get("name") == names.ENV_RAY_START_ULIMIT_OPEN_FILES
        ):
            if variable.get("value") != open_files:
                findings.problem(
                    path,
                    f"`ulimit -n {open_files}` conflicts with the container's "
                    f"{names.ENV_RAY_START_ULIMIT_OPEN_FILES}={show(variable.get('value'))}",
                )
            return
    env.append({"name": names.ENV_RAY_START_ULIMIT_OPEN_FILES, "value": open_files})


def _add_ports(
    container: dict[str, Any], ports: Sequence[Mapping[str, Any]], *, path: str, findings: Findings
) -> None:
    """Each port by its name; a port the container has unnamed gets the name. One pass over the
    container's ports and one over `ports`."""
    existing_ports = container.setdefault("ports", [])
    by_name = {p.get("name"): p for p in existing_ports if isinstance(p, dict) and "name" in p}
    unnamed = {
        p.get("containerPort"): p for p in existing_ports if isinstance(p, dict) and "name" not in p
    }
    for port in ports:
        name, number = port["name"], port["containerPort"]
        known = by_name.get(name)
        if known is not None:
            if known.get("containerPort") != number:
                findings.problem(
                    path,
                    f"port name {show(name)} is already the container's port "
                    f"{show(known.get('containerPort'))}",
                )
            continue
        # Named, the container port becomes a port of KubeRay's head Service.
        added = unnamed.pop(number, None)
        if added is None:
            added = {"name": name, "containerPort": number}
            existing_ports.append(added)
        added["name"] = name
        by_name[name] = added
