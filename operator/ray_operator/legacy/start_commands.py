"""Legacy `headStartRayCommands` / `workerStartRayCommands`, read as what KubeRay can express.

The legacy autoscaler ran each entry with a shell on the node. KubeRay generates the container's
command itself (`ulimit -n $RAY_START_ULIMIT_OPEN_FILES; ray start <rayStartParams>`), so an
entry is split into its shell commands (on `;` and `&&`, outside quotes) and each is sorted:

- `ray stop`: dropped (a new container runs no Ray to stop);
- `ulimit -n N`: KubeRay's RAY_START_ULIMIT_OPEN_FILES, unless N is its default 65536;
- `ray start <flags>`: `rayStartParams`, minus the flags KubeRay sets itself;
- anything else: a command to run before Ray, as KubeRay runs a container's own args.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ray_operator import bounded_json
from ray_operator.legacy.findings import HIDDEN, Findings, is_secret_name, shorten, show
from ray_operator.legacy.resources import resource_params

NodeKind = Literal["head", "worker"]

# KubeRay's default when RAY_START_ULIMIT_OPEN_FILES is unset (pod.go, `BuildPod`).
KUBERAY_DEFAULT_OPEN_FILES = "65536"

# Flags of `ray start` that KubeRay sets itself from the RayCluster (pod.go,
# `generateRayStartCommand`), or makes pointless: its autoscaler sidecar replaces the legacy
# operator's monitor.
_KUBERAY_FLAGS: dict[NodeKind, frozenset[str]] = {
    "head": frozenset({"head", "address", "block", "autoscaling-config", "no-monitor"}),
    "worker": frozenset({"head", "address", "block", "autoscaling-config"}),
}
# Of those, the ones the legacy operator's own examples and defaults always wrote: KubeRay does
# the same, so dropping them needs no warning.
_EXPECTED_FLAGS: dict[NodeKind, frozenset[str]] = {
    "head": frozenset({"head", "no-monitor"}),
    "worker": frozenset({"address"}),
}
_SHELL_OPERATOR_CHARACTERS = frozenset("|&<>()")


@dataclass
class StartCommands:
    """What one node kind's start commands ask for."""

    params: dict[str, str] = field(default_factory=dict)
    # Where each param came from, to name both places when it is given twice.
    param_paths: dict[str, str] = field(default_factory=dict)
    open_files: str | None = None
    other_commands: list[str] = field(default_factory=list)


def read_start_commands(
    commands: Sequence[str], *, path: str, node: NodeKind, findings: Findings
) -> StartCommands:
    """Sort every shell command of `commands` (the legacy list at `path`) into rayStartParams,
    the open-files limit and commands to run before Ray."""
    result = StartCommands()
    for index, entry in enumerate(commands):
        entry_path = f"{path}[{index}]"
        segments = split_shell_commands(entry)
        if segments is None:
            findings.problem(
                entry_path, f"is not a shell command (unbalanced quotes): {show(entry)}"
            )
            continue
        _read_entry(segments, path=entry_path, node=node, into=result, findings=findings)
    return result


