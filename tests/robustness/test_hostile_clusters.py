"""One hostile RayCluster, applied without the webhook, does not take the operator down for others.

Each test runs `ray-operator run` as a separate process (issue 12, findings 1 and 2): a quantity
that takes seconds to parse, a cluster of 2^31 - 1 workers. Throughout, /healthz is probed every
100 ms from a thread of the test process and must always answer within a second (a liveness probe
would otherwise restart the operator into the same cluster); a healthy cluster must keep
converging in normal time; SIGTERM must be honoured; memory must stay bounded; and a delete must
stop creation within one batch.
"""

from __future__ import annotations

import time
from typing import Any

from ray_operator.controllers.raycluster import PODS_PER_RECONCILE

from tests.conftest import Kubectl
from tests.robustness.conftest import StartOperator
from tests.robustness.manifests import (
    as_text,
    huge_cluster,
    huge_quantity_cluster,
    ray_cluster,
)
from tests.robustness.observe import MIB, ApiServer, HealthProbe, PodWatch, mib, wait_for

HEALTHZ_BOUND = 1.0
"""Seconds /healthz may take at worst: a liveness probe's default `timeoutSeconds`."""
NORMAL_CONVERGENCE_MARGIN = 3.0
"""Seconds a healthy cluster may take beyond its baseline while a hostile one is around."""
SIGTERM_BOUND = 5.0
RSS_BOUND = 100 * MIB
"""Growth over the baseline allowed while a 2^31 - 1 worker cluster scales for 20 s."""
SCALE_OBSERVATION = 20.0
OBSERVED_PODS = 2000
"""The scale-up is watched for `SCALE_OBSERVATION` s or until this many Pods exist: the operator
caches every Pod it owns (~25 KiB each), which is memory that grows with Pods that exist, not with
the replicas asked for."""
POD_REMOVAL_BOUND = 90.0
"""Seconds for every Pod of a deleted cluster to be gone (thousands, at bounded parallelism)."""
LIMITS_PATH = "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits"
REPLICAS_PATH = "spec.workerGroupSpecs[0].replicas"
NO_POD_BOUND = ("--max-pods-per-cluster", str(2**32))
"""Lifts the default bound of Pods per cluster, so that 2^31 - 1 replicas really are scaled."""


def apply(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input_text=as_text(manifest))


def seconds_to_ready(api: ApiServer, namespace: str, name: str, *, within: float = 30.0) -> float:
    return wait_for(
        lambda: api.state(namespace, name) == "ready",
        timeout=within,
        what=f"RayCluster {name} ready",
    )


def invalid_spec_report(api: ApiServer, namespace: str, name: str, field: str) -> str | None:
    """The message of a Warning Event about `name` naming `field`, once its status also says so."""
    warnings = [
        event["message"]
        for event in api.events(namespace, name)
        if event.get("type") == "Warning" and field in event.get("message", "")
    ]
    cluster = api.ray_cluster(namespace, name) or {}
    conditions = (cluster.get("status") or {}).get("conditions") or []
    reported = any(c.get("status") == "True" and field in c.get("message", "") for c in conditions)
    return warnings[0] if warnings and reported else None


def report_of(api: ApiServer, namespace: str, name: str) -> str:
    """The Warning Events about `name`, for the test's output."""
    return "; ".join(
        f"{event['reason']}: {event['message'][:300]}"
        for event in api.events(namespace, name)
        if event.get("type") == "Warning"
    )


def test_a_huge_quantity_is_reported_while_health_and_other_clusters_stay_normal(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, api_server: ApiServer
) -> None:
    operator = start_operator()
    apply(kubectl, namespace, ray_cluster("baseline"))
    baseline = seconds_to_ready(api_server, namespace, "baseline")

    with HealthProbe(operator.health_url) as probe:
        observed_from = time.monotonic()
        apply(kubectl, namespace, huge_quantity_cluster("hostile"))
        apply(kubectl, namespace, ray_cluster("healthy"))
        meanwhile = seconds_to_ready(api_server, namespace, "healthy")
        wait_for(
            lambda: invalid_spec_report(api_server, namespace, "hostile", LIMITS_PATH),
            timeout=10,
            what="the hostile cluster reported with the field path",
        )
        reported_after = time.monotonic() - observed_from
        # Watch the health a while longer: a reconcile retried with backoff must not freeze it.
        wait_for(lambda: time.monotonic() - observed_from >= 10, timeout=15, what="10 s")

    print(
        f"\nhealthz: {probe.summary()}; ready in {baseline:.2f} s alone, {meanwhile:.2f} s beside"
    )
    print(f"reported {reported_after:.2f} s after: {report_of(api_server, namespace, 'hostile')}")
    assert not probe.failures, probe.failures[:5]
    assert probe.max_latency < HEALTHZ_BOUND, probe.summary()
    assert meanwhile <= baseline + NORMAL_CONVERGENCE_MARGIN, (baseline, meanwhile)
    assert api_server.pod_count(namespace, "ray.io/cluster=hostile") == 0
    assert "Traceback" not in operator.log()


