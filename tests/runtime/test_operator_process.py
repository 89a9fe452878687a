"""`ray-operator run` as real processes against the real control plane.

Leader election between two replicas (kill -9 and SIGTERM hand-over), probes and metrics, and the
memory guarantee of the server-side label selector. The replicas run the test-only
`MarkingController`, which stamps each RayCluster with the replica that reconciled it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_operator import __version__
from ray_operator.metrics import python_version
from ray_operator.runtime import POD, KubeClient

from tests.conftest import Kubectl
from tests.runtime.marked_clusters import ray_cluster, reconciled_by
from tests.runtime.processes import OperatorProcess, wait_until

LEASE_DURATION = 4.0
RETRY_PERIOD = 0.5


def lease_holder(kubectl: Kubectl, namespace: str) -> str:
    output = kubectl("get", "lease", "ray-operator-leader", "-n", namespace, "-o", "json")
    return str(json.loads(output)["spec"].get("holderIdentity") or "")


@pytest.fixture
def replicas(
    control_plane: Any,
    namespace: str,
    tmp_path: Path,
) -> Iterator[list[OperatorProcess]]:
    """Two replicas of the operator for one namespace, both ready; stopped afterwards."""
    started = [
        OperatorProcess(
            kubeconfig=control_plane.kubeconfig, namespace=namespace, replica=name, log_dir=tmp_path
        )
        for name in ("one", "two")
    ]
    try:
        for replica in started:
            wait_until(replica.is_ready, timeout=30, what=f"replica {replica.replica} ready")
        yield started
    finally:
        for replica in started:
            replica.stop()


def the_leader(replicas: list[OperatorProcess]) -> OperatorProcess:
    wait_until(
        lambda: [r.is_leader() for r in replicas].count(True) == 1,
        timeout=15,
        what="exactly one leader",
    )
    return next(r for r in replicas if r.is_leader())


def test_of_two_replicas_exactly_one_reconciles(
    replicas: list[OperatorProcess], kubectl: Kubectl, namespace: str
) -> None:
    leader = the_leader(replicas)
    follower = next(r for r in replicas if r is not leader)
    assert lease_holder(kubectl, namespace) == leader.replica
    kubectl("apply", "-n", namespace, "-f", "-", input_text=ray_cluster("marked"))
    wait_until(
        lambda: reconciled_by(kubectl, namespace, "marked") == leader.replica,
        timeout=15,
        what="the leader to reconcile the RayCluster",
    )
    assert leader.metric("ray_operator_reconcile_total", kind="RayCluster") >= 1
    assert follower.metric("ray_operator_reconcile_total") == 0
    assert not follower.is_leader()
    # The follower's cache is warm all the same, ready to take over.
    assert follower.metric("ray_operator_cache_objects", kind="RayCluster") == 1


def test_a_killed_leader_is_replaced_within_lease_duration_plus_retry_period(
    replicas: list[OperatorProcess], kubectl: Kubectl, namespace: str
) -> None:
    leader = the_leader(replicas)
    survivor = next(r for r in replicas if r is not leader)
    leader.kill()
    killed_at = time.monotonic()
    wait_until(
        survivor.is_leader, timeout=LEASE_DURATION + RETRY_PERIOD + 5, what="the survivor to lead"
    )
    took = time.monotonic() - killed_at
    # A kill -9 releases nothing: the survivor must wait out the lease, and no longer.
    assert took <= LEASE_DURATION + RETRY_PERIOD + 1.0, took
    assert took >= LEASE_DURATION - 1.0, took
    kubectl("apply", "-n", namespace, "-f", "-", input_text=ray_cluster("after-kill"))
    wait_until(
        lambda: reconciled_by(kubectl, namespace, "after-kill") == survivor.replica,
        timeout=15,
        what="the survivor to reconcile",
    )


def test_a_leader_stopped_by_sigterm_releases_the_lease_and_exits_0(
    replicas: list[OperatorProcess], kubectl: Kubectl, namespace: str
) -> None:
    leader = the_leader(replicas)
    survivor = next(r for r in replicas if r is not leader)
    signalled_at = time.monotonic()
    assert leader.terminate() == 0, leader.log()
    wait_until(survivor.is_leader, timeout=LEASE_DURATION, what="the survivor to lead")
    took = time.monotonic() - signalled_at
    # Released, so about one retry period (plus a metrics poll), far below the lease duration.
    assert took <= RETRY_PERIOD + 1.0, took
    assert "released the lease" in leader.log()
    assert lease_holder(kubectl, namespace) == survivor.replica


def test_probes_and_metrics_answer(
    control_plane: Any, namespace: str, kubectl: Kubectl, tmp_path: Path
) -> None:
    replica = OperatorProcess(
        kubeconfig=control_plane.kubeconfig, namespace=namespace, replica="solo", log_dir=tmp_path
    )
    try:
        wait_until(replica.is_ready, timeout=30, what="ready")
        assert replica.get("/healthz") == (200, "ok\n")
        assert replica.get("/readyz") == (200, "ok\n")
        wait_until(replica.is_leader, timeout=10, what="leader")
        kubectl("apply", "-n", namespace, "-f", "-", input_text=ray_cluster("observed"))
        wait_until(
            lambda: reconciled_by(kubectl, namespace, "observed") == "solo",
            timeout=15,
            what="reconciled",
        )
        status, body = replica.get("/metrics")
        assert status == 200
        for family in (
            "ray_operator_reconcile_total",
            "ray_operator_reconcile_errors_total",
            "ray_operator_reconcile_duration_seconds",
            "ray_operator_workqueue_depth",
            "ray_operator_watch_restarts_total",
            "ray_operator_api_requests_total",
            "ray_operator_leader_election_status",
            "ray_operator_cluster_info",
            "ray_operator_cluster_provisioned_duration_seconds",
        ):
            assert f"# TYPE {family}" in body, family
        assert replica.metric("ray_operator_api_requests_total", verb="patch", code="200") >= 1
        # One stream per watched kind at least: its streaming list, then its watch.
        assert replica.metric("ray_operator_api_requests_total", verb="watch") >= 6
        assert (
            replica.metric(
                "ray_operator_cluster_info", name="observed", namespace=namespace, owner_kind="None"
            )
            == 1
        )
        # The one version (`ray-operator --version`, the image label) and the Python it runs on.
        assert (
            replica.metric("ray_operator_build_info", version=__version__, python=python_version())
            == 1
        )
        assert (
            replica.metric(
                "ray_operator_cluster_condition_provisioned", name="observed", condition="false"
            )
            == 1
        )
    finally:
        replica.stop()


UNRELATED_PODS = 1000


def pod_events(replica: OperatorProcess) -> float:
    """Pod events received, without BOOKMARKs: those only move the resume point forward, and
    the API server may send one whenever resourceVersions advance (unrelated Pods do that)."""
    return sum(
        replica.metric("ray_operator_watch_events_total", kind="Pod", type=event)
        for event in ("ADDED", "MODIFIED", "DELETED")
    )


async def test_unrelated_pods_do_not_change_the_operators_memory(
    control_plane: Any, namespace: str, kubectl: Kubectl, tmp_path: Path, client: KubeClient
) -> None:
    # Blocking waits on the subprocess are fine here: nothing else runs on this loop.
    replica = OperatorProcess(
        kubeconfig=control_plane.kubeconfig, namespace=namespace, replica="frugal", log_dir=tmp_path
    )
    try:
        wait_until(replica.is_ready, timeout=30, what="ready")
        kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(pod("ours", owned=True)))
        wait_until(
            lambda: replica.metric("ray_operator_cache_objects", kind="Pod") == 1,
            timeout=10,
            what="our own Pod cached",
        )
        replica.metrics()  # warm the scrape path before measuring
        rss_before = replica.rss_bytes()
        events_before = pod_events(replica)

        assert await ballast_pods(client, namespace, create=UNRELATED_PODS) == UNRELATED_PODS
        await asyncio.sleep(1.0)  # the one place to wait: proving that nothing arrives

        assert replica.metric("ray_operator_cache_objects", kind="Pod") == 1
        assert pod_events(replica) == events_before
        growth = replica.rss_bytes() - rss_before
        # Caching them would take well over 8 MiB (each carries an 8 KiB annotation).
        assert growth < 2 * 1024 * 1024, f"RSS grew by {growth} bytes"
    finally:
        replica.stop()
        await ballast_pods(client, namespace, delete=True)


def pod(name: str, *, owned: bool, padding: int = 0) -> dict[str, Any]:
    # Pods are cached when labelled `ray.io/cluster` (spec.kinds.POD_SELECTOR).
    labels = {"ray.io/cluster": "c"} if owned else {"purpose": "ballast"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"padding": "x" * padding} if padding else {},
        },
        # No scheduler picks this up and no (fake) kubelet runs it: the Pod only sits in etcd.
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
    }


BALLAST_SELECTOR = "purpose=ballast"


async def ballast_pods(
    client: KubeClient, namespace: str, *, create: int = 0, delete: bool = False
) -> int:
    """Create `create` ballast Pods (20 requests at a time) or delete them all; how many exist."""
    limit = asyncio.Semaphore(20)

    async def create_one(number: int) -> None:
        async with limit:
            await client.create(
                POD, pod(f"unrelated-{number}", owned=False, padding=8192), namespace=namespace
            )

    await asyncio.gather(*(create_one(number) for number in range(create)))
    if delete:
        await client.delete_collection(POD, namespace=namespace, label_selector=BALLAST_SELECTOR)
    listed = await client.list(POD, namespace=namespace, label_selector=BALLAST_SELECTOR)
    return len(listed.items)
