"""One benchmark run's shared state: the harness's API client, namespaces, operator processes.

`BenchSession` is what every scenario module receives. It names the run's namespaces (a random
prefix, so a run can share a cluster with others), starts operator processes watching them, and
knows when an operator has gone quiet: no watch event, no reconcile and no write (lease renewals
aside) for `quiet_seconds`, with an empty queue. Progress goes to stderr, figures to the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import client as kube_client

from ray_operator.bench.config import BenchConfig
from ray_operator.bench.operator_process import MetricsSnapshot, OperatorProcess
from ray_operator.bench.report import Report
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import NotFound
from ray_operator.spec.kinds import LEASE

API_REQUESTS = "ray_operator_api_requests_total"
RECONCILES = "ray_operator_reconcile_total"
WATCH_EVENTS = "ray_operator_watch_events_total"
EVENTS_RECORDED = "ray_operator_events_total"
CACHED_OBJECTS = "ray_operator_cache_objects"
RECONCILE_SECONDS = "ray_operator_reconcile_duration_seconds"
API_SECONDS = "ray_operator_api_request_duration_seconds"

WRITE_VERBS = ("create", "patch", "apply", "delete")
"""Verbs the controllers write with. The Lease is read with `get` and renewed with `update` (PUT),
which no controller uses, so lease traffic is told apart by verb."""
LEASE_VERBS = ("get", "update")

READY_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class Namespaces:
    """The namespaces of one run, all under one random prefix."""

    prefix: str

    @classmethod
    def fresh(cls) -> Namespaces:
        return cls(f"bench-{secrets.token_hex(3)}")

    def clusters(self, count: int) -> str:
        """Where the M1 run of `count` clusters (and for the largest, M2..M6) lives."""
        return f"{self.prefix}-clusters-{count}"

    def raw(self, count: int) -> str:
        """Where the bare client measures the ceiling for `count` clusters."""
        return f"{self.prefix}-raw-{count}"

    @property
    def unrelated(self) -> str:
        """Where M4's unrelated Pods go."""
        return f"{self.prefix}-unrelated"

    @property
    def system(self) -> str:
        """The operator's Lease."""
        return f"{self.prefix}-system"


def verb_counts(before: MetricsSnapshot, after: MetricsSnapshot) -> dict[str, int]:
    """API requests by verb between two scrapes (verbs with none left out)."""
    old = before.by_label(API_REQUESTS, "verb")
    new = after.by_label(API_REQUESTS, "verb")
    counts = {verb: int(new[verb] - old.get(verb, 0.0)) for verb in sorted(new)}
    return {verb: count for verb, count in counts.items() if count}


def writes(counts: dict[str, int]) -> int:
    """Controller writes among `verb_counts` (lease renewals are `update`, not counted)."""
    return sum(counts.get(verb, 0) for verb in WRITE_VERBS)


def mean_seconds(
    before: MetricsSnapshot, after: MetricsSnapshot, histogram: str, **labels: str
) -> float | None:
    """The mean of a histogram's observations between two scrapes (None: there were none)."""
    count = after.total(f"{histogram}_count", **labels) - before.total(
        f"{histogram}_count", **labels
    )
    total = after.total(f"{histogram}_sum", **labels) - before.total(f"{histogram}_sum", **labels)
    return total / count if count else None


def describe_activity(before: MetricsSnapshot, after: MetricsSnapshot) -> str:
    """Reconciles and their mean duration, and the mean latency of the operator's creates."""
    reconciles = after.total(RECONCILES) - before.total(RECONCILES)
    reconcile = mean_seconds(before, after, RECONCILE_SECONDS)
    create = mean_seconds(before, after, API_SECONDS, verb="create")
    parts = [f"{reconciles:.0f} reconciles"]
    if reconcile is not None:
        parts.append(f"{1000 * reconcile:.0f} ms mean reconcile")
    if create is not None:
        parts.append(f"{1000 * create:.0f} ms mean create request")
    return ", ".join(parts)


