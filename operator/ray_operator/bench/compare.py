"""`--compare-with CMD`: the same scenarios for another operator ("theirs") and ours, side by side.

Every run is one operator on a fresh embedded control plane (no kube-controller-manager, as the
benchmark's own runs; ray.io/v1 CRDs from crd/, which are KubeRay's field for field), and the runs
alternate: trial 1 theirs then ours, trial 2 ours then theirs, so a machine that warms up or
slows down does not favour one side. Nothing is read from inside an operator, so any operator
will do: memory and CPU come from /proc, its requests from the API server's audit log under an
identity of its own (`audit`), arrivals from the harness's watches, readiness from an HTTP probe.
"Quiet" means no request but lease traffic for `quiet_seconds`.

A run, with N the largest of --clusters:

    1. ready, leading, quiet       → RSS with 0 clusters
    2. create N RayClusters        → until all 4N Pods and N head Services exist; CPU until
                                     quiet; RSS once quiet; share of the bare client's rate
    3. +step workers on one cluster → until all its new Pods exist (p50 of a few trials)
    4. idle period                  → requests by verb and resource (lease apart); CPU share
    5. stop; delete 1 worker Pod of every cluster; start → probe 200, → every cluster back to
                                     its full Pod count; the writes until quiet
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from ray_operator.bench.audit import AuditLog, RequestCounts, quiet_since
from ray_operator.bench.compare_report import Comparison, Side
from ray_operator.bench.config import BenchConfig
from ray_operator.bench.convergence import (
    OBJECTS_PER_CLUSTER,
    PODS_PER_CLUSTER,
    ClusterSet,
    measure_ceiling,
)
from ray_operator.bench.external import ExternalOperator, OperatorCommand
from ray_operator.bench.image_runtime import IMAGE_ENVIRONMENT, compile_bytecode
from ray_operator.bench.kube import create_all, delete_all, ensure_namespace
from ray_operator.bench.manifests import bench_cluster
from ray_operator.bench.report import Report, percentile
from ray_operator.bench.scaling import Scaler
from ray_operator.bench.session import READY_TIMEOUT_SECONDS, BenchSession
from ray_operator.bench.watching import ANY_CLUSTER
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.spec.kinds import POD, RAY_CLUSTER
from ray_operator.spec.kuberay_names import CLUSTER_LABEL, NODE_TYPE_LABEL

OPERATOR_USER = "operator-under-test"
"""The operator's user name (client certificate CN, group system:masters so RBAC is no factor)."""
MIB = 1024 * 1024
POLL_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """What a comparison runs: both commands, and how many times and how big."""

    theirs: OperatorCommand
    ours: OperatorCommand
    bench: BenchConfig
    """Clusters (the largest N), concurrency, quiet seconds, timeout and idle period."""
    trials: int = 2
    scale_step: int = 100
    scale_trials: int = 3
    ready_path: str = "/readyz"

    def __post_init__(self) -> None:
        if self.trials < 1 or self.scale_trials < 1 or self.scale_step < 1:
            raise ValueError("trials, scale trials and the scale step must be at least 1")


def run_order(trials: int) -> Iterator[tuple[int, Side]]:
    """(trial, side) in run order: theirs first in odd trials, ours first in even ones."""
    for trial in range(1, trials + 1):
        first: Side = "theirs" if trial % 2 else "ours"
        second: Side = "ours" if first == "theirs" else "theirs"
        yield trial, first
        yield trial, second


