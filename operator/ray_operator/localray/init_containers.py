"""A Ray node Pod's init containers, run by the local Ray agent before its Ray node: one after
another, each to completion in the Pod's sandbox (its volumes, so an emptyDir one fills is what
the Ray node reads). One that fails is run again after the restart backoff
(`LocalRayInitContainerFailed`, its `initContainerStatuses` entry terminated with its exit code,
as a kubelet shows `Init:Error`), or fails the Pod under restartPolicy Never; the Ray node does
not start until all have succeeded."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ray_operator.localray.agent_context import AgentContext, remove_paths
from ray_operator.localray.plan import (
    ContainerPlan,
    UnplannablePodError,
    plan_init_containers,
    without_agent_owned,
)
from ray_operator.localray.processes import LocalProcess
from ray_operator.localray.running import local_container
from ray_operator.localray.views import LocalContainer
from ray_operator.spec import kuberay_names as names

if TYPE_CHECKING:
    from ray_io.v1_views import Pod


@dataclass(slots=True)
class InitRun:
    """A Pod's init containers, run one after another before its Ray node."""

    pod: Pod
    plans: tuple[ContainerPlan, ...]
    next: int = 0
    """The index of the init container running or to run next."""
    process: LocalProcess | None = None
    finished: dict[str, LocalProcess] = field(default_factory=dict)
    failed: bool = False
    """Whether one failed on the way (its status then says so until it succeeds)."""
    failed_for_good: tuple[str, int, int] | None = None
    """(name, exit code, restarts) of the one whose failure fails the Pod (restartPolicy Never)."""
    failure_written: bool = False


class InitContainers:
    """The init containers of the Pods on the fake node, by Pod uid."""

    def __init__(self, context: AgentContext) -> None:
        self._context = context
        self._runs: dict[str, InitRun] = {}

    def pod_uids(self) -> list[str]:
        """The Pods whose init containers run or ran."""
        return list(self._runs)

    def forget(self, uid: str) -> None:
        """Forget a Pod's runs (its volumes went: its init containers run again)."""
        self._runs.pop(uid, None)

    async def initialized(self, pod: Pod, *, address: str) -> bool:
        """Whether the Pod's init containers have all succeeded; else the next one is started
        (or the one that failed, once its backoff is over). `address`: the cluster's."""
        uid = pod["metadata"]["uid"]
        run = self._runs.get(uid)
        if run is None:
            try:
                plan = plan_init_containers(pod)
            except UnplannablePodError as error:
                self._context.tell_once(
                    pod, "LocalRayUnplannable", f"no local Ray process: {error}"
                )
                return False
            if plan.not_run:
                self._context.tell_once(
                    pod,
                    "LocalRayInitContainersNotRun",
                    "init containers not run locally: " + ", ".join(plan.not_run),
                )
            run = self._runs[uid] = InitRun(pod=pod, plans=plan.run)
        run.pod = pod
        if run.failed_for_good is not None:
            if not run.failure_written:  # as a kubelet: the Pod fails, nothing runs again
                run.failure_written = await self._context.status.write_init_statuses(
                    pod, failed=run.failed_for_good, phase="Failed"
                )
            return False
        while run.next < len(run.plans):
            init = run.plans[run.next]
            if run.process is None:
                run.process = await self._start(pod, init, address=address)
                return False
            code = run.process.returncode
            if code is None:
                return False
            process, run.process = run.process, None
            await process.stop()  # what it left running in its group, and its record
            if code != 0:
                await self._failed(run, init, process, code)
                return False
            run.finished[init.name] = process
            run.next += 1
        if run.failed:
            run.failed = not await self._context.status.write_init_statuses(pod, failed=None)
        return True

    async def _start(self, pod: Pod, init: ContainerPlan, *, address: str) -> LocalProcess | None:
        """The init container's process in the Pod's sandbox; None when its view cannot be made
        (told, tried again next pass)."""
        files = self._context.pod_directory(pod)
        view = await self._context.prepare_view(
            pod, files, pod_ip=address, argv=init.argv, other=init
        )
        if view is None:
            return None
        env = {
            **self._context.base_env,
            **{
                name: view.localised(value) for name, value in without_agent_owned(view.env).items()
            },
            # The head's address, as the operator gives every init container (its Service's
            # name there): here, the cluster's loopback address.
            names.ENV_RAY_IP: address,
            names.ENV_FQ_RAY_IP: address,
        }
        argv = [view.localised(word) for word in init.argv]
        log_path = self._log_path(pod, init.name)
        process = self._context.process_for(
            view, argv, env=env, files=files, pod=pod, log_path=log_path
        )
        await process.start()
        return process

    async def _failed(
        self, run: InitRun, init: ContainerPlan, process: LocalProcess, code: int
    ) -> None:
        """Tell a failed init container, as a kubelet does: its status says `Error` with its
        exit code; it runs again after the restart backoff, or the Pod fails (restartPolicy
        Never)."""
        pod, uid = run.pod, run.pod["metadata"]["uid"]
        run.failed = True
        tail = process.tail()
        if pod.get("spec", {}).get("restartPolicy") == "Never":
            run.failed_for_good = (init.name, code, 0)
            run.failure_written = await self._context.status.write_init_statuses(
                pod, failed=run.failed_for_good, phase="Failed"
            )
            again = "the Pod fails, as a kubelet fails it (restartPolicy Never)"
        else:
            count, delay = self._context.back_off(uid)
            await self._context.status.write_init_statuses(pod, failed=(init.name, code, count))
            again = f"it runs again in {delay:g}s (restart {count})"
        self._context.record(
            pod,
            reason="LocalRayInitContainerFailed",
            message=f"init container {init.name} ended with exit code {code}, so the Ray "
            f"container does not start; {again}. Last lines of {process.log_path}:\n" + tail,
            type="Warning",
        )

    async def stop(self, uid: str, *, remove_files: bool = False) -> None:
        """Forget a Pod's init containers (ending the one running); `remove_files`: and the
        Pod's files, for a Pod gone before its Ray node started."""
        run = self._runs.pop(uid, None)
        if run is None:
            return
        if run.process is not None:
            await run.process.stop()
        if remove_files:
            await asyncio.to_thread(remove_paths, self._context.pod_directory(run.pod))

    def container(self, namespace: str, pod: str, name: str) -> LocalContainer | None:
        """`LocalPods`: an init container the agent runs or ran for a Pod (its log)."""
        for run in self._runs.values():
            metadata = run.pod["metadata"]
            if metadata.get("namespace") != namespace or metadata.get("name") != pod:
                continue
            process = run.finished.get(name)
            if process is None and run.process is not None and run.next < len(run.plans):
                process = run.process if run.plans[run.next].name == name else None
            if process is None:
                return None
            alive = process.returncode is None
            return local_container(
                run.pod,
                name,
                process,
                working_dir=str(self._context.pod_directory(run.pod)),
                namespace_pid=process.pid if alive else None,
            )
        return None

    def _log_path(self, pod: Pod, name: str) -> Path:
        return self._context.log_path(pod).with_suffix(f".init-{name}.log")
