"""What every part of the local Ray agent shares: its options, the processes it runs by Pod uid,
the Events it told, the restart backoff, and how a Pod's process is made (its sandbox view of
volumes and env, its files and log, the probe of user namespaces).

The parts (`ray_nodes.py`, `init_containers.py`, `job_pods.py`, `sidecar_submitter.py`) each
take one `AgentContext`; `agent.py` owns it and runs the passes.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray_operator.localray.plan import ContainerPlan, KubeAccess
from ray_operator.localray.pod_status import PodStatusWriter
from ray_operator.localray.pod_view import PodView, PodViews
from ray_operator.localray.processes import LocalProcess, ProcessRecords
from ray_operator.localray.redis import LocalRedisServers
from ray_operator.localray.registry import LocalRayRegistry
from ray_operator.localray.running import RunningPod
from ray_operator.localray.sandbox import probe_argv, run_argv
from ray_operator.localray.volumes import UnmountableVolumeError, UnresolvableEnvError
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.events import EVENTS_GRACE_SECONDS, EventRecorder, EventType
from ray_operator.runtime.store import StoreView
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import RAY_CLUSTER

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

# The whole agent logs under one name, as before it was split into modules.
logger = logging.getLogger("ray_operator.localray.agent")

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


class AgentContext:
    """The agent's shared state and the services every part of it uses."""

    def __init__(
        self,
        *,
        client: KubeClient,
        store: StoreView,
        events: EventRecorder,
        registry: LocalRayRegistry,
        options: LocalRayOptions,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self._events = events
        self.registry = registry
        self.options = options
        self.status = PodStatusWriter(client)
        self.records = ProcessRecords(options.directory / "processes.json")
        self.running: dict[str, RunningPod] = {}
        """The processes the agent started, by Pod uid."""
        self.told: set[tuple[str, str]] = set()
        """(Pod uid, reason) of each Warning Event told once."""
        self.restarts: dict[str, tuple[int, float]] = {}
        """Pod uid -> (restarts so far, monotonic time before which it must not start again)."""
        environment = dict(os.environ if base_env is None else base_env)
        bin_dir = str(Path(options.ray_executable).parent)
        environment["PATH"] = os.pathsep.join([bin_dir, environment.get("PATH", "")])
        # As in a container, whose home holds no Ray token: since Ray 2.5x a local `ray.init()`
        # writes ~/.ray/auth_token and every later `ray start` without RAY_AUTH_MODE turns token
        # auth on, so the operator (no token for the cluster) got 401 from local dashboards. A
        # Pod that asks for token auth (spec.authOptions) sets RAY_AUTH_MODE itself.
        environment[names.ENV_RAY_AUTH_MODE] = "disabled"
        self.base_env = environment
        self.redis = LocalRedisServers(
            client=client,
            tell=self.tell_once,
            record=self.record,
            directory=options.directory / "redis",
            log_path=self.log_path,
            records=self.records,
            path=environment["PATH"],
            sandboxed=self.sandboxed,
        )
        self._views = PodViews(client)
        self._sandboxing: bool | None = None
        """Whether Pods get user and mount namespaces of their own (probed once)."""

    def tell_once(self, pod: Pod, reason: str, message: str) -> bool:
        """A Warning Event the first time a Pod has `reason`; whether this call told it."""
        key = (pod["metadata"]["uid"], reason)
        if key in self.told:
            return False
        self.told.add(key)
        self.record(pod, reason=reason, message=message, type="Warning")
        return True

    def record(self, pod: Pod, *, reason: str, message: str, type: EventType = "Normal") -> None:
        """An Event on the Pod, queued: writing it never holds up a process's start or stop, and
        one that cannot be written is dropped."""
        self._events.record(pod, reason=reason, message=message, type=type)

    async def close_events(self) -> None:
        """Write the Events still queued, for a few seconds at most."""
        await self._events.close(grace=EVENTS_GRACE_SECONDS)

    def pod_directory(self, pod: Pod) -> Path:
        """Where the Pod's files live (its volumes' copies, its sandbox spec)."""
        return self.options.directory / "pods" / str(pod["metadata"]["uid"])

    def log_path(self, pod: Pod) -> Path:
        """Where the Pod's first container's output goes."""
        metadata = pod["metadata"]
        return self.options.directory / "logs" / f"{metadata['namespace']}_{metadata['name']}.log"

    async def prepare_view(
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
                sandboxed=await self.sandboxed(pod),
                ray_temp_dir=temp_dir,
                head_temp_dir=head_temp_dir,
                spec_file="sandbox.json" if other is None else f"container-{other.name}.json",
            )
        except UnresolvableEnvError as error:
            self.tell_once(pod, "CreateContainerConfigError", f"no local process: {error}")
        except UnmountableVolumeError as error:
            self.tell_once(pod, "FailedMount", f"no local process: {error}")
        return None

    def process_for(
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
            argv, env=env, cwd=cwd, log_path=log_path or self.log_path(pod), records=self.records
        )

    async def sandboxed(self, pod: Pod) -> bool:
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
                self.tell_once(pod, "LocalPodWithoutNamespaces", message)
        return self._sandboxing

    async def started(self, process: LocalProcess, pod: Pod, reason: str, what: str) -> bool:
        """Start a process beside a Pod's Ray node; False (told once) when it cannot start."""
        try:
            await process.start()
        except OSError as error:
            self.tell_once(pod, reason, f"{what} could not start: {error}")
            return False
        return True

    def back_off(self, uid: str) -> tuple[int, float]:
        """Hold a Pod back for its next restart backoff: (its restarts now, the delay)."""
        count, _ = self.restarts.get(uid, (0, 0.0))
        delay = min(self.options.restart_backoff * 2**count, MAX_RESTART_BACKOFF)
        self.restarts[uid] = (count + 1, time.monotonic() + delay)
        return count + 1, delay

    def backing_off(self, uid: str) -> bool:
        """Whether a Pod whose Ray node ended is still waiting out its restart backoff."""
        _, not_before = self.restarts.get(uid, (0, 0.0))
        return time.monotonic() < not_before

    def cluster_of(self, pod: Pod) -> RayCluster | None:
        """The RayCluster a Ray node's Pod belongs to, from the cache."""
        metadata = pod["metadata"]
        name = (metadata.get("labels") or {}).get(names.CLUSTER_LABEL, "")
        return self.store.get(RAY_CLUSTER, metadata.get("namespace", ""), name)

    def refuse(self, pod: Pod, what: str) -> None:
        """Tell (once) that the Pod is not run: the operator did not create it for `what`."""
        metadata = pod["metadata"]
        if self.tell_once(
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

    def has_room(self, pod: Pod, *, head_of: str | None) -> bool:
        """Whether the caps leave room for this Pod's node; `head_of`: the cluster uid of a head.
        A new head of a cluster whose workers still run (a GCS fault-tolerance restart) is no
        new cluster."""
        nodes = [r.plan for r in self.running.values() if r.plan is not None]
        clusters = {plan.cluster_uid for plan in nodes}
        if (
            head_of is not None
            and head_of not in clusters
            and len(clusters) >= self.options.max_clusters
        ):
            flag, cap, what = "--local-ray-max-clusters", self.options.max_clusters, "clusters"
        elif len(nodes) >= self.options.max_nodes:
            flag, cap, what = "--local-ray-max-nodes", self.options.max_nodes, "nodes"
        else:
            return True
        self.tell_once(
            pod,
            "LocalRayCapReached",
            f"no local Ray process for this Pod: {cap} local Ray {what} already run "
            f"({flag}={cap}); it starts when one is deleted, or restart with a higher {flag}",
        )
        return False


def remove_paths(*paths: Path | None) -> None:
    """Remove directories of a Pod, as far as they exist."""
    for path in paths:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