def split_shell_commands(text: str) -> list[str] | None:
    """`text` split on `;` and `&&` outside quotes, each part stripped and empty ones left out;
    None when a quote is not closed. One pass over the text."""
    parts: list[str] = []
    start, skip_to = 0, 0
    try:
        for index, char in _unquoted_characters(text):
            if index < skip_to:
                continue  # the second `&` of `&&`
            if char == ";" or text.startswith("&&", index):
                parts.append(text[start:index])
                start = skip_to = index + (1 if char == ";" else 2)
    except ValueError:
        return None
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _unquoted_characters(text: str) -> Iterator[tuple[int, str]]:
    """Each character of `text` the shell would read unquoted, with its index; ValueError when a
    quote is not closed."""
    index, quote = 0, ""
    while index < len(text):
        char = text[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            index += 1  # an escaped character, also inside double quotes
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        else:
            yield index, char
        index += 1
    if quote:
        raise ValueError(f"unclosed {quote}")


def _has_shell_operators(command: str) -> bool:
    """Pipes, redirections, background `&` or subshells outside quotes."""
    return any(char in _SHELL_OPERATOR_CHARACTERS for _, char in _unquoted_characters(command))


def _read_entry(
    commands: list[str], *, path: str, node: NodeKind, into: StartCommands, findings: Findings
) -> None:
    """One entry's shell commands. A `ulimit -n` holds for the rest of its own entry only: the
    legacy autoscaler ran each entry in a shell of its own (updater.py, `do_update`)."""
    open_files: str | None = None
    limit_unused = False
    for command in commands:
        try:
            words = shlex.split(command)
        except ValueError as error:
            findings.problem(path, f"is not a shell command ({error}): {show(command)}")
            continue
        limit = _open_files_limit(words)
        if limit is not None:
            open_files, limit_unused = limit, True
        elif words[:2] == ["ray", "start"] and _has_shell_operators(command):
            findings.problem(
                path, f"`ray start` with pipes or redirections cannot be converted: {show(command)}"
            )
        elif words[:2] == ["ray", "start"]:
            _read_ray_start(words[2:], path=path, node=node, into=into, findings=findings)
            _set_open_files(into, open_files, path=path, findings=findings)
            limit_unused = False
        else:
            _read_other_command(words, command, path=path, into=into, findings=findings)
    if limit_unused:
        findings.warn(
            path,
            f"dropped `ulimit -n {open_files}`: no `ray start` follows it in its own shell",
        )


def _open_files_limit(words: list[str]) -> str | None:
    """N of `ulimit -n N`; None for any other command (other limits are not KubeRay's to set,
    so they run before Ray like any other command)."""
    is_limit = len(words) == 3 and words[:2] == ["ulimit", "-n"]
    # Ten digits are more than any kernel allows; longer is no limit KubeRay's variable can take.
    if is_limit and ((words[2].isdigit() and len(words[2]) <= 10) or words[2] == "unlimited"):
        return words[2]
    return None


def _set_open_files(
    into: StartCommands, open_files: str | None, *, path: str, findings: Findings
) -> None:
    if open_files is None:
        return
    if into.open_files not in (None, open_files):
        findings.problem(
            path,
            f"starts Ray with {open_files} open files, another `ray start` with {into.open_files}",
        )
        return
    into.open_files = open_files


def _read_other_command(
    words: list[str], command: str, *, path: str, into: StartCommands, findings: Findings
) -> None:
    if words[:2] == ["ray", "stop"]:
        return
    if "ray" in words and "start" in words:
        # KubeRay leaves a container alone when its args mention `ray start`: kept as a command
        # to run before Ray, this would stop KubeRay from starting Ray at all.
        findings.problem(
            path, f"`ray start` must be a command of its own to be converted: {show(command)}"
        )
    else:
        into.other_commands.append(command)


def _read_ray_start(
    arguments: list[str], *, path: str, node: NodeKind, into: StartCommands, findings: Findings
) -> None:
    for flag, value in _ray_start_flags(arguments, path=path, findings=findings):
        if flag in _KUBERAY_FLAGS[node]:
            if flag not in _EXPECTED_FLAGS[node]:
                findings.warn(path, f"dropped `--{flag}`: KubeRay sets it itself")
        elif "$" in value:
            findings.warn(
                path,
                f"dropped `--{shorten(f'{flag}={value}')}`: it reads a shell variable of the "
                "legacy operator",
            )
        elif flag == "resources":
            _read_resources_flag(value, path=path, into=into, findings=findings)
        else:
            # KubeRay writes `--flag=value` into a bash command unquoted: a value with spaces or
            # quotes must carry its own quoting, as in KubeRay's samples.
            add_param(into, flag, shlex.quote(value), path=path, findings=findings)


def _read_resources_flag(value: str, *, path: str, into: StartCommands, findings: Findings) -> None:
    try:
        resources = bounded_json.loads(value)
    except ValueError:
        resources = None
    if not isinstance(resources, dict):
        findings.problem(path, f"`ray start --resources` must be a JSON object, got {show(value)}")
        return
    for flag, param in resource_params(resources, path=path, findings=findings).items():
        add_param(into, flag, param, path=path, findings=findings)


def add_param(into: StartCommands, flag: str, value: str, *, path: str, findings: Findings) -> None:
    """Set rayStartParams `flag`, or record a problem when it already has another value."""
    known = into.params.get(flag)
    if known is not None and known != value:
        shown, other = (HIDDEN, HIDDEN) if is_secret_name(flag) else (show(value), show(known))
        findings.problem(
            path,
            f"sets --{shorten(flag)} to {shown}, but {into.param_paths[flag]} sets it to {other}",
        )
        return
    into.params[flag] = value
    into.param_paths.setdefault(flag, path)


def _ray_start_flags(
    arguments: list[str], *, path: str, findings: Findings
) -> Iterator[tuple[str, str]]:
    """`--flag=value`, `--flag value` and bare `--flag` ("true"), in order."""
    index = 0
    while index < len(arguments):
        word = arguments[index]
        index += 1
        if not word.startswith("--") or len(word) == 2:
            findings.problem(path, f"`ray start` argument {show(word)} is not a --flag")
            continue
        flag, equals, value = word[2:].partition("=")
        if not equals:
            following = arguments[index] if index < len(arguments) else "--"
            value = "true" if following.startswith("--") else following
            index += 0 if following.startswith("--") else 1
        yield flag, value
