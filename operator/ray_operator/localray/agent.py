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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import errno
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ray_operator.builders.rayjob import SUBMITTER_CONTAINER_NAME
from ray_operator.dashboard.resolver import DashboardResolver
from ray_operator.localcluster.ports import reserve_ports
from ray_operator.localray.plan import (
    SERVE_PROXY_PORT,
    SERVE_TARGET,
    ContainerPlan,
    KubeAccess,
    NodePlan,
    NodePorts,
    SubmitterPlan,
    UnplannablePodError,
    autoscaler_argv,
    autoscaler_env,
    cluster_address,
    is_ray_job_submitter_pod,
    is_ray_node_pod,
    is_redis_cleanup_pod,
    node_env,
    plan_init_containers,
    plan_node,
    plan_sidecar_submitter,
    plan_submitter,
    pod_port_targets,
    pointed_at_pod_ports,
    ray_start_argv,
    replace_address,
    shape_summary,
    without_agent_owned,
)
from ray_operator.localray.pod_view import PodView, PodViews
from ray_operator.localray.probing import first_answer_line
from ray_operator.localray.processes import LocalProcess, ProcessRecords
from ray_operator.localray.redis import HeadRedis, LocalRedisServers
from ray_operator.localray.redis_plan import RAY_REDIS_ADDRESS_ENV
from ray_operator.localray.sandbox import probe_argv, run_argv
from ray_operator.localray.scope import (
    CreatedObjects,
    controller_of_kind,
    runs_the_template_of,
)
from ray_operator.localray.views import LocalContainer
from ray_operator.localray.volumes import UnmountableVolumeError, UnresolvableEnvError
from ray_operator.runtime.client import KubeClient, PatchType
from ray_operator.runtime.errors import KubeError, NotFound
from ray_operator.runtime.events import EventRecorder, EventType
from ray_operator.runtime.store import StoreView
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import JOB, POD, RAY_CLUSTER, RAY_JOB
from ray_operator.spec.times import format_time

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster


if TYPE_CHECKING:
    from ray_operator.components import ComponentContext
    from ray_operator.runtime.controller import Controller, ControllerContext, ControllerFactory

RAYLET_HEALTH_PATH = "/api/local_raylet_healthz"
"""The dashboard agent's check that its raylet is alive in the GCS (KubeRay's worker probe)."""

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
MAX_RESTART_BACKOFF = 300.0
"""The longest wait before a Ray node that keeps ending starts again (a kubelet's 5 minutes)."""


def ray_beside_this_python() -> str:
    """`ray` of the operator's own environment."""
    return str(Path(sys.executable).parent / "ray")


@dataclass(frozen=True, slots=True)
class LocalRayOptions:
    """How the agent runs (flags of `ray-operator dev`)."""

    directory: Path
    """Logs, copies of mounted ConfigMaps and the record of started processes."""
    node_name: str
    """The fake node whose Pods get processes."""
    max_clusters: int = 4
    """Local Ray clusters at once (a head with its dashboard and Serve is about 1 GiB)."""
    max_nodes: int = 10
    """Local Ray nodes (heads and workers) at once (a worker is 0.3-0.6 GiB)."""
    poll_interval: float = 1.0
    kube_access: KubeAccess | None = None
    """How Ray's autoscaler reaches the API server; None: autoscaling heads run without it."""
    ray_executable: str = field(default_factory=ray_beside_this_python)
    """The `ray` Ray nodes run; entrypoints and runtime environments run with the `python` of
    its directory, as with a Ray image's Python in a cluster."""
    restart_backoff: float = 10.0
    """Seconds before a Ray node that ended starts again, doubling per restart up to
    `MAX_RESTART_BACKOFF`: a kubelet's container restart backoff."""


@dataclass(frozen=True, slots=True)
class LocalCluster:
    """Where a local cluster's head listens."""

    address: str
    gcs_port: int
    dashboard_port: int
    head_uid: str

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.address}:{self.dashboard_port}"

    @property
    def serve_url(self) -> str:
        return f"http://{self.address}:{SERVE_PROXY_PORT}"


class LocalRayRegistry:
    """What the agent and the controllers share: local clusters by `(namespace, cluster name)`
    (written by the agent, read by the dashboard resolver) and `created`, the Pods and Jobs the
    operator created (written by the controllers' client, read by the agent)."""

    def __init__(self, created: CreatedObjects | None = None) -> None:
        self._clusters: dict[tuple[str, str], LocalCluster] = {}
        self.created = created if created is not None else CreatedObjects()

    def get(self, namespace: str, name: str) -> LocalCluster | None:
        return self._clusters.get((namespace, name))

    def put(self, namespace: str, name: str, cluster: LocalCluster) -> None:
        self._clusters[(namespace, name)] = cluster

    def remove(self, namespace: str, name: str, *, head_uid: str) -> None:
        if (found := self._clusters.get((namespace, name))) and found.head_uid == head_uid:
            del self._clusters[(namespace, name)]


class LocalRayResolver:
    """The dashboard and Serve proxy of a local cluster, else whatever `fallback` says."""

    def __init__(self, registry: LocalRayRegistry, *, fallback: DashboardResolver) -> None:
        self._registry = registry
        self._fallback = fallback

    def dashboard_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        found = self._find(cluster)
        return found.dashboard_url if found else self._fallback.dashboard_url(cluster, head_pod)

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        found = self._find(cluster)
        return found.serve_url if found else self._fallback.serve_proxy_url(cluster, head_pod)

    def _find(self, cluster: RayCluster) -> LocalCluster | None:
        metadata = cluster.get("metadata") or {}
        return self._registry.get(metadata.get("namespace", ""), metadata.get("name", ""))


@dataclass(slots=True)
class _Running:
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


