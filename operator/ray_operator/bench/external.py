"""Any operator as a command line: placeholders the harness fills in, and its process measured
from outside.

`--compare-with CMD` names an operator the harness knows nothing about (KubeRay's manager, or
ours). CMD is split into shell words and may name, in braces, what only the harness knows when it
starts the process: `PLACEHOLDERS` below. KUBECONFIG is also set in its environment. Memory and
CPU are those of the process and every descendant it spawned, read from /proc.

    command = OperatorCommand.parse("/tmp/kuberay-operator --health-probe-bind-address "
                                    "127.0.0.1:{probe_port} --leader-election-namespace "
                                    "{lease_namespace}")
    process = ExternalOperator(command, kubeconfig=path, lease_namespace="ray-system",
                               log_path=work_dir / "theirs.log")
"""

from __future__ import annotations

import shlex
import string
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ray_operator.bench.operator_process import (
    ProbedProcess,
    ProcessSample,
    free_port,
    read_process,
)

PLACEHOLDERS: Mapping[str, str] = {
    "kubeconfig": "the kubeconfig of the operator's own identity (also in $KUBECONFIG)",
    "probe_port": "a free loopback port for the readiness probe the harness polls",
    "metrics_port": "a free loopback port for metrics (never scraped)",
    "webhook_port": "a free port for admission webhooks, if the operator serves any",
    "lease_namespace": "the namespace for the leader-election Lease (it exists)",
}
"""What CMD may name in braces, and what the harness puts there."""

KUBERAY_EXAMPLE = (
    "/tmp/kuberay-operator --kubeconfig {kubeconfig} "
    "--health-probe-bind-address 127.0.0.1:{probe_port} --metrics-addr 127.0.0.1:{metrics_port} "
    "--enable-leader-election --leader-election-namespace {lease_namespace}"
)


def ours_command_line() -> str:
    """`ray-operator run` with its defaults and leader election on, as a CMD with placeholders."""
    return shlex.join([sys.executable, "-m", "ray_operator.cli", "run", "--leader-elect"]) + (
        " --kubeconfig {kubeconfig} --lease-namespace {lease_namespace}"
        " --health-addr 127.0.0.1:{probe_port} --metrics-addr 127.0.0.1:{metrics_port}"
        " --webhook-port {webhook_port}"
    )


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    """An operator's command line as shell words, each possibly holding placeholders."""

    words: tuple[str, ...]

    @classmethod
    def parse(cls, line: str) -> OperatorCommand:
        """Split `line` as a shell would; refuse a placeholder the harness does not know."""
        words = tuple(shlex.split(line))
        if not words:
            raise ValueError("the operator command is empty")
        for word in words:
            for name in _placeholders_in(word):
                if name not in PLACEHOLDERS:
                    known = ", ".join(f"{{{known}}}" for known in PLACEHOLDERS)
                    raise ValueError(
                        f"unknown placeholder {{{name}}} in {word!r}; known: {known} "
                        "(write {{ and }} for literal braces)"
                    )
        return cls(words)

    def fill(self, values: Mapping[str, object]) -> list[str]:
        """The words with every placeholder replaced by its value."""
        return [word.format_map(values) for word in self.words]


def _placeholders_in(word: str) -> list[str]:
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(word) if name is not None]
    except ValueError as error:  # a lone brace
        raise ValueError(f"malformed placeholder in {word!r}: {error}") from None
    return fields


class ExternalOperator(ProbedProcess):
    """An operator started from an `OperatorCommand`, ready when its probe answers 200."""

    def __init__(
        self,
        command: OperatorCommand,
        *,
        kubeconfig: Path,
        lease_namespace: str,
        log_path: Path,
        ready_path: str = "/readyz",
        environment: Mapping[str, str] | None = None,
    ) -> None:
        probe_port = free_port()
        values = {
            "kubeconfig": kubeconfig,
            "probe_port": probe_port,
            "metrics_port": free_port(),
            "webhook_port": free_port(),
            "lease_namespace": lease_namespace,
        }
        super().__init__(
            command.fill(values),
            probe_port=probe_port,
            log_path=log_path,
            ready_path=ready_path,
            env={**(environment or {}), "KUBECONFIG": str(kubeconfig)},
        )

    def sample(self) -> ProcessSample:
        """RSS and CPU time of the process and all its descendants now."""
        self._check_alive()
        return read_process_tree(self.pid)


def read_process_tree(pid: int) -> ProcessSample:
    """`read_process` summed over `pid` and its live descendants (children that already exited
    are not counted)."""
    samples = []
    for member in [pid, *descendants(pid)]:
        try:
            samples.append(read_process(member))
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited between the listing and the read
    return ProcessSample(
        rss_bytes=sum(sample.rss_bytes for sample in samples),
        cpu_seconds=sum(sample.cpu_seconds for sample in samples),
        monotonic=time.monotonic(),
    )


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`, from the parent pids in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Field 4 (ppid) is the second after the command name, which may hold ')'.
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found: list[int] = []
    pending: Sequence[int] = children.get(pid, [])
    while pending:
        found += pending
        pending = [child for parent in pending for child in children.get(parent, [])]
    return found
