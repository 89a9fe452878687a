"""M2 scale latency: from a PATCH of `replicas` to the first new Pod, and to all of them.

With the largest N of clusters present and idle, one cluster at a time gets +1, +10 or +100
workers (each trial on another cluster while there are enough, so no trial waits behind the
previous one's Pods; `trial_gap` between trials lets the operator go idle again). The clock starts
just before the PATCH is sent and stops when the harness's own watch delivers the ADDED event (Pod
creation timestamps are second-granular).

The floor: a bare client's Pod create until its ADDED event arrives on the same watch — the part
of every latency that no operator can remove.

Fairness: cluster A scales from 0 to `fairness_replicas` workers while cluster B is scaled by +1,
one trial right after the other; B's p99 says whether one big scale-up starves everyone else.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

from ray_operator.bench.convergence import ClusterSet
from ray_operator.bench.kube import wipe_namespace
from ray_operator.bench.manifests import bench_cluster, scale_patch, unrelated_pod
from ray_operator.bench.operator_process import OperatorProcess
from ray_operator.bench.report import Figure, Target, percentile
from ray_operator.bench.session import BenchSession, describe_activity
from ray_operator.bench.watching import ArrivalWatch
from ray_operator.runtime.client import PatchType
from ray_operator.spec.kinds import POD, RAY_CLUSTER
from ray_operator.spec.kuberay_names import CLUSTER_LABEL

FAIR_A = "fair-a"
FLOOR = "floor"
FLOOR_TRIALS = 50
FLOOR_TIMEOUT_SECONDS = 30.0
FAIR_B = "fair-b"
MS = 1000.0


class Scaler:
    """Scales clusters of one `ClusterSet` and times what the watch sees."""

    def __init__(self, session: BenchSession, clusters: ClusterSet) -> None:
        self._session = session
        self._clusters = clusters

    async def scale_by(self, name: str, step: int) -> tuple[float, float]:
        """Add `step` workers; (seconds to the first new Pod, seconds to the last)."""
        watch = self._clusters.pods
        timeout = self._session.config.settle_timeout
        replicas = self._clusters.replicas[name] + step
        seen = watch.count(name)
        started = time.monotonic()
        await self.patch_replicas(name, replicas)
        first = await watch.wait_for(name, count=seen + 1, within=timeout)
        last = await watch.wait_for(name, count=seen + step, within=timeout)
        return first - started, last - started

    async def patch_replicas(self, name: str, replicas: int) -> None:
        await self._session.client.patch(
            RAY_CLUSTER,
            name,
            scale_patch(replicas),
            namespace=self._clusters.namespace,
            patch_type=PatchType.JSON,
        )
        self._clusters.replicas[name] = replicas


async def measure_scale_latency(
    session: BenchSession, operator: OperatorProcess, clusters: ClusterSet
) -> None:
    """M2: +1 / +10 / +100 trials on the idle clusters, then fairness."""
    config = session.config
    await measure_floor(session, namespace=session.names.raw(config.largest))
    scaler = Scaler(session, clusters)
    rotation: Iterator[str] = itertools.cycle(clusters.initial)
    for step in config.scale_steps:
        trials = config.trials if step == 1 else config.large_trials
        if trials < 1:
            continue
        before = await session.wait_until_quiet(operator)
        session.progress(f"M2: {trials} trials of +{step}")
        first, last = [], []
        for _ in range(trials):
            to_first, to_last = await scaler.scale_by(next(rotation), step)
            first.append(to_first * MS)
            last.append(to_last * MS)
            await asyncio.sleep(config.trial_gap)
        activity = describe_activity(before, await operator.metrics())
        add_latency_figures(session, step=step, first=first, last=last, activity=activity)
    await measure_fairness(session, operator, clusters, scaler)


async def measure_floor(session: BenchSession, *, namespace: str) -> None:
    """What no operator can beat: a bare client's Pod create until its ADDED event arrives."""
    trials = min(FLOOR_TRIALS, session.config.trials)
    watch = ArrivalWatch(session.client, POD, namespace=namespace)
    await watch.start()
    latencies = []
    try:
        for index in range(trials):
            pod = unrelated_pod(f"floor-{index:03d}", namespace=namespace)
            pod["metadata"]["labels"][CLUSTER_LABEL] = FLOOR
            started = time.monotonic()
            await session.client.create(POD, pod)
            arrived = await watch.wait_for(FLOOR, count=index + 1, within=FLOOR_TIMEOUT_SECONDS)
            latencies.append((arrived - started) * MS)
    finally:
        await watch.stop()
        await wipe_namespace(session.api, namespace)
    session.report.add(
        Figure(
            "M2",
            "floor: bare-client Pod create → its ADDED event, p50",
            percentile(latencies, 0.5),
            "ms",
            note=f"p99 {percentile(latencies, 0.99):.1f} ms, {trials} trials",
        )
    )


