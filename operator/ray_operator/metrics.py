"""Prometheus metrics: the operator's own instruments, and per-resource gauges read from the cache.

One `Metrics` object owns a private `CollectorRegistry`; it is created by the app and passed to
whoever records something (API client, watchers, queue, workers, leader election), so tests get a
fresh registry each and nothing lives at module level.

The per-resource gauges mirror KubeRay's (`kuberay_cluster_info`,
`kuberay_cluster_condition_provisioned`, `kuberay_cluster_provisioned_duration_seconds`,
`kuberay_job_*`, `kuberay_service_*`) with the same
labels under a `ray_operator_` prefix, so dashboards adapt by renaming. They are computed at scrape
time from the watch cache (`ResourceCollector`), so there is no state to keep in step and no stale
series after an object is deleted.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ray_operator import __version__
from ray_operator.runtime.kinds import RAY_CLUSTER, RAY_JOB, RAY_SERVICE, Kind

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

    def watch_resources(self, cache: ResourceSource) -> None:
        """Expose the per-resource gauges (`ray_operator_cluster_info`, …) read from `cache`."""
        self.registry.register(ResourceCollector(cache))

    def exposition(self) -> bytes:
        """Everything in the Prometheus text format."""
        return generate_latest(self.registry)


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

    def _clusters(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            f"{PREFIX}_cluster_info",
            "Metadata about RayCluster objects.",
            labels=["name", "namespace", "owner_kind"],
        )
        provisioned = GaugeMetricFamily(
            f"{PREFIX}_cluster_condition_provisioned",
            "Whether the RayCluster's RayClusterProvisioned condition is true.",
            labels=["name", "namespace", "condition"],
        )
        duration = GaugeMetricFamily(
            f"{PREFIX}_cluster_provisioned_duration_seconds",
            "Seconds from a RayCluster's creation until RayClusterProvisioned became true.",
            labels=["name", "namespace"],
        )
        for cluster in self._cache.list(RAY_CLUSTER):
            name, namespace = _name(cluster)
            info.add_metric([name, namespace, _owner_kind(cluster)], 1)
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
        yield from (info, provisioned, duration)

    def _jobs(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            f"{PREFIX}_job_info", "Metadata about RayJob objects.", labels=["name", "namespace"]
        )
        deployment = GaugeMetricFamily(
            f"{PREFIX}_job_deployment_status",
            "The RayJob's current jobDeploymentStatus.",
            labels=["name", "namespace", "deployment_status"],
        )
        execution = GaugeMetricFamily(
            f"{PREFIX}_job_execution_duration_seconds",
            "Seconds from a RayJob's start to a terminal or Retrying jobDeploymentStatus.",
            labels=["name", "namespace", "job_deployment_status", "retry_count"],
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
        info = GaugeMetricFamily(
            f"{PREFIX}_service_info",
            "Metadata about RayService objects.",
            labels=["name", "namespace"],
        )
        ready = GaugeMetricFamily(
            f"{PREFIX}_service_condition_ready",
            "Whether the RayService's Ready condition is true.",
            labels=["name", "namespace", "condition"],
        )
        upgrading = GaugeMetricFamily(
            f"{PREFIX}_service_condition_upgrade_in_progress",
            "Whether the RayService's UpgradeInProgress condition is true.",
            labels=["name", "namespace", "condition"],
        )
        for service in self._cache.list(RAY_SERVICE):
            name, namespace = _name(service)
            info.add_metric([name, namespace], 1)
            for family, condition_type in ((ready, "Ready"), (upgrading, "UpgradeInProgress")):
                condition = _condition(service, condition_type)
                is_true = condition is not None and condition.get("status") == "True"
                family.add_metric([name, namespace, "true" if is_true else "false"], 1)
        yield from (info, ready, upgrading)


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


def _seconds_between(start: object, end: object) -> float | None:
    if not isinstance(start, str) or not isinstance(end, str):
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None
