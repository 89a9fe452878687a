"""M6 restart: a new operator process facing clusters that are already converged.

The running operator is stopped (SIGTERM: it releases its lease), a new one is spawned, and the
clock runs from the spawn — interpreter start-up included, as a user's restart would — to
/readyz (every cache synced) and to its reconcile counter reaching the number of RayClusters
(every cluster reconciled once). Then, once it is quiet, every write it made is counted: a
restart that finds everything as it should be must write nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from ray_operator.bench.operator_process import MetricsSnapshot, OperatorProcess
from ray_operator.bench.report import Figure, Target
from ray_operator.bench.session import (
    RECONCILES,
    BenchSession,
    describe_verbs,
    verb_counts,
    writes,
)
from ray_operator.spec.kinds import RAY_CLUSTER

# Each scrape costs the operator CPU (~60 ms at 1000 clusters: it renders gauges per cluster),
# CPU the restart then lacks: twice a second is the compromise between resolution and disturbance.
POLL_SECONDS = 0.5


async def measure_restart(
    session: BenchSession, operator: OperatorProcess, *, cluster_count: int, watched: Sequence[str]
) -> OperatorProcess:
    """Stop `operator`, start a new one; M6's figures. Returns the new (running) operator."""
    await session.wait_until_quiet(operator)
    stop_started = time.monotonic()
    await operator.stop()
    stopped_in = time.monotonic() - stop_started
    restarted = await session.start_operator(watched)
    try:
        await _measure(session, restarted, cluster_count=cluster_count, stopped_in=stopped_in)
    except BaseException:
        await restarted.stop()
        raise
    return restarted


async def _measure(
    session: BenchSession, operator: OperatorProcess, *, cluster_count: int, stopped_in: float
) -> None:
    # start_operator waited for /readyz already, polling every 20 ms from the spawn.
    ready = operator.ready_after
    deadline = time.monotonic() + session.config.settle_timeout
    while True:
        snapshot = await operator.metrics()
        if snapshot.total(RECONCILES, kind=RAY_CLUSTER.kind) >= cluster_count:
            reconciled = time.monotonic() - operator.started_at
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"restarted operator did not reconcile {cluster_count} clusters")
        await asyncio.sleep(POLL_SECONDS)
    after = await session.wait_until_quiet(operator)
    counts = verb_counts(MetricsSnapshot({}), after)  # a new process counts from zero
    add = session.report.add
    add(
        Figure(
            "M6",
            f"restart with {cluster_count} clusters: spawn → /readyz",
            ready,
            "s",
            Target("<=", 1.5, "s"),
            note=f"the old process took {stopped_in:.2f} s to stop",
        )
    )
    add(
        Figure(
            "M6",
            "restart: spawn → every cluster reconciled once",
            reconciled,
            "s",
            Target("<=", 3, "s"),
            note=f"polled every {POLL_SECONDS} s",
        )
    )
    add(
        Figure(
            "M6",
            "restart: writes",
            writes(counts),
            "",
            Target("==", 0),
            note=f"all requests of the new process: {describe_verbs(counts)}",
        )
    )
    add(
        Figure(
            "M6",
            "restart: RSS of the new process with every cluster cached",
            operator.sample().rss_bytes / (1024 * 1024),
            "MiB",
        )
    )
