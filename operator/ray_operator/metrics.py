"""Prometheus metrics: the operator's own instruments, and per-resource gauges read from the cache.

One `Metrics` object owns a private `CollectorRegistry`; it is created by the app and passed to
whoever records something (API client, watchers, queue, workers, leader election), so tests get a
fresh registry each and nothing lives at module level.

The per-resource gauges mirror KubeRay's (`kuberay_cluster_info`,
`kuberay_cluster_condition_provisioned`, `kuberay_cluster_provisioned_duration_seconds`,
`kuberay_job_*`, `kuberay_service_*`) with the same
labels under a `ray_operator_` prefix, so dashboards adapt by renaming; KubeRay has none for a
RayCluster's state, RayCronJobs or RayServeGraphs, ours follow the same pattern
(`ray_operator_cluster_state`, `ray_operator_cronjob_*`, `ray_operator_servegraph_*`). They are
computed at scrape time from the watch cache (`ResourceCollector`), so there is no state to keep in
step and no stale series after an object is deleted.

The process's own RSS, CPU time and open files (`process_*`, prometheus_client's process
collector) are on the same registry: a private registry has none unless it is given one.
config/grafana/ray-operator.json and config/prometheus/rules.yaml read these names (a test checks
that every name they use is served).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from ray_operator import __version__
from ray_operator.spec.kinds import (
    RAY_CLUSTER,
    RAY_CRON_JOB,
    RAY_JOB,
    RAY_SERVE_GRAPH,
    RAY_SERVICE,
    Kind,
)

PREFIX = "ray_operator"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The operator's instruments, registered in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.build_info = Gauge(
            f"{PREFIX}_build_info",
            "Always 1; the labels say which operator runs: its version and its Python's.",
            ["version", "python"],
            registry=r,
        )
        self.build_info.labels(version=__version__, python=python_version()).set(1)
        self.reconcile_total = Counter(
            f"{PREFIX}_reconcile_total",
            "Reconciles by kind and result "
            "(success, error, requeue, not_leader, cache_not_synced).",
            ["kind", "result"],
            registry=r,
        )
        self.reconcile_errors_total = Counter(
            f"{PREFIX}_reconcile_errors_total",
            "Reconciles that raised, by kind and error type.",
            ["kind", "error"],
            registry=r,
        )
        self.reconcile_duration_seconds = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Time spent in one reconcile, by kind.",
            ["kind"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.queue_depth = Gauge(
            f"{PREFIX}_workqueue_depth", "Keys waiting in the work queue.", registry=r
        )
        self.queue_adds_total = Counter(
            f"{PREFIX}_workqueue_adds_total",
            "Keys added to the work queue (before coalescing).",
            registry=r,
        )
        self.queue_wait_seconds = Histogram(
            f"{PREFIX}_workqueue_queue_duration_seconds",
            "Time a key waited in the work queue before a worker took it.",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60),
        )
        self.queue_in_flight = Gauge(
            f"{PREFIX}_workqueue_in_flight", "Keys being reconciled right now.", registry=r
        )
        self.queue_retries_total = Counter(
            f"{PREFIX}_workqueue_retries_total",
            "Keys requeued with backoff after an error.",
            registry=r,
        )
        self.watch_restarts_total = Counter(
            f"{PREFIX}_watch_restarts_total",
            "Watch streams restarted, by kind and reason (closed, error, inactivity, gone).",
            ["kind", "reason"],
            registry=r,
        )
        self.watch_events_total = Counter(
            f"{PREFIX}_watch_events_total",
            "Watch events received, by kind and type.",
            ["kind", "type"],
            registry=r,
        )
        self.cache_objects = Gauge(
            f"{PREFIX}_cache_objects",
            "Objects held in the watch cache, by kind.",
            ["kind"],
            registry=r,
        )
        self.api_requests_total = Counter(
            f"{PREFIX}_api_requests_total",
            "Requests to the Kubernetes API by verb and HTTP code (`error`: no answer).",
            ["verb", "code"],
            registry=r,
        )
        self.api_request_duration_seconds = Histogram(
            f"{PREFIX}_api_request_duration_seconds",
            "Kubernetes API request latency by verb.",
            ["verb"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.leader = Gauge(
            f"{PREFIX}_leader_election_status",
            "1 while this replica holds the lease (and may reconcile), else 0.",
            ["lease"],
            registry=r,
        )
        self.events_total = Counter(
            f"{PREFIX}_events_total",
            "Kubernetes Events recorded, by type and reason.",
            ["type", "reason"],
            registry=r,
        )
        self.events_dropped_total = Counter(
            f"{PREFIX}_events_dropped_total",
            "Kubernetes Events not written because too many waited for the API server.",
            registry=r,
        )

        self.admission_reviews_total = Counter(
            f"{PREFIX}_admission_reviews_total",
            "Admission reviews answered, by webhook (validate, mutate), kind and result "
            "(allowed, denied, malformed).",
            ["webhook", "kind", "result"],
            registry=r,
        )
        self.admission_duration_seconds = Histogram(
            f"{PREFIX}_admission_review_duration_seconds",
            "Time to answer one admission review (read body excluded), by webhook and kind.",
            ["webhook", "kind"],
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.servegraph_fetches_total = Counter(
            f"{PREFIX}_servegraph_fetches_total",
            "RayServeGraph document fetches by result (Fetched, NotModified, or the reason "
            "of the Fetched condition when it failed).",
            ["result"],
            registry=r,
        )
        ProcessCollector(registry=r)

    def watch_resources(self, cache: ResourceSource) -> None:
        """Expose the per-resource gauges (`ray_operator_cluster_info`, …) read from `cache`."""
        self.registry.register(ResourceCollector(cache))

    def exposition(self) -> bytes:
        """Everything in the Prometheus text format."""
        return text_format(self.registry)


OPENMETRICS_ONLY_SUFFIXES = ("_created", "_gsum", "_gcount")
"""Samples the text format has no place for in their family: each becomes a gauge family of its
own after it (`x_created` of a counter `x`), as prometheus_client's own exposition writes them."""

