"""What the local Ray agent keeps of a Pod it runs (`RunningPod`), and what it shows others of
it: its containers for the kubelet endpoint (`local_container`) and where its ports listen here
(`pod_ports`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray_operator.localray.plan import (
    SERVE_PROXY_PORT,
    SERVE_TARGET,
    NodePlan,
    NodePorts,
    pod_port_targets,
)
from ray_operator.localray.pod_view import PodView
from ray_operator.localray.processes import LocalProcess
from ray_operator.localray.views import LocalContainer

if TYPE_CHECKING:
    from ray_io.v1_views import Pod


@dataclass(slots=True)
class RunningPod:
    """A process the agent started for a Pod."""

    pod: Pod
    process: LocalProcess
    files: Path
    temp_dir: Path | None = None
    plan: NodePlan | None = None
    ports: NodePorts | None = None
    address: str = ""
    head_uid: str = ""
    """For a worker: the head it joined (a new head means a restart)."""
    gcs_ready: bool = False
    autoscaler: LocalProcess | None = None
    ready_reported: bool = False
    ended_reported: bool = False
    view: PodView | None = None
    sidecar: LocalProcess | None = None
    """A SidecarMode head's submitter container, once started."""
    sidecar_started: str = ""
    sidecar_ended: dict[str, Any] | None = None
    """Its `terminated` state, once it ended (kept in every status the agent writes)."""


def pod_ports(running: RunningPod) -> dict[int, tuple[str, int]]:
    """Where each Pod port of a running Ray node listens on this machine."""
    if running.plan is None or running.ports is None:
        return {}
    return {
        pod_port: (
            running.address,
            SERVE_PROXY_PORT if target == SERVE_TARGET else getattr(running.ports, target),
        )
        for pod_port, target in pod_port_targets(running.plan).items()
        if target == SERVE_TARGET or getattr(running.ports, target)
    }


def local_container(
    pod: Pod,
    name: str,
    process: LocalProcess,
    *,
    working_dir: str,
    namespace_pid: int | None = None,
    ports: Mapping[int, tuple[str, int]] | None = None,
) -> LocalContainer:
    """One container of a Pod the agent runs, as the kubelet endpoint shows it."""
    metadata = pod["metadata"]
    return LocalContainer(
        namespace=str(metadata.get("namespace") or ""),
        pod=str(metadata.get("name") or ""),
        pod_uid=str(metadata.get("uid") or ""),
        container=name,
        log_path=process.log_path,
        env=process.env,
        working_dir=working_dir,
        namespace_pid=namespace_pid,
        ports=ports or {},
        running=process.returncode is None,
    )


def is_head(running: RunningPod) -> bool:
    """Whether it is a Ray head's node."""
    return running.plan is not None and running.plan.is_head


__all__ = ["RunningPod", "is_head", "local_container", "pod_ports"]