def run_comparison(config: CompareConfig, *, work_dir: Path, comparison: Comparison) -> int:
    """Every run in `run_order`, each on its own control plane, into `comparison`; how many
    runs broke off (each leaves n/a in its cells and a note; the next run goes on)."""
    from ray_operator.cli import install_crds
    from ray_operator.localcluster.controlplane import LocalControlPlane

    compile_bytecode()
    broken = 0
    for trial, side in run_order(config.trials):
        run_dir = work_dir / f"trial-{trial}-{side}"
        plane = LocalControlPlane(
            run_dir / "control-plane", controller_manager=False, audit_users=(OPERATOR_USER,)
        )
        _progress(f"trial {trial}, {side}: starting a control plane in {plane.directory}")
        try:
            plane.start()
            install_crds(plane.kubeconfig)
            operator_kubeconfig = plane.write_client_kubeconfig(
                run_dir / "operator.kubeconfig", common_name=OPERATOR_USER
            )
            run = ComparedRun(
                config,
                side=side,
                trial=trial,
                comparison=comparison,
                audit=AuditLog(plane.audit_log, user=OPERATOR_USER),
                operator_kubeconfig=operator_kubeconfig,
                run_dir=run_dir,
            )
            uvloop.run(run.measure(plane.kubeconfig))
        except Exception as error:
            _progress(f"trial {trial}, {side} stopped early: {type(error).__name__}: {error}")
            comparison.note(side, trial, f"the run stopped early: {type(error).__name__}: {error}")
            broken += 1
        finally:
            plane.stop()
            # etcd's data for thousands of Pods is large and worthless after the run.
            shutil.rmtree(plane.directory, ignore_errors=True)
    return broken


