"""A SidecarMode RayJob's submitter container, run by the local Ray agent beside the head's Ray
node once its GCS is up, in the head Pod's sandbox, its loopback addresses of the Pod's ports
pointed at the head's local ones. Its end is written into the Pod's `containerStatuses` as a
kubelet writes it, which is how the RayJob controller learns it."""

from __future__ import annotations

import datetime

from ray_operator.builders.rayjob import SUBMITTER_CONTAINER_NAME
from ray_operator.localray.agent_context import AgentContext
from ray_operator.localray.plan import (
    plan_sidecar_submitter,
    pointed_at_pod_ports,
    without_agent_owned,
)
from ray_operator.localray.pod_status import container_statuses, terminated
from ray_operator.localray.running import RunningPod, pod_ports
from ray_operator.runtime.client import PatchType
from ray_operator.spec.times import format_time


class SidecarSubmitters:
    """The submitter containers of SidecarMode RayJobs' heads."""

    def __init__(self, context: AgentContext) -> None:
        self._context = context

    async def start(self, head: RunningPod) -> None:
        """The head Pod's submitter container, once its GCS is up (its command waits for the
        dashboard itself), in the Pod's sandbox, its loopback addresses of the Pod's ports
        pointed at the head's local ones."""
        plan = plan_sidecar_submitter(head.pod)
        if plan is None or head.sidecar is not None:
            return
        ports = pod_ports(head)

        def local(text: str) -> str:
            return pointed_at_pod_ports(text, ports)

        argv = [local(word) for word in plan.argv]
        view = await self._context.prepare_view(
            head.pod, head.files, pod_ip=head.address, argv=argv, other=plan
        )
        if view is None:
            return
        env = {
            **self._context.base_env,
            **{
                name: view.localised(local(value))
                for name, value in without_agent_owned(view.env).items()
            },
        }
        argv = [view.localised(word) for word in argv]
        log_path = self._context.log_path(head.pod).with_suffix(f".{plan.name}.log")
        process = self._context.process_for(
            view, argv, env=env, files=head.files, pod=head.pod, log_path=log_path
        )
        if not await self._context.started(
            process, head.pod, "LocalRayStartFailed", "the submitter container"
        ):
            return
        head.sidecar = process
        head.sidecar_started = format_time(datetime.datetime.now(datetime.UTC))
        self._context.record(
            head.pod,
            reason="LocalRaySubmitterStarted",
            message=f"the {plan.name} container runs locally beside the head; its output: "
            f"{log_path}",
        )

    async def report_ended(self, head: RunningPod) -> None:
        """Write the submitter container's end into the Pod's `containerStatuses`, as its
        kubelet would: the RayJob controller reads its exit code there."""
        process = head.sidecar
        if process is None or process.returncode is None or head.sidecar_ended is not None:
            return
        code = process.returncode
        now = format_time(datetime.datetime.now(datetime.UTC))
        head.sidecar_ended = terminated(code, started=head.sidecar_started or now, finished=now)
        ready = head.ready_reported and head.process.returncode is None
        patch = {"status": {"containerStatuses": container_statuses(head, ready=ready)}}
        if not await self._context.status.patch(head.pod, patch, patch_type=PatchType.STRATEGIC):
            head.sidecar_ended = None  # written on the next pass
            return
        self._context.record(
            head.pod,
            reason="LocalRaySubmitterEnded",
            message=f"the {SUBMITTER_CONTAINER_NAME} container ended with exit code {code}. Last "
            f"lines of {process.log_path}:\n" + process.tail(),
            type="Normal" if code == 0 else "Warning",
        )
