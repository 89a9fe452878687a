"""M1 convergence (with the bare-client ceiling) and M5's CPU per watch event.

`measure_ceiling`: with no operator running, a bare client creates the 4N Pods and N Services the
operator would create, `concurrency` at a time — the API server's create rate on this machine.

`measure_convergence`: N RayClusters are created as fast as the API server takes them; the clock
runs from the first create until the harness's own watches have seen all 4N Pods and N head
Services. Then the operator is left to settle (KWOK makes the Pods Running, statuses follow) and
the whole episode's operator CPU is divided by the watch events it received. Duplicates are ADDED
Pod events beyond 4 per cluster; conflicts are 409 answers in the operator's own request counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ray_operator.bench.kube import create_all, wipe_namespace
from ray_operator.bench.manifests import bench_cluster, raw_pod_and_service_bodies
from ray_operator.bench.operator_process import OperatorProcess
from ray_operator.bench.report import Figure, Target
from ray_operator.bench.session import API_REQUESTS, WATCH_EVENTS, BenchSession, describe_activity
from ray_operator.bench.watching import ANY_CLUSTER, ArrivalWatch
from ray_operator.runtime.client import KubeClient
from ray_operator.spec.kinds import OWNED_SELECTOR, POD, RAY_CLUSTER, SERVICE

WORKERS_PER_CLUSTER = 3
PODS_PER_CLUSTER = 1 + WORKERS_PER_CLUSTER
OBJECTS_PER_CLUSTER = PODS_PER_CLUSTER + 1  # and the head Service


@dataclass(slots=True)
class ClusterSet:
    """The converged clusters of one M1 run and the watches that saw their Pods and Services."""

    namespace: str
    initial: list[str]
    """The clusters M1 created (3 workers each), in creation order."""
    pods: ArrivalWatch
    services: ArrivalWatch
    replicas: dict[str, int] = field(default_factory=dict)
    """Desired workers of every cluster in the namespace, as last set by the harness."""

    def __post_init__(self) -> None:
        for name in self.initial:
            self.replicas.setdefault(name, WORKERS_PER_CLUSTER)

    @classmethod
    async def watch(
        cls, client: KubeClient, namespace: str, count: int, *, label_selector: str = OWNED_SELECTOR
    ) -> ClusterSet:
        """Start watching the Pods and Services (selected by `label_selector`) of the `count`
        clusters of `cluster_names` about to be created in `namespace`."""
        pods = ArrivalWatch(client, POD, namespace=namespace, label_selector=label_selector)
        services = ArrivalWatch(client, SERVICE, namespace=namespace, label_selector=label_selector)
        await pods.start()
        await services.start()
        return cls(namespace, cluster_names(count), pods, services)

    def add(self, name: str, workers: int) -> None:
        """Record a cluster the harness created later."""
        self.replicas[name] = workers

    async def stop(self) -> None:
        await self.pods.stop()
        await self.services.stop()


def cluster_names(count: int) -> list[str]:
    return [f"c{index:04d}" for index in range(count)]


def convergence_target(count: int) -> Target:
    """≤ 3 s for 100 clusters, ≤ 30 s for 1000: 30 ms per cluster, never below 3 s."""
    return Target("<=", max(3.0, 0.03 * count), "s")


async def measure_ceiling(session: BenchSession, count: int) -> float:
    """Objects/s of a bare client creating what `count` clusters need; the namespace is wiped."""
    namespace = session.names.raw(count)
    objects = []
    for name in cluster_names(count):
        pods, service = raw_pod_and_service_bodies(name, namespace=namespace)
        objects += [(POD, pod) for pod in pods] + [(SERVICE, service)]
    seconds = await create_all(session.client, objects, concurrency=session.config.concurrency)
    rate = len(objects) / seconds
    session.report.add(
        Figure(
            "M1",
            f"N={count}: bare-client create ceiling",
            rate,
            "objects/s",
            note=f"{len(objects)} creates in {seconds:.2f} s, "
            f"{session.config.concurrency} in flight",
        )
    )
    session.progress(f"ceiling for N={count}: {rate:.0f} objects/s; wiping {namespace}")
    await wipe_namespace(session.api, namespace)
    return rate


async def measure_convergence(
    session: BenchSession, operator: OperatorProcess, count: int, *, ceiling: float | None
) -> ClusterSet:
    """M1 for `count` clusters (and M5's CPU per watch event); the converged `ClusterSet`."""
    namespace = session.names.clusters(count)
    timeout = session.config.settle_timeout
    clusters = await ClusterSet.watch(session.client, namespace, count)
    pods, services = clusters.pods, clusters.services
    before = await operator.metrics()
    cpu_before = operator.sample()
    scrapes_before = operator.scrapes
    started = time.monotonic()
    create_seconds = await create_all(
        session.client,
        ((RAY_CLUSTER, bench_cluster(name, namespace=namespace)) for name in clusters.initial),
        concurrency=session.config.concurrency,
    )
    last_pod = await pods.wait_for(ANY_CLUSTER, count=PODS_PER_CLUSTER * count, within=timeout)
    last_service = await services.wait_for(ANY_CLUSTER, count=count, within=timeout)
    seconds = max(last_pod, last_service) - started
    session.progress(f"N={count}: converged in {seconds:.2f}s; waiting for the operator to settle")
    after = await session.wait_until_quiet(operator)
    cpu_after = operator.sample()
    # The harness's own scrapes while waiting for quiet are not the operator's work: take them off.
    scrapes = operator.scrapes - scrapes_before
    scrape_cpu = scrapes * await operator.scrape_cost()

    rate = OBJECTS_PER_CLUSTER * count / seconds
    duplicates = sum(max(0, seen - PODS_PER_CLUSTER) for seen in pods.counts_by_cluster().values())
    conflicts = after.total(API_REQUESTS, code="409") - before.total(API_REQUESTS, code="409")
    events = after.total(WATCH_EVENTS) - before.total(WATCH_EVENTS)
    cpu = cpu_after.cpu_seconds - cpu_before.cpu_seconds - scrape_cpu
    add = session.report.add
    add(
        Figure(
            "M1",
            f"N={count}: all {PODS_PER_CLUSTER * count} Pods + {count} head Services exist",
            seconds,
            "s",
            convergence_target(count),
            note=f"the {count} RayCluster creates took {create_seconds:.2f} s; "
            f"{describe_activity(before, after)}",
        )
    )
    add(Figure("M1", f"N={count}: operator create rate", rate, "objects/s"))
    if ceiling:
        add(
            Figure(
                "M1",
                f"N={count}: share of the bare-client ceiling",
                100 * rate / ceiling,
                "%",
                Target(">=", 75, "%"),
            )
        )
    add(
        Figure(
            "M1",
            f"N={count}: duplicate Pods (ADDED events beyond 4 per cluster)",
            duplicates,
            "",
            Target("==", 0),
        )
    )
    add(Figure("M1", f"N={count}: 409 conflicts", conflicts, "", Target("==", 0)))
    add(
        Figure(
            "M5",
            f"N={count}: operator CPU per watch event during M1",
            1e6 * cpu / events if events else None,
            "µs",
            Target("<=", 60, "µs"),
            note=f"{cpu:.2f} CPU-s / {events:.0f} events, creates until settled "
            f"({scrape_cpu:.2f} CPU-s of {scrapes} /metrics scrapes taken off)",
        )
    )
    return clusters