PROMETHEUS_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}

go_float: Callable[[float], str] = floatToGoString
"""A sample value as Go writes it (`+Inf`, `NaN`, `1e+07`), as Prometheus reads it."""


def text_format(registry: Collector) -> bytes:
    """`registry` in the Prometheus text format (0.0.4), byte for byte as prometheus_client's
    `generate_latest` writes it for our metrics (a test compares the two). Ours, because that
    module imports every server prometheus_client has (http.server, wsgiref, ASGI, urllib's
    opener: 0.6 MiB of the idle RSS) for one function of 50 lines."""
    lines: list[str] = []
    for metric in registry.collect():
        name = metric.name + {"counter": "_total", "info": "_info"}.get(metric.type, "")
        kind = (
            "untyped"
            if metric.type == "unknown"
            else PROMETHEUS_TYPES.get(metric.type, metric.type)
        )
        help_text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines += [f"# HELP {name} {help_text}\n", f"# TYPE {name} {kind}\n"]
        moved: dict[str, list[str]] = {}
        for sample in metric.samples:
            suffix = sample.name.removeprefix(metric.name)
            if suffix in OPENMETRICS_ONLY_SUFFIXES:
                moved.setdefault(suffix, []).append(sample_line(sample))
            else:
                lines.append(sample_line(sample))
        for suffix, samples in sorted(moved.items()):
            lines += [
                f"# HELP {metric.name}{suffix} {help_text}\n",
                f"# TYPE {metric.name}{suffix} gauge\n",
                *samples,
            ]
    return "".join(lines).encode()


def sample_line(sample: Sample) -> str:
    """`name{label="value",...} value [timestamp in ms]`, labels sorted, values escaped."""
    labels = ",".join(
        f'{label}="{escape_label_value(value)}"' for label, value in sorted(sample.labels.items())
    )
    timestamp = "" if sample.timestamp is None else f" {int(float(sample.timestamp) * 1000):d}"
    braces = f"{{{labels}}}" if labels else ""
    return f"{sample.name}{braces} {go_float(sample.value)}{timestamp}\n"


def escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class ResourceSource(Protocol):
    """What the resource collector reads: the cache's objects of one kind."""

    def list(self, kind: Kind, *, namespace: str | None = None) -> Sequence[Mapping[str, Any]]:
        """All cached objects of `kind`."""
        ...


class ResourceCollector(Collector):
    """Per-resource gauges comparable to KubeRay's, computed from the cache at scrape time."""

    def __init__(self, cache: ResourceSource) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        yield from self._clusters()
        yield from self._jobs()
        yield from self._services()
        yield from self._cron_jobs()
        yield from self._serve_graphs()

    def _clusters(self) -> Iterator[Metric]:
        info = _gauge(
            "cluster_info",
            "Metadata about RayCluster objects.",
            ["name", "namespace", "owner_kind"],
        )
        provisioned = _gauge(
            "cluster_condition_provisioned",
            "Whether the RayCluster's RayClusterProvisioned condition is true.",
            ["name", "namespace", "condition"],
        )
        duration = _gauge(
            "cluster_provisioned_duration_seconds",
            "Seconds from a RayCluster's creation until RayClusterProvisioned became true.",
            ["name", "namespace"],
        )
        state = _gauge(
            "cluster_state",
            "The RayCluster's status.state (`unknown` until the operator set one).",
            ["name", "namespace", "state"],
        )
        conditions = _gauge(
            "cluster_condition",
            "The RayCluster's conditions (HeadPodReady, RayClusterProvisioned, ...) by status.",
            ["name", "namespace", "type", "status"],
        )
        for cluster in self._cache.list(RAY_CLUSTER):
            name, namespace = _name(cluster)
            info.add_metric([name, namespace, _owner_kind(cluster)], 1)
            current = str((cluster.get("status") or {}).get("state") or "unknown")
            state.add_metric([name, namespace, current], 1)
            for condition in (cluster.get("status") or {}).get("conditions") or ():
                kind_and_status = [str(condition.get("type")), str(condition.get("status"))]
                conditions.add_metric([name, namespace, *kind_and_status], 1)
            condition = _condition(cluster, "RayClusterProvisioned")
            is_true = condition is not None and condition.get("status") == "True"
            provisioned.add_metric([name, namespace, "true" if is_true else "false"], 1)
            if is_true and condition is not None:
                seconds = _seconds_between(
                    cluster["metadata"].get("creationTimestamp"),
                    condition.get("lastTransitionTime"),
                )
                if seconds is not None:
                    duration.add_metric([name, namespace], seconds)
        yield from (info, state, conditions, provisioned, duration)

    def _jobs(self) -> Iterator[Metric]:
        info = _gauge("job_info", "Metadata about RayJob objects.", ["name", "namespace"])
        deployment = _gauge(
            "job_deployment_status",
            "The RayJob's current jobDeploymentStatus.",
            ["name", "namespace", "deployment_status"],
        )
        execution = _gauge(
            "job_execution_duration_seconds",
            "Seconds from a RayJob's start to a terminal or Retrying jobDeploymentStatus.",
            ["name", "namespace", "job_deployment_status", "retry_count"],
        )
        for job in self._cache.list(RAY_JOB):
            name, namespace = _name(job)
            status = job.get("status") or {}
            info.add_metric([name, namespace], 1)
            state = str(status.get("jobDeploymentStatus") or "")
            if state:
                deployment.add_metric([name, namespace, state], 1)
            if state in ("Complete", "Failed", "Retrying"):
                seconds = _seconds_between(status.get("startTime"), status.get("endTime"))
                if seconds is not None:
                    retries = str(status.get("failed") or 0)
                    execution.add_metric([name, namespace, state, retries], seconds)
        yield from (info, deployment, execution)

    def _services(self) -> Iterator[Metric]:
        info = _gauge("service_info", "Metadata about RayService objects.", ["name", "namespace"])
        ready = _gauge(
            "service_condition_ready",
            "Whether the RayService's Ready condition is true.",
            ["name", "namespace", "condition"],
        )
        upgrading = _gauge(
            "service_condition_upgrade_in_progress",
            "Whether the RayService's UpgradeInProgress condition is true.",
            ["name", "namespace", "condition"],
        )
        for service in self._cache.list(RAY_SERVICE):
            name, namespace = _name(service)
            info.add_metric([name, namespace], 1)
            for family, condition_type in ((ready, "Ready"), (upgrading, "UpgradeInProgress")):
                family.add_metric([name, namespace, _condition_is_true(service, condition_type)], 1)
        yield from (info, ready, upgrading)

    def _cron_jobs(self) -> Iterator[Metric]:
        labels = ["name", "namespace"]
        info = _gauge(
            "cronjob_info",
            "Metadata about RayCronJob objects: the schedule and its time zone.",
            [*labels, "schedule", "time_zone"],
        )
        suspended = _gauge("cronjob_suspended", "1 while the RayCronJob is suspended.", labels)
        active = _gauge(
            "cronjob_active_jobs",
            "RayJobs of the RayCronJob still running (status.active).",
            labels,
        )
        times = {
            field: _gauge(f"cronjob_{metric}_timestamp_seconds", help_text, labels)
            for field, metric, help_text in (
                ("lastScheduleTime", "last_schedule", "When a RayJob was last scheduled."),
                ("lastSuccessfulTime", "last_successful", "When a RayJob last completed."),
                ("nextScheduleTime", "next_schedule", "When the next RayJob is due."),
            )
        }
        for cron_job in self._cache.list(RAY_CRON_JOB):
            name, namespace = _name(cron_job)
            spec, status = cron_job.get("spec") or {}, cron_job.get("status") or {}
            schedule = [str(spec.get("schedule") or ""), str(spec.get("timeZone") or "")]
            info.add_metric([name, namespace, *schedule], 1)
            suspended.add_metric([name, namespace], 1 if spec.get("suspend") else 0)
            active.add_metric([name, namespace], len(status.get("active") or ()))
            for field, family in times.items():
                seconds = _timestamp(status.get(field))
                if seconds is not None:
                    family.add_metric([name, namespace], seconds)
        yield from (info, suspended, active, *times.values())

    def _serve_graphs(self) -> Iterator[Metric]:
        info = _gauge(
            "servegraph_info",
            "Metadata about RayServeGraph objects: the RayService they deploy.",
            ["name", "namespace", "rayservice"],
        )
        phase = _gauge(
            "servegraph_phase",
            "The RayServeGraph's status.phase (`unknown` until the operator set one).",
            ["name", "namespace", "phase"],
        )
        ready = _gauge(
            "servegraph_condition_ready",
            "Whether the RayServeGraph's Ready condition is true.",
            ["name", "namespace", "condition"],
        )
        for graph in self._cache.list(RAY_SERVE_GRAPH):
            name, namespace = _name(graph)
            status = graph.get("status") or {}
            info.add_metric([name, namespace, str(status.get("rayServiceName") or "")], 1)
            phase.add_metric([name, namespace, str(status.get("phase") or "unknown")], 1)
            ready.add_metric([name, namespace, _condition_is_true(graph, "Ready")], 1)
        yield from (info, phase, ready)


def _gauge(name: str, help_text: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", help_text, labels=list(labels))


def _condition_is_true(obj: Mapping[str, Any], condition_type: str) -> str:
    """ "true" when `obj` has the condition with status True, else "false" (KubeRay's label)."""
    condition = _condition(obj, condition_type)
    return "true" if condition is not None and condition.get("status") == "True" else "false"


def python_version() -> str:
    """The running interpreter's version, `3.12.1` (platform.python_version without platform)."""
    return ".".join(str(part) for part in sys.version_info[:3])


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj["metadata"]
    return str(metadata["name"]), str(metadata.get("namespace", ""))


def _owner_kind(obj: Mapping[str, Any]) -> str:
    for owner in obj["metadata"].get("ownerReferences") or ():
        if owner.get("controller") and owner.get("kind") in ("RayJob", "RayService"):
            return str(owner["kind"])
    return "None"


def _condition(obj: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == condition_type:
            return condition  # type: ignore[no-any-return]
    return None


def _timestamp(value: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, or None."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def _seconds_between(start: object, end: object) -> float | None:
    if not isinstance(start, str) or not isinstance(end, str):
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None