def add_latency_figures(
    session: BenchSession, *, step: int, first: list[float], last: list[float], activity: str
) -> None:
    add = session.report.add
    trials = f"{len(first)} trials; {activity}"
    first_p50, first_p99 = percentile(first, 0.5), percentile(first, 0.99)
    if step == 1:
        add(
            Figure(
                "M2",
                "+1: PATCH → first Pod, p50",
                first_p50,
                "ms",
                Target("<=", 20, "ms"),
                note=trials,
            )
        )
        add(Figure("M2", "+1: PATCH → first Pod, p99", first_p99, "ms", Target("<=", 100, "ms")))
        return
    add(
        Figure(
            "M2",
            f"+{step}: PATCH → first Pod, p50 / p99",
            first_p50,
            "ms",
            note=f"p99 {first_p99:.1f} ms, {trials}",
        )
    )
    target = Target("<=", 1000, "ms") if step >= 100 else None
    add(
        Figure(
            "M2",
            f"+{step}: PATCH → all {step} Pods, p50",
            percentile(last, 0.5),
            "ms",
            target,
            note=f"p99 {percentile(last, 0.99):.0f} ms, {trials}",
        )
    )


async def measure_fairness(
    session: BenchSession, operator: OperatorProcess, clusters: ClusterSet, scaler: Scaler
) -> None:
    """B's +1 latency while A scales 0 → `fairness_replicas` in one step."""
    config = session.config
    timeout = config.settle_timeout
    for name, workers in ((FAIR_A, 0), (FAIR_B, 3)):
        await session.client.create(
            RAY_CLUSTER, bench_cluster(name, namespace=clusters.namespace, workers=workers)
        )
        clusters.add(name, workers)
        await clusters.pods.wait_for(name, count=1 + workers, within=timeout)
    before = await session.wait_until_quiet(operator)
    session.progress(f"M2 fairness: {FAIR_A} 0 → {config.fairness_replicas}, {FAIR_B} +1 trials")
    a_target = 1 + config.fairness_replicas
    started = time.monotonic()
    await scaler.patch_replicas(FAIR_A, config.fairness_replicas)
    latencies: list[float] = []
    while len(latencies) < config.fairness_trials and (
        not latencies or clusters.pods.count(FAIR_A) < a_target
    ):
        to_first, _ = await scaler.scale_by(FAIR_B, 1)
        latencies.append(to_first * MS)
    a_done = await clusters.pods.wait_for(FAIR_A, count=a_target, within=timeout) - started
    activity = describe_activity(before, await operator.metrics())
    session.report.add(
        Figure(
            "M2",
            f"fairness: B's +1 p99 while A scales 0 → {config.fairness_replicas}",
            percentile(latencies, 0.99),
            "ms",
            Target("<=", 250, "ms"),
            note=f"{len(latencies)} trials on B, p50 {percentile(latencies, 0.5):.1f} ms; A's "
            f"{config.fairness_replicas} Pods took {a_done:.2f} s; {activity}",
        )
    )
