"""Ray heads and workers on this machine: the local Ray agent's part that turns a RayCluster's
head or worker Pod into `ray start`.

A head runs `ray start --head` on its cluster's loopback address and is entered at once in the
registry the operator's dashboard resolver reads; once its GCS accepts connections, its
autoscaler sidecar (if the Pod has one) runs as `ray kuberay-autoscaler`, and a SidecarMode
RayJob's submitter (`sidecar_submitter.py`) starts. A worker runs `ray start --address=<that
head's GCS>` once the head's GCS is up (and again, against the new head, when the head is
replaced). Both wait for their init containers (`init_containers.py`) and the caps on clusters
and nodes. A node's Pod turns Ready when its node serves (a worker: once the GCS counts its
raylet alive), as a kubelet's readiness probe would make it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ray_operator.localcluster.ports import reserve_ports
from ray_operator.localray.agent_context import AgentContext, remove_paths
from ray_operator.localray.init_containers import InitContainers
from ray_operator.localray.plan import (
    SERVE_PROXY_PORT,
    NodePlan,
    NodePorts,
    UnplannablePodError,
    autoscaler_argv,
    autoscaler_env,
    cluster_address,
    node_env,
    plan_node,
    plan_sidecar_submitter,
    ray_start_argv,
    shape_summary,
    without_agent_owned,
)
from ray_operator.localray.probing import first_answer_line
from ray_operator.localray.processes import LocalProcess
from ray_operator.localray.redis import HeadRedis
from ray_operator.localray.registry import LocalCluster
from ray_operator.localray.running import RunningPod
from ray_operator.localray.sidecar_submitter import SidecarSubmitters
from ray_operator.spec import kuberay_names as names

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

RAYLET_HEALTH_PATH = "/api/local_raylet_healthz"
"""The dashboard agent's check that its raylet is alive in the GCS (KubeRay's worker probe)."""

# The whole agent logs under one name, as before it was split into modules.
logger = logging.getLogger("ray_operator.localray.agent")


class RayNodes:
    """Starts the Ray heads and workers of the Pods on the fake node and marks them Ready."""

    def __init__(
        self,
        context: AgentContext,
        *,
        inits: InitContainers,
        sidecars: SidecarSubmitters,
        stop: Callable[[str], Awaitable[None]],
    ) -> None:
        """`stop`: the agent's stop of a Pod's processes (a worker whose head was replaced)."""
        self._context = context
        self._inits = inits
        self._sidecars = sidecars
        self._stop = stop

    async def ensure_head(self, pod: Pod) -> None:
        """Start a head Pod's Ray node, once its cluster, the caps, its Redis and its init
        containers allow, and enter it in the registry."""
        uid = pod["metadata"]["uid"]
        if uid in self._context.running or self._context.backing_off(uid):
            return
        cluster = self._context.cluster_of(pod)
        if cluster is None or not self._created_for(pod, cluster):
            return
        if not self._context.has_room(pod, head_of=str(cluster["metadata"].get("uid", ""))):
            return
        plan = self._plan_node(pod, cluster)
        if plan is None:
            return
        redis = await self._context.redis.for_head(pod, plan.env)
        if redis is None:
            return
        address = cluster_address(plan.cluster_uid)
        if not await self._inits.initialized(pod, address=address):
            return
        ports = _pick_ports(head=True)
        running = await self._start_node(
            pod, plan, ports=ports, address=address, gcs=None, redis=redis
        )
        if running is None:
            return
        running.head_uid = uid
        self._context.registry.put(
            plan.namespace,
            plan.cluster,
            LocalCluster(
                address=address, gcs_port=ports.gcs, dashboard_port=ports.dashboard, head_uid=uid
            ),
        )
        message = (
            f"local Ray head of RayCluster {plan.cluster}: dashboard {address}:{ports.dashboard}"
            f", Serve http://{address}:{SERVE_PROXY_PORT} ({shape_summary(plan)})"
        )
        logger.info("%s/%s: %s", plan.namespace, plan.pod, message)
        self._context.record(pod, reason="LocalRayStarted", message=message)

    async def ensure_worker(self, pod: Pod) -> None:
        """Start a worker Pod's Ray node once its head's GCS is up; restart it against a new
        head."""
        uid = pod["metadata"]["uid"]
        if self._context.backing_off(uid):
            return
        head = self._ready_head(pod)
        running = self._context.running.get(uid)
        if running is not None:
            if head is not None and running.head_uid != head.head_uid:
                await self._stop(uid)  # its head was replaced: join the new one
            else:
                return
        if head is None:
            return
        cluster = self._context.cluster_of(pod)
        if cluster is None or not self._created_for(pod, cluster):
            return
        if not self._context.has_room(pod, head_of=None):
            return
        plan = self._plan_node(pod, cluster)
        if plan is None or not await self._inits.initialized(pod, address=head.address):
            return
        running = await self._start_node(
            pod,
            plan,
            ports=_pick_ports(head=False),
            address=head.address,
            gcs=f"{head.address}:{head.gcs_port}",
        )
        if running is None:
            return
        running.head_uid = head.head_uid
        self._context.record(
            pod,
            reason="LocalRayStarted",
            message=f"local Ray worker joined {head.address}:{head.gcs_port} "
            f"({shape_summary(plan)})",
        )

    def _plan_node(self, pod: Pod, cluster: RayCluster) -> NodePlan | None:
        try:
            plan = plan_node(pod, cluster)
        except UnplannablePodError as error:
            self._context.tell_once(pod, "LocalRayUnplannable", f"no local Ray process: {error}")
            return None
        if plan.dropped_params:
            logger.debug(
                "%s/%s: rayStartParams the agent sets itself: %s",
                plan.namespace,
                plan.pod,
                ", ".join(plan.dropped_params),
            )
        return plan

    async def _start_node(
        self,
        pod: Pod,
        plan: NodePlan,
        *,
        ports: NodePorts,
        address: str,
        gcs: str | None,
        redis: HeadRedis | None = None,
    ) -> RunningPod | None:
        """The node's process, started; None when its volumes or env cannot be made (told)."""
        runs_autoscaler = (
            plan.autoscaler_env is not None and self._context.options.kube_access is not None
        )
        sidecar = plan_sidecar_submitter(pod) if plan.is_head else None
        others = [
            name
            for container in (pod.get("spec", {}).get("containers") or [])[1:]
            if not (
                (name := container.get("name", "")) == names.AUTOSCALER_CONTAINER_NAME
                and runs_autoscaler
            )
            and not (sidecar is not None and name == sidecar.name)
        ]
        if others:
            self._context.tell_once(
                pod,
                "LocalRayContainersNotRun",
                f"only the Ray container (and Ray's autoscaler, a SidecarMode RayJob's submitter "
                f"of a Ray image) runs locally, not {', '.join(others)}",
            )
        files = self._context.pod_directory(pod)
        # Short and outside the state directory: Ray's Unix sockets live under it (108 bytes).
        temp_dir = Path(tempfile.mkdtemp(prefix="rayop-"))
        argv = ray_start_argv(
            plan,
            ray=self._context.options.ray_executable,
            node_ip=address,
            ports=ports,
            temp_dir=str(temp_dir),
            gcs_address=gcs,
        )
        argv += redis.flags if redis else ()
        head = None if plan.is_head else self._head_of(pod)
        view = await self._context.prepare_view(
            pod,
            files,
            pod_ip=address,
            argv=argv,
            temp_dir=temp_dir,
            head_temp_dir=None if head is None else head.temp_dir,
        )
        if view is None:
            self._inits.forget(plan.uid)  # its volumes go: its init containers run again
            await asyncio.to_thread(remove_paths, files, temp_dir)
            return None
        plan = dataclasses.replace(plan, env=without_agent_owned(view.env))
        env = node_env(plan, base=self._context.base_env, node_ip=address, ports=ports)
        env = {name: view.localised(value) for name, value in env.items()}
        env.update(redis.env if redis else {})
        try:
            process = self._context.process_for(view, argv, env=env, files=files, pod=pod)
            await process.start()
        except OSError:
            self._inits.forget(plan.uid)
            await asyncio.to_thread(remove_paths, files, temp_dir)
            raise
        running = RunningPod(
            pod=pod,
            process=process,
            files=files,
            temp_dir=temp_dir,
            plan=plan,
            ports=ports,
            address=address,
            view=view,
        )
        self._context.running[plan.uid] = running
        return running

    async def check_heads(self) -> None:
        """Mark heads whose GCS accepts connections: their workers (and a SidecarMode
        submitter) may start now."""
        for running in self._context.running.values():
            if running.plan is None or not running.plan.is_head:
                continue
            if running.gcs_ready:
                if running.sidecar is None and running.process.returncode is None:
                    # Tried again while its view cannot be made.
                    await self._sidecars.start(running)
                continue
            if running.process.returncode is None and running.ports is not None:
                running.gcs_ready = await _accepts(running.address, running.ports.gcs)
                if running.gcs_ready:
                    await self._start_autoscaler(running)
                    await self._sidecars.start(running)

    async def _start_autoscaler(self, head: RunningPod) -> None:
        """The head's autoscaler sidecar, once its GCS is up (it patches the RayCluster's
        replicas from Ray's real demand; the operator and this agent do the rest)."""
        plan, ports = head.plan, head.ports
        if plan is None or ports is None or plan.autoscaler_env is None:
            return
        access = self._context.options.kube_access
        if access is None:
            self._context.tell_once(
                head.pod,
                "LocalRayAutoscalerNotRun",
                "Ray's autoscaler does not run locally: the agent has no client certificate for "
                "this API server (it has one for the embedded control plane of `make run`)",
            )
            return
        env = autoscaler_env(plan, base=self._context.base_env, access=access)
        argv = autoscaler_argv(
            plan,
            ray=self._context.options.ray_executable,
            gcs_address=f"{head.address}:{ports.gcs}",
        )
        log_path = self._context.log_path(head.pod).with_suffix(".autoscaler.log")
        process = LocalProcess(
            argv, env=env, cwd=head.files, log_path=log_path, records=self._context.records
        )
        if await self._context.started(
            process, head.pod, "LocalRayAutoscalerNotRun", "Ray's autoscaler"
        ):
            head.autoscaler = process

    async def mark_ready(self) -> None:
        """Make a node's Pod Ready once its Ray node serves (the head: GCS and dashboard; a
        worker: its raylet, alive in the GCS's view, which KubeRay's readiness probe asks the
        node's dashboard agent), as a kubelet does once the readiness probe passes. A raylet
        that merely listens may not have joined yet: a job submitted then saw one CPU of two."""
        for running in self._context.running.values():
            if running.plan is None or running.ports is None or running.ready_reported:
                continue
            if running.process.returncode is not None:
                continue
            if running.plan.is_head:
                up = running.gcs_ready and await _accepts(running.address, running.ports.dashboard)
            else:
                up = await _answers_ok(
                    running.address, running.ports.dashboard_agent_listen, RAYLET_HEALTH_PATH
                )
            if up:
                running.ready_reported = await self._context.status.write_readiness(
                    running, ready=True
                )

    def _head_of(self, pod: Pod) -> RunningPod | None:
        """The running head of a worker Pod's cluster."""
        found = self._ready_head(pod)
        return None if found is None else self._context.running.get(found.head_uid)

    def _ready_head(self, pod: Pod) -> LocalCluster | None:
        metadata = pod["metadata"]
        cluster_name = (metadata.get("labels") or {}).get(names.CLUSTER_LABEL, "")
        found = self._context.registry.get(metadata.get("namespace", ""), cluster_name)
        if found is None:
            return None
        head = self._context.running.get(found.head_uid)
        if head is None or not head.gcs_ready or head.process.returncode is not None:
            return None
        return found

    def _created_for(self, pod: Pod, cluster: RayCluster) -> bool:
        """Whether this operator created the Pod for `cluster` (refused with an Event if not)."""
        created_for = self._context.registry.created.owner_of("Pod", pod["metadata"]["uid"])
        if created_for is not None and created_for == cluster["metadata"].get("uid"):
            return True
        self._context.refuse(pod, f"RayCluster {cluster['metadata']['name']}")
        return False


_COMMON_PORTS = (
    "node_manager",
    "object_manager",
    "runtime_env_agent",
    "dashboard_agent_grpc",
    "dashboard_agent_listen",
    "metrics_export",
)
_HEAD_PORTS = (*_COMMON_PORTS, "gcs", "dashboard", "client_server")
_WORKER_PORTS = (*_COMMON_PORTS, "serve_worker_proxy")


def _pick_ports(*, head: bool) -> NodePorts:
    port_names = _HEAD_PORTS if head else _WORKER_PORTS
    # Free on every address: Ray binds some of them on all addresses, whatever the node's.
    ports = reserve_ports(len(port_names), host="0.0.0.0")
    return NodePorts(**dict(zip(port_names, ports, strict=True)))


async def _accepts(host: str, port: int) -> bool:
    """Whether `host:port` accepts a connection within a second."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _answers_ok(host: str, port: int, path: str) -> bool:
    """Whether `GET path` on `host:port` answers 200 within a second."""
    request = f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode()
    status_line = await first_answer_line(host, port, request)
    return status_line.split(b" ")[1:2] == [b"200"]
