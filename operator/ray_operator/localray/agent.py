"""The local Ray agent: a kubelet for Ray, run by `ray-operator dev` beside the operator.

Every `poll_interval` it lists the Pods bound to the fake node (in the namespaces the operator
serves) and keeps one local process per Pod that should have one (level-triggered, like the
reconcilers: a missed change is seen on the next list, an API server that is away only delays it).
Only Pods the operator created qualify (`scope.py`: the controllers' client records each Pod and
Job it creates, `recording_creations`); any other Pod on the node gets one Warning Event and no
process, whatever its labels and owner references say:

- a head Pod of a RayCluster: `ray start --head` on the cluster's loopback address, entered at
  once in the registry the operator's dashboard resolver reads; once its GCS accepts
  connections, its autoscaler sidecar (if the Pod has one) runs as `ray kuberay-autoscaler`;
  a SidecarMode RayJob's head also runs its submitter container then (its loopback addresses
  of the Pod's ports pointed at the head's local ones), and its end is written into the Pod's
  `containerStatuses` as a kubelet writes it, which is how the RayJob controller learns it;
- a worker Pod: `ray start --address=<that head's GCS>`, started once the head's GCS is up (and
  again, against the new head, when the head is replaced);
- a RayJob submitter Pod (K8sJobMode) of a Job the operator created, holding that Job's
  template: its command, pointed at the local dashboard; when it ends
  the agent writes the Pod's terminal phase, which KWOK leaves to it (see
  `LocalControlPlane(ray_job_submitters_run_locally=True)`);
- a Pod of the Redis image running `redis-server` (the GCS fault-tolerance samples' Redis,
  whoever created it): this machine's `redis-server` with the agent's own config (`redis.py`
  says why that is safe), and a head whose Redis address names its Service is pointed at it;
- a Redis cleanup Job's Pod (a deleted GCS FT cluster's, of a Job the operator created, holding
  that Job's template): its command, pointed at that local Redis; its end written as for a
  submitter, so the Job completes and the cluster's finalizer goes.

A head or worker Pod's init containers of a Ray image run first, one after another, each to
completion in the Pod's sandbox (its volumes, so an emptyDir one fills is what the Ray node
reads); one that fails is run again after the restart backoff (`LocalRayInitContainerFailed`,
its `initContainerStatuses` entry terminated with its exit code, as a kubelet shows `Init:Error`),
and the Ray node does not start until all have succeeded.

A Ray node's Pod turns Ready when its node serves (a worker: once the GCS counts its raylet
alive), as a kubelet's readiness probe would make it.
A Pod that is deleted (or ends) has its process group stopped and its files removed. Caps on
clusters and nodes keep a few samples from taking the machine's memory; a Pod over a cap gets a
Warning Event saying which flag to raise, and starts as soon as room is made. When the agent
stops (Ctrl-C on `make run`), every process it started is stopped first.

Its parts: `ray_nodes.py` (heads and workers, Ready), `init_containers.py`,
`sidecar_submitter.py`, `job_pods.py` (submitters and Redis cleanups), `redis.py` (local Redis
servers), `pod_status.py` (the status a kubelet would write), `running.py` (what is kept of a
running Pod), `agent_context.py` (what they share: options, Events, backoff, a Pod's process and
sandbox view) and `registry.py` (what the agent shares with the controllers). This module runs
the passes, reports ends and restarts, stops, and answers the kubelet endpoint (`LocalPods`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ray_operator.builders.rayjob import SUBMITTER_CONTAINER_NAME
from ray_operator.localray.agent_context import (
    AgentContext,
    LocalRayOptions,
    ray_beside_this_python,
    remove_paths,
)
from ray_operator.localray.init_containers import InitContainers
from ray_operator.localray.job_pods import JobPods
from ray_operator.localray.plan import (
    is_ray_job_submitter_pod,
    is_ray_node_pod,
    is_redis_cleanup_pod,
)
from ray_operator.localray.pod_status import restarts_after
from ray_operator.localray.ray_nodes import RayNodes
from ray_operator.localray.registry import (
    LocalCluster,
    LocalRayRegistry,
    LocalRayResolver,
    recording_creations,
)
from ray_operator.localray.running import RunningPod, is_head, local_container, pod_ports
from ray_operator.localray.sidecar_submitter import SidecarSubmitters
from ray_operator.localray.views import LocalContainer
from ray_operator.runtime.client import KubeClient, PatchType
from ray_operator.runtime.errors import KubeError
from ray_operator.runtime.events import EventRecorder
from ray_operator.runtime.store import StoreView
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import JOB, POD

if TYPE_CHECKING:
    from ray_io.v1_views import Pod

    from ray_operator.components import ComponentContext

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]


class LocalRayAgent:
    """Keeps one local process per Pod on the fake node that should run one."""

    def __init__(
        self,
        *,
        client: KubeClient,
        store: StoreView,
        events: EventRecorder,
        registry: LocalRayRegistry,
        options: LocalRayOptions,
        base_env: Mapping[str, str] | None = None,
        namespaces: Sequence[str] = (),
    ) -> None:
        self._client = client
        # The operator's `--namespace`s (empty: all): no Pod elsewhere is even looked at.
        self._namespaces: tuple[str | None, ...] = tuple(namespaces) or (None,)
        self._context = AgentContext(
            client=client,
            store=store,
            events=events,
            registry=registry,
            options=options,
            base_env=base_env,
        )
        self._inits = InitContainers(self._context)
        self._sidecars = SidecarSubmitters(self._context)
        self._nodes = RayNodes(
            self._context, inits=self._inits, sidecars=self._sidecars, stop=self._stop
        )
        self._jobs = JobPods(self._context)

    async def run(self) -> NoReturn:
        """Poll the fake node's Pods until cancelled; then stop every process."""
        ended = self._context.records.end_leftovers()
        if ended:
            logger.warning("ended %d local Ray process groups left by an earlier run", ended)
        listing_failed = False
        try:
            while True:
                try:
                    pods = await self._list_node_pods()
                except KubeError as error:
                    if not listing_failed:
                        logger.warning("local Ray agent cannot list Pods (will retry): %s", error)
                    listing_failed = True
                else:
                    listing_failed = False
                    await self.sync(pods)
                    self._forget_what_is_gone(pods)
                await asyncio.sleep(self._context.options.poll_interval)
        finally:
            await asyncio.shield(self.stop_all())
            # What the stops told (LocalRayStopped, ...) is still queued: write it before going.
            await asyncio.shield(self._context.close_events())

    async def _list_node_pods(self) -> list[Pod]:
        """The fake node's Pods in the namespaces the operator serves."""
        pods: list[Pod] = []
        for namespace in self._namespaces:
            listed = await self._client.list(
                POD,
                namespace=namespace,
                field_selector=f"spec.nodeName={self._context.options.node_name}",
            )
            # As in the cache: the API server validated them against the views' schema.
            pods += cast("list[Pod]", listed.items)
        return pods

    def _forget_what_is_gone(self, listed: Sequence[Pod]) -> None:
        """Let the record of created Pods and Jobs forget objects long gone from the cache."""
        present = {str(obj["metadata"].get("uid")) for obj in listed}
        for kind in (POD, JOB):
            present.update(
                str(obj["metadata"].get("uid")) for obj in self._context.store.list(kind)
            )
        self._context.registry.created.forget_missing(present)

    async def sync(self, pods: Sequence[Pod]) -> None:
        """One pass: stop what lost its Pod, report what ended, start what is missing."""
        wanted = {pod["metadata"]["uid"]: pod for pod in pods if _wants_process(pod)}
        listed = {pod["metadata"]["uid"] for pod in pods}
        # A Pod told about (refused, over a cap) or checked and gone since: its entries go too.
        self._context.told = {told for told in self._context.told if told[0] in listed}
        self._context.restarts = {
            uid: r for uid, r in self._context.restarts.items() if uid in listed
        }
        self._jobs.forget_all_but(listed)
        for uid, running in self._context.running.items():
            running.pod = wanted.get(uid, running.pod)  # its status as now written
        # Concurrently: each stop may wait out a grace period.
        await asyncio.gather(
            *(self._stop(uid) for uid in list(self._context.running) if uid not in wanted)
        )
        gone = [
            uid
            for uid in self._inits.pod_uids()
            if uid not in wanted and uid not in self._context.running
        ]
        await asyncio.gather(*(self._inits.stop(uid, remove_files=True) for uid in gone))
        await self._context.redis.sync(pods)  # before the heads, which may wait for their Redis
        await self._nodes.check_heads()
        await self._nodes.mark_ready()
        await self._report_ended()
        for pod in wanted.values():
            if is_ray_node_pod(pod) and _node_type(pod) == names.HEAD_NODE:
                await self._for_pod(pod, self._nodes.ensure_head)
        for pod in wanted.values():
            if is_ray_node_pod(pod) and _node_type(pod) == names.WORKER_NODE:
                await self._for_pod(pod, self._nodes.ensure_worker)
            elif is_ray_job_submitter_pod(pod):
                await self._for_pod(pod, self._jobs.ensure_submitter)
            elif is_redis_cleanup_pod(pod):
                await self._for_pod(pod, self._jobs.ensure_redis_cleanup)

    async def _for_pod(self, pod: Pod, step: Callable[[Pod], Coroutine[Any, Any, None]]) -> None:
        """Run one Pod's step; a failure (an API call that timed out, a process that could not
        be started) is logged and retried on the next pass, never the end of the operator."""
        try:
            await step(pod)
        except (KubeError, OSError) as error:
            metadata = pod["metadata"]
            message = f"no local process yet: {error} (tried again every pass)"
            told = self._context.tell_once(pod, "LocalRayStartFailed", message)
            # Once per Pod at WARNING: a lasting failure must not flood the log every second.
            logger.log(
                logging.WARNING if told else logging.DEBUG,
                "local Ray: %s/%s: %s",
                metadata["namespace"],
                metadata["name"],
                message,
            )

    async def stop_all(self) -> None:
        """Stop every process the agent started (workers first, heads last)."""
        await asyncio.gather(
            *(self._inits.stop(uid, remove_files=True) for uid in self._inits.pod_uids())
        )
        heads = {uid for uid, running in self._context.running.items() if is_head(running)}
        await asyncio.gather(
            *(self._stop(uid) for uid in list(self._context.running) if uid not in heads)
        )
        await asyncio.gather(*(self._stop(uid) for uid in heads))
        await self._context.redis.stop_all()

    # -- ends and stops -------------------------------------------------------------------------

    async def _report_ended(self) -> None:
        # A copy: a node that restarts leaves `_running` on the way.
        for running in list(self._context.running.values()):
            autoscaler = running.autoscaler
            if autoscaler is not None and autoscaler.returncode is not None:
                self._context.tell_once(
                    running.pod,
                    "LocalRayAutoscalerEnded",
                    f"Ray's autoscaler ended with exit code {autoscaler.returncode}; the cluster "
                    f"no longer scales. Last lines of {autoscaler.log_path}:\n" + autoscaler.tail(),
                )
            await self._sidecars.report_ended(running)
            code = running.process.returncode
            if code is None or running.ended_reported:
                continue
            if running.plan is None:
                running.ended_reported = await self._context.status.write_terminal_phase(
                    running, code
                )
                continue
            running.ended_reported = True
            await self._context.status.write_readiness(running, ready=False)
            if restarts_after(running.pod, code):
                await self._restart_later(running, code)
                continue
            self._context.record(
                running.pod,
                reason="LocalRayProcessEnded",
                message=f"the local Ray process ended with exit code {code}; delete the Pod to "
                f"start it again. Last lines of {running.process.log_path}:\n"
                + running.process.tail(),
                type="Warning",
            )

    async def _restart_later(self, running: RunningPod, code: int) -> None:
        """Stop what is left of an ended Ray node; its Pod starts again after a backoff.

        A kubelet restarts a container whose Pod says restartPolicy Always (KubeRay's default)
        or OnFailure, and KubeRay counts on it: `ray start` exits when its raylet does not
        register with the GCS within Ray's fixed 30 s, which a loaded machine can take."""
        pod = running.pod
        uid = pod["metadata"]["uid"]
        count, delay = self._context.back_off(uid)
        count -= 1
        tail, log_path = running.process.tail(), running.process.log_path
        await self._stop(uid)
        containers = (pod.get("status") or {}).get("containerStatuses") or ()
        counted = [{**entry, "restartCount": count + 1} for entry in containers[:1]]
        if counted:
            patch = {"status": {"containerStatuses": [*counted, *containers[1:]]}}
            await self._context.status.patch(pod, patch, patch_type=PatchType.STRATEGIC)
        policy = pod.get("spec", {}).get("restartPolicy") or "Always"
        self._context.record(
            pod,
            reason="LocalRayRestarting",
            message=f"the local Ray process ended with exit code {code}; starting it again in "
            f"{delay:g}s (restart {count + 1}), as a kubelet restarts the container of a Pod "
            f"with restartPolicy {policy}. Last lines of {log_path}:\n" + tail,
            type="Warning",
        )

    async def _stop(self, uid: str) -> None:
        """Stop a Pod's processes (its init containers' too), forget it and remove its files."""
        await self._inits.stop(uid)  # the Pod's files go: its init containers run again
        running = self._context.running.pop(uid, None)
        if running is None:
            return
        for sidecar in (running.autoscaler, running.sidecar):
            if sidecar is not None:
                await sidecar.stop()
        await running.process.stop()
        plan = running.plan
        if plan is not None and plan.is_head:
            self._context.registry.remove(plan.namespace, plan.cluster, head_uid=uid)
        self._context.told = {told for told in self._context.told if told[0] != uid}
        await asyncio.to_thread(remove_paths, running.files, running.temp_dir)

    # -- what others see of the Pods it runs (LocalPods, for the kubelet endpoint) -------------

    def container(self, namespace: str, pod: str, container: str | None) -> LocalContainer | None:
        """`LocalPods`: the named container of a Pod the agent runs (None: the Pod's first): a
        Ray node's, an init container's, a submitter's or a local Redis'."""
        if container is not None and (init := self._inits.container(namespace, pod, container)):
            return init
        running = self._running_pod(namespace, pod)
        if running is None:
            return self._context.redis.container(namespace, pod, container)
        if running.view is None:
            return None
        containers: Sequence[Object] = running.pod.get("spec", {}).get("containers") or [{}]
        first = str(containers[0].get("name") or "")
        if container is None or container == first:
            process, view = running.process, running.view
            alive = process.returncode is None
            return local_container(
                running.pod,
                first,
                process,
                working_dir=view.working_dir,
                namespace_pid=process.pid if view.spec_path is not None and alive else None,
                ports=pod_ports(running),
            )
        if container == SUBMITTER_CONTAINER_NAME and running.sidecar is not None:
            return local_container(
                running.pod, container, running.sidecar, working_dir=str(running.files)
            )
        autoscaler = running.autoscaler
        if container == names.AUTOSCALER_CONTAINER_NAME and autoscaler is not None:
            return local_container(
                running.pod, container, autoscaler, working_dir=str(running.files)
            )
        return None

    def pod_port(self, namespace: str, pod: str, port: int) -> tuple[str, int] | None:
        """`LocalPods`: where a Pod port of a Pod the agent runs (Ray or Redis) listens here."""
        running = self._running_pod(namespace, pod)
        if running is None:
            return self._context.redis.pod_port(namespace, pod, port)
        if running.process.returncode is not None:
            return None
        return pod_ports(running).get(port)

    def _running_pod(self, namespace: str, pod: str) -> RunningPod | None:
        for running in self._context.running.values():
            metadata = running.pod["metadata"]
            if metadata.get("namespace") == namespace and metadata.get("name") == pod:
                return running
        return None


def _wants_process(pod: Pod) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    if is_ray_job_submitter_pod(pod) or is_redis_cleanup_pod(pod):
        return True  # also once it ended: its end is the agent's to write, then it stays put
    return is_ray_node_pod(pod) and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _node_type(pod: Pod) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(names.NODE_TYPE_LABEL, ""))


def local_ray_component(
    *, registry: LocalRayRegistry, options: LocalRayOptions
) -> Callable[[ComponentContext], LocalRayAgent]:
    """The component factory `app.run(..., components=[...])` takes."""

    def build(context: ComponentContext) -> LocalRayAgent:
        events = EventRecorder(context.client, metrics=context.metrics, instance="local-ray-agent")
        return LocalRayAgent(
            client=context.client,
            store=context.store,
            events=events,
            registry=registry,
            options=options,
            namespaces=context.settings.namespaces,
        )

    return build


__all__ = [
    "LocalCluster",
    "LocalRayAgent",
    "LocalRayOptions",
    "LocalRayRegistry",
    "LocalRayResolver",
    "local_ray_component",
    "ray_beside_this_python",
    "recording_creations",
]