@dataclass(slots=True)
class _InitRun:
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
        self._store = store
        self._events = events
        self._registry = registry
        self._options = options
        self._records = ProcessRecords(options.directory / "processes.json")
        self._running: dict[str, _Running] = {}
        self._told: set[tuple[str, str]] = set()
        # Pod uid -> (restarts so far, monotonic time before which it must not start again).
        self._restarts: dict[str, tuple[int, float]] = {}
        self._submitters_checked: dict[str, bool] = {}
        self._inits: dict[str, _InitRun] = {}
        environment = dict(os.environ if base_env is None else base_env)
        bin_dir = str(Path(options.ray_executable).parent)
        environment["PATH"] = os.pathsep.join([bin_dir, environment.get("PATH", "")])
        # As in a container, whose home holds no Ray token: since Ray 2.5x a local `ray.init()`
        # writes ~/.ray/auth_token and every later `ray start` without RAY_AUTH_MODE turns token
        # auth on, so the operator (no token for the cluster) got 401 from local dashboards. A
        # Pod that asks for token auth (spec.authOptions) sets RAY_AUTH_MODE itself.
        environment[names.ENV_RAY_AUTH_MODE] = "disabled"
        self._base_env = environment
        self._redis = LocalRedisServers(
            client=client,
            tell=self._tell_once,
            record=self._record,
            directory=options.directory / "redis",
            log_path=self._log_path,
            records=self._records,
            path=environment["PATH"],
            sandboxed=self._sandboxed,
        )
        self._views = PodViews(client)
        self._sandboxing: bool | None = None
        """Whether Pods get user and mount namespaces of their own (probed once)."""

    async def run(self) -> NoReturn:
        """Poll the fake node's Pods until cancelled; then stop every process."""
        ended = self._records.end_leftovers()
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
                await asyncio.sleep(self._options.poll_interval)
        finally:
            await asyncio.shield(self.stop_all())

    async def _list_node_pods(self) -> list[Pod]:
        """The fake node's Pods in the namespaces the operator serves."""
        pods: list[Pod] = []
        for namespace in self._namespaces:
            listed = await self._client.list(
                POD, namespace=namespace, field_selector=f"spec.nodeName={self._options.node_name}"
            )
            # As in the cache: the API server validated them against the views' schema.
            pods += cast("list[Pod]", listed.items)
        return pods

    def _forget_what_is_gone(self, listed: Sequence[Pod]) -> None:
        """Let the record of created Pods and Jobs forget objects long gone from the cache."""
        present = {str(obj["metadata"].get("uid")) for obj in listed}
        for kind in (POD, JOB):
            present.update(str(obj["metadata"].get("uid")) for obj in self._store.list(kind))
        self._registry.created.forget_missing(present)

    async def sync(self, pods: Sequence[Pod]) -> None:
        """One pass: stop what lost its Pod, report what ended, start what is missing."""
        wanted = {pod["metadata"]["uid"]: pod for pod in pods if _wants_process(pod)}
        listed = {pod["metadata"]["uid"] for pod in pods}
        # A Pod told about (refused, over a cap) or checked and gone since: its entries go too.
        self._told = {told for told in self._told if told[0] in listed}
        self._restarts = {uid: r for uid, r in self._restarts.items() if uid in listed}
        self._submitters_checked = {
            uid: ok for uid, ok in self._submitters_checked.items() if uid in listed
        }
        for uid, running in self._running.items():
            running.pod = wanted.get(uid, running.pod)  # its status as now written
        # Concurrently: each stop may wait out a grace period.
        await asyncio.gather(*(self._stop(uid) for uid in list(self._running) if uid not in wanted))
        gone = [uid for uid in self._inits if uid not in wanted and uid not in self._running]
        await asyncio.gather(*(self._stop_init(uid, remove_files=True) for uid in gone))
        await self._redis.sync(pods)  # before the heads, which may wait for their Redis
        await self._check_heads()
        await self._mark_ready()
        await self._report_ended()
        for pod in wanted.values():
            if is_ray_node_pod(pod) and _node_type(pod) == names.HEAD_NODE:
                await self._for_pod(pod, self._ensure_head)
        for pod in wanted.values():
            if is_ray_node_pod(pod) and _node_type(pod) == names.WORKER_NODE:
                await self._for_pod(pod, self._ensure_worker)
            elif is_ray_job_submitter_pod(pod):
                await self._for_pod(pod, self._ensure_submitter)
            elif is_redis_cleanup_pod(pod):
                await self._for_pod(pod, self._ensure_redis_cleanup)

    async def _for_pod(self, pod: Pod, step: Callable[[Pod], Coroutine[Any, Any, None]]) -> None:
        """Run one Pod's step; a failure (an API call that timed out, a process that could not
        be started) is logged and retried on the next pass, never the end of the operator."""
        try:
            await step(pod)
        except (KubeError, OSError) as error:
            metadata = pod["metadata"]
            message = f"no local process yet: {error} (tried again every pass)"
            told = await self._tell_once(pod, "LocalRayStartFailed", message)
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
            *(self._stop_init(uid, remove_files=True) for uid in list(self._inits))
        )
        heads = {uid for uid, running in self._running.items() if _is_head(running)}
        await asyncio.gather(*(self._stop(uid) for uid in list(self._running) if uid not in heads))
        await asyncio.gather(*(self._stop(uid) for uid in heads))
        await self._redis.stop_all()

    # -- heads and workers ----------------------------------------------------------------------

    async def _ensure_head(self, pod: Pod) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self._running or self._backing_off(uid):
            return
        cluster = self._cluster_of(pod)
        if cluster is None or not await self._created_for(pod, cluster):
            return
        if not await self._has_room(pod, head_of=str(cluster["metadata"].get("uid", ""))):
            return
        plan = await self._plan_node(pod, cluster)
        if plan is None:
            return
        redis = await self._redis.for_head(pod, plan.env)
        if redis is None:
            return
        address = cluster_address(plan.cluster_uid)
        if not await self._initialized(pod, address=address):
            return
        ports = _pick_ports(head=True)
        running = await self._start_node(
            pod, plan, ports=ports, address=address, gcs=None, redis=redis
        )
        if running is None:
            return
        running.head_uid = uid
        self._registry.put(
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
        await self._record(pod, reason="LocalRayStarted", message=message)

    async def _ensure_worker(self, pod: Pod) -> None:
        uid = pod["metadata"]["uid"]
        if self._backing_off(uid):
            return
        head = self._ready_head(pod)
        running = self._running.get(uid)
        if running is not None:
            if head is not None and running.head_uid != head.head_uid:
                await self._stop(uid)  # its head was replaced: join the new one
            else:
                return
        if head is None:
            return
        cluster = self._cluster_of(pod)
        if cluster is None or not await self._created_for(pod, cluster):
            return
        if not await self._has_room(pod, head_of=None):
            return
        plan = await self._plan_node(pod, cluster)
        if plan is None or not await self._initialized(pod, address=head.address):
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
        await self._record(
            pod,
            reason="LocalRayStarted",
            message=f"local Ray worker joined {head.address}:{head.gcs_port} "
            f"({shape_summary(plan)})",
        )

    async def _plan_node(self, pod: Pod, cluster: RayCluster) -> NodePlan | None:
        try:
            plan = plan_node(pod, cluster)
        except UnplannablePodError as error:
            await self._tell_once(pod, "LocalRayUnplannable", f"no local Ray process: {error}")
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
    ) -> _Running | None:
        """The node's process, started; None when its volumes or env cannot be made (told)."""
        runs_autoscaler = plan.autoscaler_env is not None and self._options.kube_access is not None
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
            await self._tell_once(
                pod,
                "LocalRayContainersNotRun",
                f"only the Ray container (and Ray's autoscaler, a SidecarMode RayJob's submitter "
                f"of a Ray image) runs locally, not {', '.join(others)}",
            )
        files = self._pod_directory(pod)
        # Short and outside the state directory: Ray's Unix sockets live under it (108 bytes).
        temp_dir = Path(tempfile.mkdtemp(prefix="rayop-"))
        argv = ray_start_argv(
            plan,
            ray=self._options.ray_executable,
            node_ip=address,
            ports=ports,
            temp_dir=str(temp_dir),
            gcs_address=gcs,
        )
        argv += redis.flags if redis else ()
        head = None if plan.is_head else self._head_of(pod)
        view = await self._prepare_view(
            pod,
            files,
            pod_ip=address,
            argv=argv,
            temp_dir=temp_dir,
            head_temp_dir=None if head is None else head.temp_dir,
        )
        if view is None:
            self._inits.pop(plan.uid, None)  # its volumes go: its init containers run again
            await asyncio.to_thread(_remove_files, files, temp_dir)
            return None
        plan = dataclasses.replace(plan, env=without_agent_owned(view.env))
        env = node_env(plan, base=self._base_env, node_ip=address, ports=ports)
        env = {name: view.localised(value) for name, value in env.items()}
        env.update(redis.env if redis else {})
        try:
            process = self._process_for(view, argv, env=env, files=files, pod=pod)
            await process.start()
        except OSError:
            self._inits.pop(plan.uid, None)
            await asyncio.to_thread(_remove_files, files, temp_dir)
            raise
        running = _Running(
            pod=pod,
            process=process,
            files=files,
            temp_dir=temp_dir,
            plan=plan,
            ports=ports,
            address=address,
            view=view,
        )
        self._running[plan.uid] = running
        return running

    async def _check_heads(self) -> None:
        """Mark heads whose GCS accepts connections: their workers (and a SidecarMode
        submitter) may start now."""
        for running in self._running.values():
            if running.plan is None or not running.plan.is_head:
                continue
            if running.gcs_ready:
                if running.sidecar is None and running.process.returncode is None:
                    # Tried again while its view cannot be made.
                    await self._start_sidecar_submitter(running)
                continue
            if running.process.returncode is None and running.ports is not None:
                running.gcs_ready = await _accepts(running.address, running.ports.gcs)
                if running.gcs_ready:
                    await self._start_autoscaler(running)
                    await self._start_sidecar_submitter(running)

    async def _start_autoscaler(self, head: _Running) -> None:
        """The head's autoscaler sidecar, once its GCS is up (it patches the RayCluster's
        replicas from Ray's real demand; the operator and this agent do the rest)."""
        plan, ports = head.plan, head.ports
        if plan is None or ports is None or plan.autoscaler_env is None:
            return
        access = self._options.kube_access
        if access is None:
            await self._tell_once(
                head.pod,
                "LocalRayAutoscalerNotRun",
                "Ray's autoscaler does not run locally: the agent has no client certificate for "
                "this API server (it has one for the embedded control plane of `make run`)",
            )
            return
        env = autoscaler_env(plan, base=self._base_env, access=access)
        argv = autoscaler_argv(
            plan, ray=self._options.ray_executable, gcs_address=f"{head.address}:{ports.gcs}"
        )
        log_path = self._log_path(head.pod).with_suffix(".autoscaler.log")
        process = LocalProcess(
            argv, env=env, cwd=head.files, log_path=log_path, records=self._records
        )
        if await self._started(process, head.pod, "LocalRayAutoscalerNotRun", "Ray's autoscaler"):
            head.autoscaler = process

    async def _started(self, process: LocalProcess, pod: Pod, reason: str, what: str) -> bool:
        """Start a process beside a Pod's Ray node; False (told once) when it cannot start."""
        try:
            await process.start()
        except OSError as error:
            await self._tell_once(pod, reason, f"{what} could not start: {error}")
            return False
        return True

    async def _mark_ready(self) -> None:
        """Make a node's Pod Ready once its Ray node serves (the head: GCS and dashboard; a
        worker: its raylet, alive in the GCS's view, which KubeRay's readiness probe asks the
        node's dashboard agent), as a kubelet does once the readiness probe passes. A raylet
        that merely listens may not have joined yet: a job submitted then saw one CPU of two."""
        for running in self._running.values():
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
                running.ready_reported = await self._write_readiness(running, ready=True)

    async def _write_readiness(self, running: _Running, *, ready: bool) -> bool:
        """Set the Pod's Ready and ContainersReady conditions; False when it could not."""
        status = "True" if ready else "False"
        now = format_time(datetime.datetime.now(datetime.UTC))
        patch = {
            "status": {
                "conditions": [
                    {"type": kind, "status": status, "lastTransitionTime": now}
                    for kind in ("Ready", "ContainersReady")
                ],
                "containerStatuses": self._container_statuses(running, ready=ready),
            }
        }
        return await self._patch_pod_status(running.pod, patch, patch_type=PatchType.STRATEGIC)

    @staticmethod
    def _container_statuses(running: _Running, *, ready: bool) -> list[dict[str, Any]]:
        """The Pod's `containerStatuses` with each container's `ready`, and an ended SidecarMode
        submitter's `terminated` state (never taken back by a later write from an older list)."""
        statuses: list[dict[str, Any]] = []
        for written in (running.pod.get("status") or {}).get("containerStatuses") or ():
            entry: dict[str, Any] = {**written, "ready": ready}
            if running.sidecar_ended is not None and entry.get("name") == SUBMITTER_CONTAINER_NAME:
                entry.update(
                    ready=False, started=False, state={"terminated": running.sidecar_ended}
                )
            statuses.append(entry)
        return statuses

    async def _patch_pod_status(
        self, pod: Pod, patch: Object, *, patch_type: PatchType = PatchType.MERGE
    ) -> bool:
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

    def _head_of(self, pod: Pod) -> _Running | None:
        """The running head of a worker Pod's cluster."""
        found = self._ready_head(pod)
        return None if found is None else self._running.get(found.head_uid)

    def _ready_head(self, pod: Pod) -> LocalCluster | None:
        metadata = pod["metadata"]
        cluster_name = (metadata.get("labels") or {}).get(names.CLUSTER_LABEL, "")
        found = self._registry.get(metadata.get("namespace", ""), cluster_name)
        if found is None:
            return None
        head = self._running.get(found.head_uid)
        if head is None or not head.gcs_ready or head.process.returncode is not None:
            return None
        return found

    # -- a SidecarMode RayJob's submitter -------------------------------------------------------

    async def _start_sidecar_submitter(self, head: _Running) -> None:
        """The head Pod's submitter container, once its GCS is up (its command waits for the
        dashboard itself), in the Pod's sandbox, its loopback addresses of the Pod's ports
        pointed at the head's local ones."""
        plan = plan_sidecar_submitter(head.pod)
        if plan is None or head.sidecar is not None:
            return
        ports = self._pod_ports(head)

        def local(text: str) -> str:
            return pointed_at_pod_ports(text, ports)

        argv = [local(word) for word in plan.argv]
        view = await self._prepare_view(
            head.pod, head.files, pod_ip=head.address, argv=argv, other=plan
        )
        if view is None:
            return
        env = {
            **self._base_env,
            **{
                name: view.localised(local(value))
                for name, value in without_agent_owned(view.env).items()
            },
        }
        argv = [view.localised(word) for word in argv]
        log_path = self._log_path(head.pod).with_suffix(f".{plan.name}.log")
        process = self._process_for(
            view, argv, env=env, files=head.files, pod=head.pod, log_path=log_path
        )
        if not await self._started(
            process, head.pod, "LocalRayStartFailed", "the submitter container"
        ):
            return
        head.sidecar = process
        head.sidecar_started = format_time(datetime.datetime.now(datetime.UTC))
        await self._record(
            head.pod,
            reason="LocalRaySubmitterStarted",
            message=f"the {plan.name} container runs locally beside the head; its output: "
            f"{log_path}",
        )

    async def _report_sidecar_ended(self, head: _Running) -> None:
        """Write the submitter container's end into the Pod's `containerStatuses`, as its
        kubelet would: the RayJob controller reads its exit code there."""
        process = head.sidecar
        if process is None or process.returncode is None or head.sidecar_ended is not None:
            return
        code = process.returncode
        now = format_time(datetime.datetime.now(datetime.UTC))
        head.sidecar_ended = _terminated(code, started=head.sidecar_started or now, finished=now)
        ready = head.ready_reported and head.process.returncode is None
        patch = {"status": {"containerStatuses": self._container_statuses(head, ready=ready)}}
        if not await self._patch_pod_status(head.pod, patch, patch_type=PatchType.STRATEGIC):
            head.sidecar_ended = None  # written on the next pass
            return
        await self._record(
            head.pod,
            reason="LocalRaySubmitterEnded",
            message=f"the {SUBMITTER_CONTAINER_NAME} container ended with exit code {code}. Last "
            f"lines of {process.log_path}:\n" + process.tail(),
            type="Normal" if code == 0 else "Warning",
        )

    # -- init containers ------------------------------------------------------------------------

    async def _initialized(self, pod: Pod, *, address: str) -> bool:
        """Whether the Pod's init containers have all succeeded; else the next one is started
        (or the one that failed, once its backoff is over). `address`: the cluster's."""
        uid = pod["metadata"]["uid"]
        run = self._inits.get(uid)
        if run is None:
            try:
                plan = plan_init_containers(pod)
            except UnplannablePodError as error:
                await self._tell_once(pod, "LocalRayUnplannable", f"no local Ray process: {error}")
                return False
            if plan.not_run:
                await self._tell_once(
                    pod,
                    "LocalRayInitContainersNotRun",
                    "init containers not run locally: " + ", ".join(plan.not_run),
                )
            run = self._inits[uid] = _InitRun(pod=pod, plans=plan.run)
        run.pod = pod
        if run.failed_for_good is not None:
            if not run.failure_written:  # as a kubelet: the Pod fails, nothing runs again
                run.failure_written = await self._write_init_statuses(
                    pod, failed=run.failed_for_good, phase="Failed"
                )
            return False
        while run.next < len(run.plans):
            init = run.plans[run.next]
            if run.process is None:
                run.process = await self._start_init(pod, init, address=address)
                return False
            code = run.process.returncode
            if code is None:
                return False
            process, run.process = run.process, None
            await process.stop()  # what it left running in its group, and its record
            if code != 0:
                await self._init_failed(run, init, process, code)
                return False
            run.finished[init.name] = process
            run.next += 1
        if run.failed:
            run.failed = not await self._write_init_statuses(pod, failed=None)
        return True

    async def _start_init(
        self, pod: Pod, init: ContainerPlan, *, address: str
    ) -> LocalProcess | None:
        """The init container's process in the Pod's sandbox; None when its view cannot be made
        (told, tried again next pass)."""
        files = self._pod_directory(pod)
        view = await self._prepare_view(pod, files, pod_ip=address, argv=init.argv, other=init)
        if view is None:
            return None
        env = {
            **self._base_env,
            **{
                name: view.localised(value) for name, value in without_agent_owned(view.env).items()
            },
            # The head's address, as the operator gives every init container (its Service's
            # name there): here, the cluster's loopback address.
            names.ENV_RAY_IP: address,
            names.ENV_FQ_RAY_IP: address,
        }
        argv = [view.localised(word) for word in init.argv]
        log_path = self._init_log_path(pod, init.name)
        process = self._process_for(view, argv, env=env, files=files, pod=pod, log_path=log_path)
        await process.start()
        return process

    async def _init_failed(
        self, run: _InitRun, init: ContainerPlan, process: LocalProcess, code: int
    ) -> None:
        """Tell a failed init container, as a kubelet does: its status says `Error` with its
        exit code; it runs again after the restart backoff, or the Pod fails (restartPolicy
        Never)."""
        pod, uid = run.pod, run.pod["metadata"]["uid"]
        run.failed = True
        tail = process.tail()
        if pod.get("spec", {}).get("restartPolicy") == "Never":
            run.failed_for_good = (init.name, code, 0)
            run.failure_written = await self._write_init_statuses(
                pod, failed=run.failed_for_good, phase="Failed"
            )
            again = "the Pod fails, as a kubelet fails it (restartPolicy Never)"
        else:
            count, delay = self._back_off(uid)
            await self._write_init_statuses(pod, failed=(init.name, code, count))
            again = f"it runs again in {delay:g}s (restart {count})"
        await self._record(
            pod,
            reason="LocalRayInitContainerFailed",
            message=f"init container {init.name} ended with exit code {code}, so the Ray "
            f"container does not start; {again}. Last lines of {process.log_path}:\n" + tail,
            type="Warning",
        )

    async def _write_init_statuses(
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
                entry["state"] = {"terminated": _terminated(code, started=now, finished=now)}
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
        return await self._patch_pod_status(pod, {"status": status}, patch_type=PatchType.STRATEGIC)

    async def _stop_init(self, uid: str, *, remove_files: bool = False) -> None:
        """Forget a Pod's init containers (ending the one running); `remove_files`: and the
        Pod's files, for a Pod gone before its Ray node started."""
        run = self._inits.pop(uid, None)
        if run is None:
            return
        if run.process is not None:
            await run.process.stop()
        if remove_files:
            await asyncio.to_thread(_remove_files, self._pod_directory(run.pod))

    def _init_container(self, namespace: str, pod: str, name: str) -> LocalContainer | None:
        """`LocalPods`: an init container the agent runs or ran for a Pod (its log)."""
        for run in self._inits.values():
            metadata = run.pod["metadata"]
            if metadata.get("namespace") != namespace or metadata.get("name") != pod:
                continue
            process = run.finished.get(name)
            if process is None and run.process is not None and run.next < len(run.plans):
                process = run.process if run.plans[run.next].name == name else None
            if process is None:
                return None
            alive = process.returncode is None
            return _local_container(
                run.pod,
                name,
                process,
                working_dir=str(self._pod_directory(run.pod)),
                namespace_pid=process.pid if alive else None,
            )
        return None

    def _init_log_path(self, pod: Pod, name: str) -> Path:
        return self._log_path(pod).with_suffix(f".init-{name}.log")

    # -- RayJob submitters ----------------------------------------------------------------------

    async def _job_pod_to_start(self, pod: Pod) -> SubmitterPlan | None:
        """The command of a Job's Pod that runs but has no local process yet (None: nothing to
        start, or an unplannable Pod, told)."""
        uid = pod["metadata"]["uid"]
        if uid in self._running or (pod.get("status") or {}).get("phase") != "Running":
            return None
        try:
            return plan_submitter(pod)
        except UnplannablePodError as error:
            await self._tell_once(pod, "LocalRayUnplannable", f"no local process: {error}")
            return None

    async def _ensure_submitter(self, pod: Pod) -> None:
        uid = pod["metadata"]["uid"]
        plan = await self._job_pod_to_start(pod)
        if plan is None:
            return
        what = f"RayJob {plan.rayjob}'s submitter Job (with its template)"
        if not await self._is_operators_job_pod(pod, rayjob=plan.rayjob, what=what):
            return
        target = self._submitter_target(plan)
        if target is None:
            return
        in_cluster_address, local = target
        local_address = f"{local.address}:{local.dashboard_port}"
        files = self._pod_directory(pod)

        def pointed_at_the_local_dashboard(text: str) -> str:
            return replace_address(text, old=in_cluster_address, new=local_address)

        argv = [pointed_at_the_local_dashboard(word) for word in plan.argv]
        view = await self._prepare_view(pod, files, pod_ip=local.address, argv=argv)
        if view is None:
            await asyncio.to_thread(_remove_files, files)
            return
        argv = [view.localised(word) for word in argv]
        env = {
            **self._base_env,
            **{
                name: view.localised(pointed_at_the_local_dashboard(value))
                for name, value in without_agent_owned(view.env).items()
            },
        }
        process = self._process_for(view, argv, env=env, files=files, pod=pod)
        await process.start()
        self._running[uid] = _Running(pod=pod, process=process, files=files, view=view)
        await self._record(
            pod,
            reason="LocalRayStarted",
            message=f"submitter runs locally against the dashboard at {local_address}; "
            f"its output: {self._log_path(pod)}",
        )

    async def _is_operators_job_pod(self, pod: Pod, *, rayjob: str | None, what: str) -> bool:
        """Whether the Pod belongs to a Job this operator created (for RayJob `rayjob`, when
        named), and runs exactly that Job's template (owner references and labels anyone can
        write); refused with an Event naming `what` if not.

        Decided once per Pod: neither a Pod's containers nor a Job's template can change.
        """
        uid = pod["metadata"]["uid"]
        if uid not in self._submitters_checked:
            self._submitters_checked[uid] = await self._runs_a_created_job(pod, rayjob=rayjob)
        if not self._submitters_checked[uid]:
            await self._refuse(pod, what)
        return self._submitters_checked[uid]

    async def _runs_a_created_job(self, pod: Pod, *, rayjob: str | None) -> bool:
        namespace = str(pod["metadata"].get("namespace") or "")
        job_uid = controller_of_kind(pod["metadata"], "Job")
        owner = self._registry.created.owner_of("Job", job_uid) if job_uid else None
        if not owner or job_uid is None:
            return False
        if rayjob is not None:
            found = self._store.get(RAY_JOB, namespace, rayjob)
            if found is None or found["metadata"].get("uid") != owner:
                return False
        job = await self._job_with_uid(namespace, pod, job_uid)
        return job is not None and runs_the_template_of(pod, job)

    async def _job_with_uid(self, namespace: str, pod: Pod, uid: str) -> Object | None:
        for owner in pod["metadata"].get("ownerReferences") or ():
            if owner.get("uid") == uid:
                try:
                    job = await self._client.get(JOB, str(owner.get("name")), namespace=namespace)
                except NotFound:
                    return None
                return job if job["metadata"].get("uid") == uid else None
        return None

    async def _created_for(self, pod: Pod, cluster: RayCluster) -> bool:
        """Whether this operator created the Pod for `cluster` (refused with an Event if not)."""
        created_for = self._registry.created.owner_of("Pod", pod["metadata"]["uid"])
        if created_for is not None and created_for == cluster["metadata"].get("uid"):
            return True
        await self._refuse(pod, f"RayCluster {cluster['metadata']['name']}")
        return False

    async def _refuse(self, pod: Pod, what: str) -> None:
        metadata = pod["metadata"]
        if await self._tell_once(
            pod,
            "LocalRayNotRun",
            f"no local process: this operator did not create this Pod for {what}; only the Pods "
            "it creates run on this machine",
        ):
            logger.warning(
                "local Ray: %s/%s was not created by this operator: not run",
                metadata.get("namespace"),
                metadata.get("name"),
            )

    def _submitter_target(self, plan: SubmitterPlan) -> tuple[str, LocalCluster] | None:
        """The address the submitter was given and the local cluster it means, once known."""
        rayjob = self._store.get(RAY_JOB, plan.namespace, plan.rayjob)
        status = (rayjob or {}).get("status") or {}
        cluster = self._registry.get(plan.namespace, str(status.get("rayClusterName") or ""))
        if rayjob is None or cluster is None or not status.get("dashboardURL"):
            return None
        head = self._running.get(cluster.head_uid)
        if head is None or not head.gcs_ready:
            return None
        return str(status["dashboardURL"]), cluster

    # -- Redis cleanup Jobs ----------------------------------------------------------------------

    async def _ensure_redis_cleanup(self, pod: Pod) -> None:
        """Run a deleted cluster's Redis cleanup (its Job's command: Ray's
        `cleanup_redis_storage`) against the local Redis its `RAY_REDIS_ADDRESS` names; its end
        is written on the Pod as for a submitter, so the Job completes and the cluster goes."""
        uid = pod["metadata"]["uid"]
        plan = await self._job_pod_to_start(pod)
        if plan is None:
            return
        what = "a RayCluster's Redis cleanup Job (with its template)"
        if not await self._is_operators_job_pod(pod, rayjob=None, what=what):
            return
        files = self._pod_directory(pod)
        view = await self._prepare_view(pod, files, pod_ip="127.0.0.1", argv=plan.argv)
        if view is None:
            await asyncio.to_thread(_remove_files, files)
            return
        env = {**self._base_env, **without_agent_owned(view.env)}
        if address := env.get(RAY_REDIS_ADDRESS_ENV):
            env[RAY_REDIS_ADDRESS_ENV] = await self._redis.local_address(plan.namespace, address)
        process = self._process_for(view, plan.argv, env=env, files=files, pod=pod)
        await process.start()
        self._running[uid] = _Running(pod=pod, process=process, files=files, view=view)
        await self._record(
            pod,
            reason="LocalRayStarted",
            message=f"Redis cleanup runs locally; its output: {self._log_path(pod)}",
        )

    # -- ends and stops -------------------------------------------------------------------------

    async def _report_ended(self) -> None:
        # A copy: a node that restarts leaves `_running` on the way.
        for running in list(self._running.values()):
            autoscaler = running.autoscaler
            if autoscaler is not None and autoscaler.returncode is not None:
                await self._tell_once(
                    running.pod,
                    "LocalRayAutoscalerEnded",
                    f"Ray's autoscaler ended with exit code {autoscaler.returncode}; the cluster "
                    f"no longer scales. Last lines of {autoscaler.log_path}:\n" + autoscaler.tail(),
                )
            await self._report_sidecar_ended(running)
            code = running.process.returncode
            if code is None or running.ended_reported:
                continue
            if running.plan is None:
                running.ended_reported = await self._finish_submitter(running, code)
                continue
            running.ended_reported = True
            await self._write_readiness(running, ready=False)
            if _restarts_after(running.pod, code):
                await self._restart_later(running, code)
                continue
            await self._record(
                running.pod,
                reason="LocalRayProcessEnded",
                message=f"the local Ray process ended with exit code {code}; delete the Pod to "
                f"start it again. Last lines of {running.process.log_path}:\n"
                + running.process.tail(),
                type="Warning",
            )

    async def _restart_later(self, running: _Running, code: int) -> None:
        """Stop what is left of an ended Ray node; its Pod starts again after a backoff.

        A kubelet restarts a container whose Pod says restartPolicy Always (KubeRay's default)
        or OnFailure, and KubeRay counts on it: `ray start` exits when its raylet does not
        register with the GCS within Ray's fixed 30 s, which a loaded machine can take."""
        pod = running.pod
        uid = pod["metadata"]["uid"]
        count, delay = self._back_off(uid)
        count -= 1
        tail, log_path = running.process.tail(), running.process.log_path
        await self._stop(uid)
        containers = (pod.get("status") or {}).get("containerStatuses") or ()
        counted = [{**entry, "restartCount": count + 1} for entry in containers[:1]]
        if counted:
            patch = {"status": {"containerStatuses": [*counted, *containers[1:]]}}
            await self._patch_pod_status(pod, patch, patch_type=PatchType.STRATEGIC)
        policy = pod.get("spec", {}).get("restartPolicy") or "Always"
        await self._record(
            pod,
            reason="LocalRayRestarting",
            message=f"the local Ray process ended with exit code {code}; starting it again in "
            f"{delay:g}s (restart {count + 1}), as a kubelet restarts the container of a Pod "
            f"with restartPolicy {policy}. Last lines of {log_path}:\n" + tail,
            type="Warning",
        )

    def _back_off(self, uid: str) -> tuple[int, float]:
        """Hold a Pod back for its next restart backoff: (its restarts now, the delay)."""
        count, _ = self._restarts.get(uid, (0, 0.0))
        delay = min(self._options.restart_backoff * 2**count, MAX_RESTART_BACKOFF)
        self._restarts[uid] = (count + 1, time.monotonic() + delay)
        return count + 1, delay

    def _backing_off(self, uid: str) -> bool:
        """Whether a Pod whose Ray node ended is still waiting out its restart backoff."""
        _, not_before = self._restarts.get(uid, (0, 0.0))
        return time.monotonic() < not_before

    async def _finish_submitter(self, running: _Running, code: int) -> bool:
        """Write the submitter Pod's terminal phase, as its kubelet would; False to retry."""
        containers = running.pod.get("spec", {}).get("containers") or ()
        started = running.pod.get("status", {}).get("startTime")
        finished = format_time(datetime.datetime.now(datetime.UTC))
        state = _terminated(code, started=started or finished, finished=finished)
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
        return await self._patch_pod_status(running.pod, {"status": status})

    async def _stop(self, uid: str) -> None:
        await self._stop_init(uid)  # the Pod's files go: its init containers run again
        running = self._running.pop(uid, None)
        if running is None:
            return
        for sidecar in (running.autoscaler, running.sidecar):
            if sidecar is not None:
                await sidecar.stop()
        await running.process.stop()
        plan = running.plan
        if plan is not None and plan.is_head:
            self._registry.remove(plan.namespace, plan.cluster, head_uid=uid)
        self._told = {told for told in self._told if told[0] != uid}
        await asyncio.to_thread(_remove_files, running.files, running.temp_dir)

    # -- what a Pod's process sees (volumes, env) and what others see of it (LocalPods) -------

    async def _prepare_view(
        self,
        pod: Pod,
        files: Path,
        *,
        pod_ip: str,
        argv: Sequence[str],
        temp_dir: Path | None = None,
        head_temp_dir: Path | None = None,
        other: ContainerPlan | None = None,
    ) -> PodView | None:
        """The container's (the Pod's first, or `other`) volumes and env, made; None (told in an
        Event, tried again next pass) when a volume or an env reference cannot be made, as a
        kubelet would not start it."""
        containers: Sequence[Object] = pod.get("spec", {}).get("containers") or [{}]
        try:
            return await self._views.prepare(
                pod,
                containers[0] if other is None else other.container,
                pod_dir=files,
                pod_ip=pod_ip,
                argv=argv,
                sandboxed=await self._sandboxed(pod),
                ray_temp_dir=temp_dir,
                head_temp_dir=head_temp_dir,
                spec_file="sandbox.json" if other is None else f"container-{other.name}.json",
            )
        except UnresolvableEnvError as error:
            await self._tell_once(pod, "CreateContainerConfigError", f"no local process: {error}")
        except UnmountableVolumeError as error:
            await self._tell_once(pod, "FailedMount", f"no local process: {error}")
        return None

    def _process_for(
        self,
        view: PodView,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        files: Path,
        pod: Pod,
        log_path: Path | None = None,
    ) -> LocalProcess:
        """The Pod's process: in namespaces of its own (the sandbox execs `argv` as its spec
        says), or where none can be made, `argv` itself in the view's working directory."""
        if view.spec_path is not None:
            # Exec'd by the sandbox: a missing program must fail here, as a spawn of it would.
            if shutil.which(argv[0], path=env.get("PATH")) is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
            argv, cwd = run_argv(view.spec_path), files
        else:
            cwd = Path(view.working_dir)
        return LocalProcess(
            argv, env=env, cwd=cwd, log_path=log_path or self._log_path(pod), records=self._records
        )

    async def _sandboxed(self, pod: Pod) -> bool:
        """Whether this machine lets Pods have user and mount namespaces (probed once; where it
        does not, one Warning Event and one log line say what Pods get instead)."""
        if self._sandboxing is None:
            probe = await asyncio.create_subprocess_exec(
                *probe_argv(), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
            )
            _, error = await probe.communicate()
            self._sandboxing = probe.returncode == 0
            if not self._sandboxing:
                message = (
                    "this machine does not let the local Ray agent create user namespaces ("
                    + error.decode(errors="replace").strip()[-200:]
                    + "): local Pods see their volumes only through environment values naming a "
                    "mount path (pointed at a local copy), not at their mount paths; allow "
                    "unprivileged user namespaces (kernel.unprivileged_userns_clone=1, or on "
                    "Ubuntu kernel.apparmor_restrict_unprivileged_userns=0) for the real view"
                )
                logger.warning("local Ray: %s", message)
                await self._tell_once(pod, "LocalPodWithoutNamespaces", message)
        return self._sandboxing

    def container(self, namespace: str, pod: str, container: str | None) -> LocalContainer | None:
        """`LocalPods`: the named container of a Pod the agent runs (None: the Pod's first): a
        Ray node's, an init container's, a submitter's or a local Redis'."""
        if container is not None and (init := self._init_container(namespace, pod, container)):
            return init
        running = self._running_pod(namespace, pod)
        if running is None:
            return self._redis.container(namespace, pod, container)
        if running.view is None:
            return None
        containers: Sequence[Object] = running.pod.get("spec", {}).get("containers") or [{}]
        first = str(containers[0].get("name") or "")
        if container is None or container == first:
            process, view = running.process, running.view
            alive = process.returncode is None
            return _local_container(
                running.pod,
                first,
                process,
                working_dir=view.working_dir,
                namespace_pid=process.pid if view.spec_path is not None and alive else None,
                ports=self._pod_ports(running),
            )
        if container == SUBMITTER_CONTAINER_NAME and running.sidecar is not None:
            return _local_container(
                running.pod, container, running.sidecar, working_dir=str(running.files)
            )
        autoscaler = running.autoscaler
        if container == names.AUTOSCALER_CONTAINER_NAME and autoscaler is not None:
            return _local_container(
                running.pod, container, autoscaler, working_dir=str(running.files)
            )
        return None

    def pod_port(self, namespace: str, pod: str, port: int) -> tuple[str, int] | None:
        """`LocalPods`: where a Pod port of a Pod the agent runs (Ray or Redis) listens here."""
        running = self._running_pod(namespace, pod)
        if running is None:
            return self._redis.pod_port(namespace, pod, port)
        if running.process.returncode is not None:
            return None
        return self._pod_ports(running).get(port)

    def _running_pod(self, namespace: str, pod: str) -> _Running | None:
        for running in self._running.values():
            metadata = running.pod["metadata"]
            if metadata.get("namespace") == namespace and metadata.get("name") == pod:
                return running
        return None

    @staticmethod
    def _pod_ports(running: _Running) -> dict[int, tuple[str, int]]:
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

    # -- helpers --------------------------------------------------------------------------------

    async def _has_room(self, pod: Pod, *, head_of: str | None) -> bool:
        """Whether the caps leave room for this Pod's node; `head_of`: the cluster uid of a head.
        A new head of a cluster whose workers still run (a GCS fault-tolerance restart) is no
        new cluster."""
        nodes = [r.plan for r in self._running.values() if r.plan is not None]
        clusters = {plan.cluster_uid for plan in nodes}
        if (
            head_of is not None
            and head_of not in clusters
            and len(clusters) >= self._options.max_clusters
        ):
            flag, cap, what = "--local-ray-max-clusters", self._options.max_clusters, "clusters"
        elif len(nodes) >= self._options.max_nodes:
            flag, cap, what = "--local-ray-max-nodes", self._options.max_nodes, "nodes"
        else:
            return True
        await self._tell_once(
            pod,
            "LocalRayCapReached",
            f"no local Ray process for this Pod: {cap} local Ray {what} already run "
            f"({flag}={cap}); it starts when one is deleted, or restart with a higher {flag}",
        )
        return False

    def _cluster_of(self, pod: Pod) -> RayCluster | None:
        metadata = pod["metadata"]
        name = (metadata.get("labels") or {}).get(names.CLUSTER_LABEL, "")
        return self._store.get(RAY_CLUSTER, metadata.get("namespace", ""), name)

    async def _tell_once(self, pod: Pod, reason: str, message: str) -> bool:
        """A Warning Event the first time a Pod has `reason`; whether this call told it."""
        key = (pod["metadata"]["uid"], reason)
        if key in self._told:
            return False
        self._told.add(key)
        await self._record(pod, reason=reason, message=message, type="Warning")
        return True

    async def _record(
        self, pod: Pod, *, reason: str, message: str, type: EventType = "Normal"
    ) -> None:
        # An Event that cannot be written must not stop a process from starting or stopping.
        with contextlib.suppress(KubeError):
            await self._events.record(pod, reason=reason, message=message, type=type)

    def _pod_directory(self, pod: Pod) -> Path:
        return self._options.directory / "pods" / str(pod["metadata"]["uid"])

    def _log_path(self, pod: Pod) -> Path:
        metadata = pod["metadata"]
        return self._options.directory / "logs" / f"{metadata['namespace']}_{metadata['name']}.log"


def _restarts_after(pod: Pod, code: int) -> bool:
    """Whether a kubelet would restart the Pod's container after it exited with `code`."""
    policy = pod.get("spec", {}).get("restartPolicy") or "Always"
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def _terminated(code: int, *, started: str, finished: str) -> dict[str, Any]:
    """A container's `terminated` state as a kubelet writes it for an exit code."""
    return {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started,
        "finishedAt": finished,
    }


def _local_container(
    pod: Pod,
    name: str,
    process: LocalProcess,
    *,
    working_dir: str,
    namespace_pid: int | None = None,
    ports: Mapping[int, tuple[str, int]] | None = None,
) -> LocalContainer:
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


def _wants_process(pod: Pod) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    if is_ray_job_submitter_pod(pod) or is_redis_cleanup_pod(pod):
        return True  # also once it ended: its end is the agent's to write, then it stays put
    return is_ray_node_pod(pod) and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _is_head(running: _Running) -> bool:
    return running.plan is not None and running.plan.is_head


def _node_type(pod: Pod) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(names.NODE_TYPE_LABEL, ""))


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


def _remove_files(*paths: Path | None) -> None:
    for path in paths:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def recording_creations(
    factory: ControllerFactory, *, registry: LocalRayRegistry
) -> ControllerFactory:
    """`factory` whose controller's client tells `registry.created` of each object it creates."""

    def build(context: ControllerContext) -> Controller:
        client = context.client.with_create_observer(registry.created.record)
        return factory(dataclasses.replace(context, client=client))

    return build


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
    "recording_creations",
]