def describe_verbs(counts: dict[str, int]) -> str:
    return ", ".join(f"{verb} {count}" for verb, count in counts.items()) or "none"


class BenchSession:
    """The harness's client, the run's namespaces and how to start and watch the operator."""

    def __init__(
        self,
        config: BenchConfig,
        *,
        kubeconfig: Path,
        api: kube_client.ApiClient,
        client: KubeClient,
        work_dir: Path,
        report: Report,
        scope_to_namespaces: bool,
    ) -> None:
        self.config = config
        self.kubeconfig = kubeconfig
        self.api = api
        self.client = client
        self.work_dir = work_dir
        self.report = report
        self.names = Namespaces.fresh()
        self.scope_to_namespaces = scope_to_namespaces
        self.lease_name = f"{self.names.prefix}-leader"
        self._started = time.monotonic()
        self._replicas = itertools.count(1)

    def progress(self, message: str) -> None:
        """A progress line on stderr (stdout carries only the result)."""
        print(
            f"[bench {time.monotonic() - self._started:7.1f}s] {message}",
            file=sys.stderr,
            flush=True,
        )

    async def start_operator(self, watched: Sequence[str]) -> OperatorProcess:
        """Start `ray-operator run` (watching `watched`, or everything) and wait until ready."""
        number = next(self._replicas)
        operator = OperatorProcess(
            self.kubeconfig,
            namespaces=watched if self.scope_to_namespaces else (),
            lease_namespace=self.names.system,
            lease_name=self.lease_name,
            identity=f"bench-operator-{number}",
            config=self.config,
            log_path=self.work_dir / f"operator-{number}.log",
        )
        await operator.start()
        try:
            seconds = await operator.wait_ready(within=READY_TIMEOUT_SECONDS)
            await self.wait_until_leading(operator)
        except BaseException:
            await operator.stop()
            raise
        self.progress(
            f"operator {number} (pid {operator.pid}) ready after {seconds:.2f}s; "
            f"log: {operator.log_path}"
        )
        return operator

    async def wait_until_leading(self, operator: OperatorProcess) -> None:
        """Until the operator holds the lease (at once without leader election)."""
        if not self.config.leader_elect:
            return
        # Read the Lease rather than scrape /metrics: at 1000 clusters a scrape costs the operator
        # ~60 ms of CPU, and this polls while it is busy starting.
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(NotFound):
                lease = await self.client.get(LEASE, self.lease_name, namespace=self.names.system)
                if (lease.get("spec") or {}).get("holderIdentity") == operator.identity:
                    return
            await asyncio.sleep(0.02)
        raise TimeoutError(f"operator never became the leader; see {operator.log_path}")

    async def wait_until_quiet(self, operator: OperatorProcess) -> MetricsSnapshot:
        """Until the operator did nothing for `quiet_seconds`; its metrics at that point."""
        config = self.config
        # Each scrape costs the operator a little CPU: a few per quiet period, not more.
        interval = min(1.0, config.quiet_seconds / 3)
        deadline = time.monotonic() + config.settle_timeout
        last: tuple[float, ...] | None = None
        since = time.monotonic()
        while time.monotonic() < deadline:
            snapshot = await operator.metrics()
            activity = (
                snapshot.total(WATCH_EVENTS),
                snapshot.total(RECONCILES),
                *(snapshot.total(API_REQUESTS, verb=verb) for verb in WRITE_VERBS),
            )
            busy = snapshot.total("ray_operator_workqueue_depth") + snapshot.total(
                "ray_operator_workqueue_in_flight"
            )
            now = time.monotonic()
            if activity != last or busy:
                last, since = activity, now
            elif now - since >= config.quiet_seconds:
                return snapshot
            await asyncio.sleep(interval)
        raise TimeoutError(f"operator still busy after {config.settle_timeout:.0f}s")