def test_sigterm_is_honoured_while_a_hostile_quantity_is_being_reconciled(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, api_server: ApiServer
) -> None:
    operator = start_operator()
    apply(kubectl, namespace, huge_quantity_cluster("hostile"))
    wait_for(
        lambda: invalid_spec_report(api_server, namespace, "hostile", LIMITS_PATH),
        timeout=15,
        what="the hostile cluster reported",
    )
    # Each edit is a new reconcile that parses the quantity again: signal in the middle of one.
    kubectl("annotate", "raycluster", "hostile", "-n", namespace, "touched=1")
    code, took = operator.terminate(timeout=SIGTERM_BOUND + 5)
    print(f"\nexited with {code} {took:.2f} s after SIGTERM")
    assert code == 0, operator.log()[-3000:]
    assert took <= SIGTERM_BOUND


def test_a_cluster_of_int32_max_workers_is_reported_and_not_scaled_under_the_default_bound(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, api_server: ApiServer
) -> None:
    operator = start_operator()
    with HealthProbe(operator.health_url) as probe:
        apply(kubectl, namespace, huge_cluster("huge"))
        reported_after = wait_for(
            lambda: invalid_spec_report(api_server, namespace, "huge", REPLICAS_PATH),
            timeout=15,
            what="the cluster reported with the field path",
        )
    print(
        f"\nreported {reported_after:.2f} s after: {report_of(api_server, namespace, 'huge')}; "
        f"healthz {probe.summary()}"
    )
    assert api_server.pod_count(namespace, "ray.io/cluster=huge") == 0
    assert probe.max_latency < HEALTHZ_BOUND, probe.summary()


def test_a_cluster_of_int32_max_workers_stays_within_memory_and_its_delete_stops_creation(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, api_server: ApiServer
) -> None:
    operator = start_operator(extra_args=NO_POD_BOUND)
    apply(kubectl, namespace, ray_cluster("healthy"))
    seconds_to_ready(api_server, namespace, "healthy")
    rss_before = operator.rss_bytes()
    rss_peak = rss_before

    with (
        PodWatch(api_server, namespace, "ray.io/cluster=huge") as pods,
        HealthProbe(operator.health_url) as probe,
    ):
        apply(kubectl, namespace, huge_cluster("huge"))
        started = time.monotonic()
        while time.monotonic() - started < SCALE_OBSERVATION and pods.seen() < OBSERVED_PODS:
            rss_peak = max(rss_peak, operator.rss_bytes())
            time.sleep(0.25)
        scaled_for = time.monotonic() - started
        created_before_delete = pods.seen()
        kubectl("delete", "raycluster", "huge", "-n", namespace, "--wait=false")
        deleted_at = time.monotonic()
        removal = wait_for(
            lambda: api_server.pod_count(namespace, "ray.io/cluster=huge") == 0,
            timeout=POD_REMOVAL_BOUND,
            interval=0.5,
            what=f"every Pod of the deleted cluster gone (log: {operator.log_path})",
        )
        created_after_delete = len(pods.created_after(deleted_at))
        rss_peak = max(rss_peak, operator.rss_bytes())
        worst_scaling = probe.max_latency_between(started, deleted_at)
        worst_deleting = probe.max_latency_between(deleted_at, time.monotonic())

    growth = rss_peak - rss_before
    print(
        f"\n{created_before_delete} Pods in {scaled_for:.1f} s; RSS {mib(rss_before)}"
        f" -> peak {mib(rss_peak)} (+{mib(growth)}); {created_after_delete} created after the"
        f" delete (batch {PODS_PER_RECONCILE}); all gone {removal:.1f} s after it;"
        f" healthz {probe.summary()}, worst {worst_scaling * 1000:.0f} ms while scaling,"
        f" {worst_deleting * 1000:.0f} ms while deleting"
    )
    assert not pods.errors, pods.errors
    # Without this the test would prove nothing: the operator must really have been scaling.
    assert created_before_delete > PODS_PER_RECONCILE
    assert growth < RSS_BOUND, mib(growth)
    assert created_after_delete <= PODS_PER_RECONCILE
    assert not probe.failures, probe.failures[:5]
    assert probe.max_latency < HEALTHZ_BOUND, probe.summary()


def test_sigterm_is_honoured_while_a_cluster_of_int32_max_workers_scales(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, api_server: ApiServer
) -> None:
    operator = start_operator(extra_args=NO_POD_BOUND)
    with PodWatch(api_server, namespace, "ray.io/cluster=huge") as pods:
        apply(kubectl, namespace, huge_cluster("huge"))
        wait_for(
            lambda: pods.seen() > PODS_PER_RECONCILE,
            timeout=30,
            what="more than one batch of Pods created",
        )
        code, took = operator.terminate(timeout=SIGTERM_BOUND + 10)
    print(f"\nexited with {code} {took:.2f} s after SIGTERM, {pods.seen()} Pods created")
    assert code == 0, operator.log()[-3000:]
    assert took <= SIGTERM_BOUND
