"""What the local Ray agent tells others of a Pod it runs: where its container's output goes, the
environment its command sees, and where its ports listen on this machine.

The kubelet endpoint (`kubectl logs`, `exec`, `port-forward`) reads these; the agent writes them.
Kept apart from both so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class LocalContainer:
    """One container of a local Pod, as a command run in it must see it."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    log_path: Path
    """Everything the container's process wrote (stdout and stderr), appended."""
    env: Mapping[str, str]
    """The environment the container's process was started with."""
    working_dir: str
    """The directory its process started in, as the process sees it."""
    namespace_pid: int | None = None
    """A process living in the Pod's user and mount namespaces (its volumes at their mount
    paths); a command run "in the Pod" joins them. None: the Pod has no namespaces of its own."""
    ports: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    """Pod port (the `containerPort` a client names) → the address and port it listens on here."""
    loopback_ports: bool = False
    """Whether a command run in the Pod finds its `ports` at `127.0.0.1:<Pod port>`, as in a
    Pod's own network namespace (a local Redis Pod: `redis-cli` with no `-h`). False: it runs on
    this machine's network, where the Pod's processes are (a Ray Pod's env names their
    addresses)."""
    running: bool = True
    """Whether its process still runs (False: it ended, its log stays readable, e.g. a RayJob
    submitter's); `kubectl logs -f` stops following then, and exec and port-forward refuse."""


class LocalPods(Protocol):
    """Lookup of the containers the agent runs now."""

    def container(self, namespace: str, pod: str, container: str | None) -> LocalContainer | None:
        """The named container (None: the Pod's first), or None when the Pod has no local process
        (started, running or ended)."""
        ...

    def pod_port(self, namespace: str, pod: str, port: int) -> tuple[str, int] | None:
        """Where a Pod port listens on this machine, or None when it does not."""
        ...
