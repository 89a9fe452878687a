"""The order of a run: for each N, the ceiling, a fresh operator and M1; M2..M6 on the largest N.

    for each N (ascending):
        bare-client ceiling in raw-N (no operator running), then wiped
        fresh operator; (first N only) RSS with 0 clusters
        M1 + M5 CPU/event; RSS with N clusters
        not the largest N: stop the operator, wipe clusters-N
    largest N:  M3 one cluster → M3/M5/M4 idle → M6 restart → M2 scale latency + fairness
                → M4 unrelated Pods → M3 LISTs and 409s since the restart
                → M4 RSS per cached Pod (two fresh operators) → duplicates (whole run)

A fresh operator per N keeps each RSS figure about that N alone. When a step fails, its figure is
recorded as n/a with the error and the run goes on with what does not depend on it; the operator
is always stopped, and in a shared cluster (`--kubeconfig`) the run's namespaces are wiped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ray_operator.bench.convergence import ClusterSet, measure_ceiling, measure_convergence
from ray_operator.bench.kube import ensure_namespace, wipe_namespace
from ray_operator.bench.operator_process import MetricsSnapshot, OperatorProcess
from ray_operator.bench.report import Figure, Target
from ray_operator.bench.restart import measure_restart
from ray_operator.bench.scaling import measure_scale_latency
from ray_operator.bench.session import API_REQUESTS, BenchSession
from ray_operator.bench.steady import (
    measure_cached_pods,
    measure_idle,
    measure_one_cluster,
    measure_unrelated_pods,
    rss_figure,
)

T = TypeVar("T")

RSS_TARGETS_MIB = {1000: 90.0}
"""RSS targets by cluster count (issue 16: under half of KubeRay's 224 MiB at 1000 clusters)."""


async def run_benchmark(session: BenchSession, *, wipe_afterwards: bool) -> None:
    """Every metric, in the order above, into `session.report`."""
    names = session.names
    sizes = sorted(set(session.config.clusters))
    for namespace in (
        names.system,
        names.unrelated,
        *(ns for n in sizes for ns in (names.clusters(n), names.raw(n))),
    ):
        await ensure_namespace(session.client, namespace)
    try:
        for count in sizes:
            await _run_size(session, count, first=count == sizes[0], largest=count == sizes[-1])
    finally:
        if wipe_afterwards:
            session.progress("wiping the run's namespaces")
            for namespace in (names.unrelated, *(names.clusters(n) for n in sizes)):
                with contextlib.suppress(Exception):
                    await wipe_namespace(session.api, namespace)


async def _run_size(session: BenchSession, count: int, *, first: bool, largest: bool) -> None:
    names = session.names
    watched = (names.clusters(count), names.unrelated)
    ceiling = await _attempt(
        session, "M1", f"N={count}: bare-client ceiling", lambda: measure_ceiling(session, count)
    )
    operator = await session.start_operator(watched)
    clusters: ClusterSet | None = None
    try:
        if first:
            await session.wait_until_quiet(operator)
            session.report.add(
                rss_figure(
                    "RSS with 0 clusters (idle, caches synced)",
                    operator.sample().rss_bytes,
                    target_mib=50,
                )
            )
        session.progress(f"M1: creating {count} RayClusters")
        clusters = await measure_convergence(session, operator, count, ceiling=ceiling)
        session.report.add(
            rss_figure(
                f"RSS with {count} clusters ({4 * count} Pods), settled",
                operator.sample().rss_bytes,
                target_mib=RSS_TARGETS_MIB.get(count),
            )
        )
        if largest:
            operator = await _steady_and_restart(session, operator, clusters, watched)
            _count_duplicates(session, clusters)
    finally:
        if clusters is not None:
            await clusters.stop()
        await operator.stop()
    if not largest:
        session.progress(f"wiping {names.clusters(count)}")
        await wipe_namespace(session.api, names.clusters(count))


async def _steady_and_restart(
    session: BenchSession, operator: OperatorProcess, clusters: ClusterSet, watched: tuple[str, ...]
) -> OperatorProcess:
    """M3, idle M3/M5/M4, M6, M2, M4 unrelated; returns the operator left running."""
    await _attempt(
        session, "M3", "create 1 cluster", lambda: measure_one_cluster(session, operator, clusters)
    )
    await _attempt(
        session,
        "M3",
        "idle period",
        lambda: measure_idle(session, operator, cluster_count=len(clusters.replicas)),
    )
    session.progress("M6: restarting the operator")
    operator = await measure_restart(
        session, operator, cluster_count=len(clusters.replicas), watched=watched
    )
    after_start = await operator.metrics()
    await _attempt(
        session, "M2", "scale latency", lambda: measure_scale_latency(session, operator, clusters)
    )
    await _attempt(
        session, "M4", "unrelated Pods", lambda: measure_unrelated_pods(session, operator)
    )
    _count_relists_and_conflicts(session, after_start, await operator.metrics())
    # Last: it replaces the operator by fresh processes (their RSS is the figure).
    restarted = await _attempt(
        session,
        "M4",
        "RSS per cached Pod",
        lambda: measure_cached_pods(session, operator, watched=watched),
    )
    return restarted or operator


def _count_relists_and_conflicts(
    session: BenchSession, after_start: MetricsSnapshot, final: MetricsSnapshot
) -> None:
    """LISTs and 409s of the restarted operator after its start, through M2 and M4."""
    for name, labels in (("LISTs", {"verb": "list"}), ("409 conflicts", {"code": "409"})):
        count = final.total(API_REQUESTS, **labels) - after_start.total(API_REQUESTS, **labels)
        session.report.add(
            Figure(
                "M3",
                f"{name} after start (restarted operator, through M2 and M4)",
                count,
                "",
                Target("==", 0),
            )
        )


def _count_duplicates(session: BenchSession, clusters: ClusterSet) -> None:
    """Pods ever created per cluster against 1 head + its workers, over the whole run."""
    seen = clusters.pods.counts_by_cluster()
    extra = sum(
        max(0, seen.get(name, 0) - (1 + workers)) for name, workers in clusters.replicas.items()
    )
    session.report.add(
        Figure(
            "M1",
            "duplicate Pods over the whole run (M1..M6)",
            extra,
            "",
            Target("==", 0),
            note=f"{sum(seen.values())} Pods created in {len(clusters.replicas)} clusters",
        )
    )


async def _attempt(
    session: BenchSession, metric: str, what: str, step: Callable[[], Awaitable[T]]
) -> T | None:
    """Run one measuring step; on failure record an n/a figure and carry on."""
    try:
        return await step()
    except Exception as error:
        session.progress(f"{metric} {what} failed: {type(error).__name__}: {error}")
        session.report.add(
            Figure(metric, what, None, note=f"failed: {type(error).__name__}: {error}")
        )
        return None
