"""The Pod status the local Ray agent writes, as a kubelet would: readiness conditions, each
container's status (a SidecarMode submitter's end included), init containers' statuses, and a
Job Pod's terminal phase. The API server's fake node (KWOK) leaves these to the agent."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.builders.rayjob import SUBMITTER_CONTAINER_NAME
from ray_operator.localray.running import RunningPod
from ray_operator.runtime.client import KubeClient, PatchType
from ray_operator.runtime.errors import KubeError, NotFound
from ray_operator.spec.kinds import POD
from ray_operator.spec.times import format_time

if TYPE_CHECKING:
    from ray_io.v1_views import Pod

# The whole agent logs under one name, as before it was split into modules.
logger = logging.getLogger("ray_operator.localray.agent")

Object = Mapping[str, Any]


class PodStatusWriter:
    """Writes the status of the Pods the agent runs (a Pod already gone needs none)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def patch(
        self, pod: Pod, patch: Object, *, patch_type: PatchType = PatchType.MERGE
    ) -> bool:
        """Patch a Pod's status; False (logged) when it could not be written."""
        metadata = pod["metadata"]
        try:
            await self._client.patch_status(
                POD, metadata["name"], patch, namespace=metadata["namespace"], patch_type=patch_type
            )
        except NotFound:
            return True
        except KubeError as error:
            logger.warning("cannot write the status of Pod %s: %s", metadata["name"], error)
            return False
        return True

    async def write_readiness(self, running: RunningPod, *, ready: bool) -> bool:
        """Set the Pod's Ready and ContainersReady conditions; False when it could not."""
        status = "True" if ready else "False"
        now = format_time(datetime.datetime.now(datetime.UTC))
        patch = {
            "status": {
                "conditions": [
                    {"type": kind, "status": status, "lastTransitionTime": now}
                    for kind in ("Ready", "ContainersReady")
                ],
                "containerStatuses": container_statuses(running, ready=ready),
            }
        }
        return await self.patch(running.pod, patch, patch_type=PatchType.STRATEGIC)

    async def write_init_statuses(
        self, pod: Pod, *, failed: tuple[str, int, int] | None, phase: str | None = None
    ) -> bool:
        """The Pod's `initContainerStatuses` and `Initialized` condition: `failed` (name, exit
        code, restarts) terminated with `Error`, or (None) every one `Completed`."""
        now = format_time(datetime.datetime.now(datetime.UTC))
        statuses: list[dict[str, Any]] = []
        for written in (pod.get("status") or {}).get("initContainerStatuses") or ():
            entry: dict[str, Any] = dict(written)
            if failed is None or entry.get("name") == failed[0]:
                code = 0 if failed is None else failed[1]
                entry["ready"] = failed is None
                if failed is not None:
                    entry["restartCount"] = failed[2]
                entry["state"] = {"terminated": terminated(code, started=now, finished=now)}
            statuses.append(entry)
        initialized = {
            "type": "Initialized",
            "status": "True" if failed is None else "False",
            "lastTransitionTime": now,
        }
        if failed is not None:
            initialized["reason"] = "ContainersNotInitialized"
            initialized["message"] = f"containers with incomplete status: [{failed[0]}]"
        status: dict[str, Any] = {"initContainerStatuses": statuses, "conditions": [initialized]}
        if phase is not None:
            status["phase"] = phase
        return await self.patch(pod, {"status": status}, patch_type=PatchType.STRATEGIC)

    async def write_terminal_phase(self, running: RunningPod, code: int) -> bool:
        """Write the submitter Pod's terminal phase, as its kubelet would; False to retry."""
        containers = running.pod.get("spec", {}).get("containers") or ()
        started = running.pod.get("status", {}).get("startTime")
        finished = format_time(datetime.datetime.now(datetime.UTC))
        state = terminated(code, started=started or finished, finished=finished)
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": container.get("name", ""),
                    "image": container.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"terminated": state},
                }
                for container in containers
            ],
        }
        return await self.patch(running.pod, {"status": status})


def container_statuses(running: RunningPod, *, ready: bool) -> list[dict[str, Any]]:
    """The Pod's `containerStatuses` with each container's `ready`, and an ended SidecarMode
    submitter's `terminated` state (never taken back by a later write from an older list)."""
    statuses: list[dict[str, Any]] = []
    for written in (running.pod.get("status") or {}).get("containerStatuses") or ():
        entry: dict[str, Any] = {**written, "ready": ready}
        if running.sidecar_ended is not None and entry.get("name") == SUBMITTER_CONTAINER_NAME:
            entry.update(ready=False, started=False, state={"terminated": running.sidecar_ended})
        statuses.append(entry)
    return statuses


def terminated(code: int, *, started: str, finished: str) -> dict[str, Any]:
    """A container's `terminated` state as a kubelet writes it for an exit code."""
    return {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started,
        "finishedAt": finished,
    }


def restarts_after(pod: Pod, code: int) -> bool:
    """Whether a kubelet would restart the Pod's container after it exited with `code`."""
    policy = pod.get("spec", {}).get("restartPolicy") or "Always"
    return policy == "Always" or (policy == "OnFailure" and code != 0)
