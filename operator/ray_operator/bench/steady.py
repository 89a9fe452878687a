"""The operator at rest and at its smallest tasks: M3 API economy, M4 memory, M5 idle CPU.

- `measure_one_cluster`: every request the operator sends to bring up one cluster with W workers,
  by verb, until it is quiet again (Events written are counted apart: they are writes too).
- `measure_idle`: over the idle period with all clusters present, requests by verb (only lease
  renewals expected), LISTs, CPU as a share of one core, and RSS at the end.
- `measure_unrelated_pods`: RSS before and after bare Pods appear in a namespace the operator
  watches; its label selector should keep them out of the cache entirely.
- `measure_cached_pods`: RSS before and after as many Pods labelled as ours (of a RayCluster that
  does not exist) appear: what one more cached Pod costs, the slope of RSS over Pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ray_operator.bench.convergence import ClusterSet
from ray_operator.bench.kube import create_all
from ray_operator.bench.manifests import bench_cluster, cached_stray_pod, unrelated_pod
from ray_operator.bench.operator_process import OperatorProcess
from ray_operator.bench.report import Figure, Target
from ray_operator.bench.session import (
    API_REQUESTS,
    CACHED_OBJECTS,
    EVENTS_RECORDED,
    RECONCILES,
    WATCH_EVENTS,
    BenchSession,
    describe_verbs,
    verb_counts,
    writes,
)
from ray_operator.spec.kinds import POD, RAY_CLUSTER

MIB = 1024 * 1024
ECONOMY_CLUSTER = "economy"


def rss_figure(
    name: str, rss_bytes: int, *, target_mib: float | None = None, note: str = ""
) -> Figure:
    target = Target("<=", target_mib, "MiB") if target_mib is not None else None
    return Figure("M4", name, rss_bytes / MIB, "MiB", target, note=note)


async def measure_one_cluster(
    session: BenchSession, operator: OperatorProcess, clusters: ClusterSet
) -> None:
    """M3: requests to create one cluster with `workers` workers, until the operator is quiet."""
    workers = session.config.workers
    timeout = session.config.settle_timeout
    before = await session.wait_until_quiet(operator)
    await session.client.create(
        RAY_CLUSTER, bench_cluster(ECONOMY_CLUSTER, namespace=clusters.namespace, workers=workers)
    )
    clusters.add(ECONOMY_CLUSTER, workers)
    await clusters.pods.wait_for(ECONOMY_CLUSTER, count=workers + 1, within=timeout)
    await clusters.services.wait_for(ECONOMY_CLUSTER, count=1, within=timeout)
    after = await session.wait_until_quiet(operator)
    counts = verb_counts(before, after)
    total_writes = writes(counts)
    events = int(after.total(EVENTS_RECORDED) - before.total(EVENTS_RECORDED))
    session.report.add(
        Figure(
            "M3",
            f"create 1 cluster with W={workers} workers: writes",
            total_writes,
            "",
            Target("<=", workers + 4),
            note=f"{describe_verbs(counts)} (get/update: lease); {events} of the writes are Events",
        )
    )
    session.report.add(
        Figure(
            "M3", f"create 1 cluster with W={workers}: writes besides Events", total_writes - events
        )
    )


async def measure_idle(
    session: BenchSession, operator: OperatorProcess, *, cluster_count: int
) -> None:
    """M3/M5/M4 over the idle period: requests by verb, LISTs, CPU share of a core, RSS."""
    seconds = session.config.idle_seconds
    before = await session.wait_until_quiet(operator)
    start = operator.sample()
    session.progress(f"idle period: {seconds:.0f}s with {cluster_count} clusters")
    await asyncio.sleep(seconds)
    end = operator.sample()
    after = await operator.metrics()
    counts = verb_counts(before, after)
    # A watch ends when the API server says (its timeoutSeconds, 300-360 s here) and is renewed
    # with one request, as client-go's informers renew theirs every 5-10 min: the price of
    # watching, counted apart.
    non_lease = {verb: n for verb, n in counts.items() if verb not in ("get", "update", "watch")}
    reconciles = int(after.total(RECONCILES) - before.total(RECONCILES))
    events = int(after.total(WATCH_EVENTS) - before.total(WATCH_EVENTS))
    cpu_share = 100 * (end.cpu_seconds - start.cpu_seconds) / (end.monotonic - start.monotonic)
    add = session.report.add
    add(
        Figure(
            "M3",
            f"idle {seconds:.0f} s, {cluster_count} clusters: requests besides lease and watch "
            "renewals",
            sum(non_lease.values()),
            "",
            Target("==", 0),
            note=f"all requests: {describe_verbs(counts)}; {reconciles} reconciles, "
            f"{events} watch events",
        )
    )
    add(Figure("M3", f"idle {seconds:.0f} s: lease renewals (update)", counts.get("update", 0)))
    add(Figure("M3", f"idle {seconds:.0f} s: watch renewals", counts.get("watch", 0)))
    add(Figure("M3", f"idle {seconds:.0f} s: LISTs", counts.get("list", 0), "", Target("==", 0)))
    add(
        Figure(
            "M5",
            f"idle CPU with {cluster_count} clusters",
            cpu_share,
            "% of a core",
            Target("<", 1, "% of a core"),
            note=f"{end.cpu_seconds - start.cpu_seconds:.2f} CPU-s over {seconds:.0f} s",
        )
    )
    add(
        rss_figure(
            f"RSS with {cluster_count} clusters, after the idle period",
            end.rss_bytes,
            target_mib=70,
        )
    )


async def measure_unrelated_pods(session: BenchSession, operator: OperatorProcess) -> None:
    """M4: the RSS that `unrelated_pods` bare Pods in a watched namespace add (should be ~0)."""
    count = session.config.unrelated_pods
    namespace = session.names.unrelated
    before_metrics = await session.wait_until_quiet(operator)
    before = operator.sample()
    session.progress(f"creating {count} unrelated Pods in {namespace}")
    await create_all(
        session.client,
        ((POD, unrelated_pod(f"stray-{index:05d}", namespace=namespace)) for index in range(count)),
        concurrency=session.config.concurrency,
    )
    after_metrics = await session.wait_until_quiet(operator)
    after = operator.sample()
    pod_events = after_metrics.total(WATCH_EVENTS, kind="Pod") - before_metrics.total(
        WATCH_EVENTS, kind="Pod"
    )
    requests = after_metrics.total(API_REQUESTS) - before_metrics.total(API_REQUESTS)
    session.report.add(
        rss_figure(
            f"RSS added by {count} unrelated Pods in another namespace",
            after.rss_bytes - before.rss_bytes,
            target_mib=1,
            note=f"{before.rss_bytes / MIB:.1f} → {after.rss_bytes / MIB:.1f} MiB; the operator "
            f"received {pod_events:.0f} Pod watch events and sent {requests:.0f} requests",
        )
    )


STRAY = "stray"
"""The RayCluster the stray Pods of `measure_cached_pods` name; it does not exist."""
CACHED_POD_TARGET_KIB = 2.0


async def measure_cached_pods(
    session: BenchSession, operator: OperatorProcess, *, watched: Sequence[str]
) -> OperatorProcess:
    """M4: RSS per cached Pod (≤ 2 KiB), from two fresh processes: one started before and one
    after `unrelated_pods` more Pods labelled as the operator's appear. Fresh ones, because a
    process that ran a while holds freed memory that new objects fill without growing. Stops
    `operator` and returns the process left running."""
    count = session.config.unrelated_pods
    namespace = session.names.unrelated
    running = operator
    try:
        await running.stop()
        running = await session.start_operator(watched)
        before_metrics = await session.wait_until_quiet(running)
        before = running.sample()
        session.progress(f"creating {count} Pods labelled as the operator's in {namespace}")
        await create_all(
            session.client,
            (
                (POD, cached_stray_pod(f"cached-{i:05d}", namespace=namespace, cluster=STRAY))
                for i in range(count)
            ),
            concurrency=session.config.concurrency,
        )
        await session.wait_until_quiet(running)
        await running.stop()
        running = await session.start_operator(watched)
        after_metrics = await session.wait_until_quiet(running)
        after = running.sample()
    except BaseException:
        await running.stop()
        raise
    added = after_metrics.total(CACHED_OBJECTS, kind="Pod") - before_metrics.total(
        CACHED_OBJECTS, kind="Pod"
    )
    session.report.add(
        Figure(
            "M4",
            f"RSS per cached Pod (fresh processes, {count} more Pods of the operator's)",
            (after.rss_bytes - before.rss_bytes) / max(added, 1) / 1024,
            "KiB",
            Target("<=", CACHED_POD_TARGET_KIB, "KiB"),
            note=f"{before.rss_bytes / MIB:.1f} → {after.rss_bytes / MIB:.1f} MiB for "
            f"{added:.0f} more cached Pods",
        )
    )
    return running