@dataclass(slots=True)
class ComparedRun:
    """One operator on one control plane: the five scenarios, recorded into `comparison`."""

    config: CompareConfig
    side: Side
    trial: int
    comparison: Comparison
    audit: AuditLog
    operator_kubeconfig: Path
    run_dir: Path
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def clusters(self) -> int:
        return self.config.bench.largest

    @property
    def command(self) -> OperatorCommand:
        return self.config.theirs if self.side == "theirs" else self.config.ours

    def record(self, name: str, value: float | None, unit: str = "") -> None:
        self.comparison.record(self.side, self.trial, name, value, unit)

    def note(self, text: str) -> None:
        self.comparison.note(self.side, self.trial, text)

    async def measure(self, admin_kubeconfig: Path) -> None:
        """Scenarios 1..5 with the harness's (admin) client."""
        api = await load_api_client(admin_kubeconfig)
        client = KubeClient(api, metrics=Metrics())
        # The bench's session, for its namespaces, ceiling and scaler; its own report is unused.
        session = BenchSession(
            self.config.bench,
            kubeconfig=admin_kubeconfig,
            api=api,
            client=client,
            work_dir=self.run_dir,
            report=Report(self.comparison.machine, settings={}),
            scope_to_namespaces=False,
        )
        try:
            await self._scenarios(session)
        finally:
            await client.close()

    async def _scenarios(self, session: BenchSession) -> None:
        names = session.names
        for namespace in (names.system, names.clusters(self.clusters), names.raw(self.clusters)):
            await ensure_namespace(session.client, namespace)
        # Before any operator runs: KubeRay's cache would take in the bare client's Pods (they
        # carry ray.io/node-type), which are gone again before the operator starts.
        ceiling = await measure_ceiling(session, self.clusters)
        operator = await self._start_operator(session)
        clusters: ClusterSet | None = None
        try:
            await self._wait_until_quiet(operator, after=time.time())
            self.record("RSS idle, 0 clusters (ready, then quiet)", _mib(operator), "MiB")
            clusters = await self._create_clusters(session, operator, ceiling=ceiling)
            await self._scale_up(session, operator, clusters)
            await self._idle(session, operator)
            operator = await self._restart(session, operator, clusters)
        finally:
            if clusters is not None:
                await clusters.stop()
            await operator.stop()

    async def _start_operator(self, session: BenchSession) -> ExternalOperator:
        """Spawn the operator; return once its probe says ready and it holds its Lease."""
        number = next(self._numbers)
        operator = ExternalOperator(
            self.command,
            kubeconfig=self.operator_kubeconfig,
            lease_namespace=session.names.system,
            log_path=self.run_dir / f"operator-{number}.log",
            ready_path=self.config.ready_path,
            environment=IMAGE_ENVIRONMENT if self.side == "ours" else None,
        )
        spawned = time.time()
        await operator.start()
        try:
            seconds = await operator.wait_ready(within=READY_TIMEOUT_SECONDS)
            await self._wait_until_leading(operator, spawned=spawned)
        except BaseException:
            await operator.stop()
            raise
        session.progress(
            f"{self.side}: operator {number} (pid {operator.pid}) ready after {seconds:.2f}s "
            f"and leading; log: {operator.log_path}"
        )
        return operator

    async def _wait_until_leading(self, operator: ExternalOperator, *, spawned: float) -> None:
        """Until the operator wrote a Lease (a create or an update that succeeded): client-go's
        leader election writes only to acquire or renew, and only reads while another leads."""
        deadline = time.monotonic() + self.config.bench.settle_timeout
        while time.monotonic() < deadline:
            if any(
                event.is_lease and event.is_write and 200 <= event.code < 300
                for event in self.audit.between(spawned)
            ):
                return
            operator.sample()  # raises if the process died
            await asyncio.sleep(POLL_SECONDS)
        raise TimeoutError(f"operator never took its Lease; see {operator.log_path}")

    async def _wait_until_quiet(self, operator: ExternalOperator, *, after: float) -> float:
        """Until the operator sent nothing but lease requests for `quiet_seconds` (counted from
        `after` at the earliest, a `time.time()`); the time quiet was seen."""
        config = self.config.bench
        deadline = time.monotonic() + config.settle_timeout
        while time.monotonic() < deadline:
            operator.sample()  # raises if the process died
            now = time.time()
            if quiet_since(self.audit.read_new(), after=after, now=now) >= config.quiet_seconds:
                return now
            await asyncio.sleep(POLL_SECONDS)
        raise TimeoutError(f"operator still busy after {config.settle_timeout:.0f}s")

    async def _create_clusters(
        self, session: BenchSession, operator: ExternalOperator, *, ceiling: float
    ) -> ClusterSet:
        """Scenario 2: N RayClusters until every Pod and head Service exists, then quiet."""
        count, timeout = self.clusters, self.config.bench.settle_timeout
        namespace = session.names.clusters(count)
        # Selected by ray.io/cluster, which both operators put on what they create.
        clusters = await ClusterSet.watch(
            session.client, namespace, count, label_selector=CLUSTER_LABEL
        )
        pods, services = clusters.pods, clusters.services
        cpu_before = operator.sample()
        started, started_wall = time.monotonic(), time.time()
        session.progress(f"{self.side}: creating {count} RayClusters")
        await create_all(
            session.client,
            ((RAY_CLUSTER, bench_cluster(name, namespace=namespace)) for name in clusters.initial),
            concurrency=self.config.bench.concurrency,
        )
        last_pod = await pods.wait_for(ANY_CLUSTER, count=PODS_PER_CLUSTER * count, within=timeout)
        last_service = await services.wait_for(ANY_CLUSTER, count=count, within=timeout)
        seconds = max(last_pod, last_service) - started
        session.progress(f"{self.side}: {count} clusters converged in {seconds:.1f}s")
        await self._wait_until_quiet(operator, after=started_wall)
        after = operator.sample()
        self.record(
            f"create {count} RayClusters → all {PODS_PER_CLUSTER * count} Pods + {count} head "
            "Services exist",
            seconds,
            "s",
        )
        self.record(
            f"create {count}: operator CPU, first create → quiet",
            after.cpu_seconds - cpu_before.cpu_seconds,
            "CPU-s",
        )
        self.record(
            f"create {count}: share of the bare client's create rate (higher is better)",
            100 * OBJECTS_PER_CLUSTER * count / seconds / ceiling,
            "%",
        )
        self.record(f"RSS with {count} clusters, once quiet", after.rss_bytes / MIB, "MiB")
        requests = RequestCounts.of(self.audit.between(started_wall))
        self.note(f"create {count}: requests until quiet: {requests.describe()}")
        return clusters

    async def _scale_up(
        self, session: BenchSession, operator: ExternalOperator, clusters: ClusterSet
    ) -> None:
        """Scenario 3: +step workers on one cluster at a time (another one each trial)."""
        step, trials = self.config.scale_step, self.config.scale_trials
        scaler = Scaler(session, clusters)
        to_first, to_last = [], []
        for name in itertools.islice(itertools.cycle(clusters.initial), trials):
            await self._wait_until_quiet(operator, after=time.time())
            first, last = await scaler.scale_by(name, step)
            to_first.append(first)
            to_last.append(last)
        self.record(
            f"+{step} workers on one cluster → all {step} Pods exist, p50 of {trials}",
            percentile(to_last, 0.5),
            "s",
        )
        self.note(
            f"+{step}: to all Pods {', '.join(f'{s:.2f}' for s in to_last)} s; to the first "
            f"{', '.join(f'{s:.2f}' for s in to_first)} s"
        )

    async def _idle(self, session: BenchSession, operator: ExternalOperator) -> None:
        """Scenario 4: what the operator asks of the API server while nothing changes."""
        seconds = self.config.bench.idle_seconds
        await self._wait_until_quiet(operator, after=time.time())
        session.progress(f"{self.side}: idle for {seconds:.0f}s")
        start_wall, start = time.time(), operator.sample()
        await asyncio.sleep(seconds)
        end_wall, end = time.time(), operator.sample()
        counts = RequestCounts.of(self.audit.between(start_wall, end_wall))
        label = f"idle {seconds:.0f} s with {self.clusters} clusters"
        self.record(f"{label}: requests besides leases", counts.total)
        self.record(f"{label}: lease requests", counts.lease_total)
        self.record(
            f"{label}: CPU",
            100 * (end.cpu_seconds - start.cpu_seconds) / (end.monotonic - start.monotonic),
            "% of a core",
        )
        self.note(f"idle: {counts.describe()}")

    async def _restart(
        self, session: BenchSession, operator: ExternalOperator, clusters: ClusterSet
    ) -> ExternalOperator:
        """Scenario 5: stop, delete one worker Pod per cluster, start again; the new process."""
        client, namespace = session.client, clusters.namespace
        timeout = self.config.bench.settle_timeout
        await self._wait_until_quiet(operator, after=time.time())
        await operator.stop()
        deleted = await self._one_worker_per_cluster(session, namespace)
        before = {cluster: clusters.pods.count(cluster) for cluster in deleted}
        session.progress(f"{self.side}: stopped; deleting {len(deleted)} worker Pods")
        await delete_all(
            client,
            POD,
            deleted.values(),
            namespace=namespace,
            concurrency=self.config.bench.concurrency,
        )
        spawned = time.time()
        restarted = await self._start_operator(session)
        arrivals = await asyncio.gather(
            *(
                clusters.pods.wait_for(cluster, count=seen + 1, within=timeout)
                for cluster, seen in before.items()
            )
        )
        back = max(arrivals) - restarted.started_at
        await self._wait_until_quiet(restarted, after=time.time())
        writes = RequestCounts.of(self.audit.between(spawned)).only_writes()
        count = len(clusters.replicas)
        self.record(
            f"restart with {count} clusters: spawn → {self.config.ready_path} 200",
            restarted.ready_after,
            "s",
        )
        self.record(
            "restart: spawn → every cluster back to its full Pod count (a worker of each was "
            "deleted while stopped)",
            back,
            "s",
        )
        self.record("restart: writes besides leases, until quiet", writes.writes)
        self.note(f"restart writes: {writes.describe()}")
        return restarted

    async def _one_worker_per_cluster(
        self, session: BenchSession, namespace: str
    ) -> dict[str, str]:
        """cluster → the name of one of its worker Pods."""
        listed = await session.client.list(
            POD, namespace=namespace, label_selector=f"{NODE_TYPE_LABEL}=worker"
        )
        chosen: dict[str, str] = {}
        for pod in listed.items:
            metadata = pod["metadata"]
            chosen.setdefault(metadata["labels"][CLUSTER_LABEL], metadata["name"])
        return chosen


def _mib(operator: ExternalOperator) -> float:
    return operator.sample().rss_bytes / MIB


def _progress(message: str) -> None:
    print(f"[compare] {message}", file=sys.stderr, flush=True)
