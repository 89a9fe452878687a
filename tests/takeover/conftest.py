"""One takeover, shared by the tests of this package: KubeRay ran here, then our operator started.

A control plane of its own (only what KubeRay left is on it, so the operator watches every
namespace, as a cluster-wide install does): every file of `kuberay-created/` is staged in its
namespace (see `staging.py`), watches on Pods, Services, Jobs and RayClusters start, then one
`ray-operator run` process starts with every Ray dashboard pointing at a `DeadDashboard`. The
tests read what happened once the operator settled: every custom resource reconciled, then no
watched object changed for `QUIET_SECONDS`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.spec.kinds import OPERATOR_NAME

from tests.conftest import running_control_plane
from tests.robustness.observe import ApiServer, ObjectWatch, OperatorUnderTest
from tests.runtime.processes import wait_until
from tests.takeover.observing import DeadDashboard, Settled, wait_until_settled
from tests.takeover.staging import (
    CUSTOM_KINDS,
    StagedFixture,
    fixture_files,
    request,
    resource_path,
    stage_fixture,
)

QUIET_SECONDS = 10.0
"""Longer than the RayCluster controller's progress-write hold-back (1 s) and the RayJob and
RayService controllers' dashboard poll periods: a write still due would have happened."""
SETTLE_TIMEOUT = 90.0
WATCHED = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "Job": ("/apis/batch/v1", "jobs"),
    "RayCluster": ("/apis/ray.io/v1", "rayclusters"),
    "RayJob": ("/apis/ray.io/v1", "rayjobs"),
    "RayService": ("/apis/ray.io/v1", "rayservices"),
    "Event": ("/api/v1", "events"),
}


@dataclass
class TakeoverRun:
    """The staged fixtures and what the operator did to them."""

    staged: list[StagedFixture]
    statuses_before: dict[tuple[str, str, str], dict[str, Any]]
    """(kind, namespace, name) -> the status as stored before the operator started."""
    statuses_after: dict[tuple[str, str, str], dict[str, Any]]
    services_after: dict[tuple[str, str], dict[str, Any]]
    """(namespace, name) -> every Service of the staged namespaces once the operator settled."""
    head_pods_after: dict[tuple[str, str], list[str]]
    """(namespace, cluster) -> the names of its head Pods once the operator settled."""
    events: dict[str, list[tuple[str, str]]]
    """Kind -> (event type, namespace/name) of every event after the operator started."""
    dashboard_url: str
    """The `DeadDashboard` every cluster's dashboard was pointed at."""
    dashboard_requests: list[str]
    dashboard_writes: list[str]
    settled: Settled
    kube_events: list[str]
    """`<count>x <type> <reason> <kind>/<namespace>/<name>` of every Event the operator recorded."""

    def events_of(self, kind: str, *types: str) -> list[str]:
        return [name for event, name in self.events[kind] if event in types]


@pytest.fixture(scope="package")
def control_plane() -> Iterator[LocalControlPlane]:
    """A control plane for this package alone: what KubeRay left, and nothing else (no
    controller-manager either: no Job or garbage controller touches what KubeRay left)."""
    with running_control_plane(controller_manager=False) as plane:
        yield plane


@pytest.fixture(scope="package")
def takeover(
    control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TakeoverRun]:
    api = ApiServer(control_plane.kubeconfig)
    with ExitStack() as stack:
        stack.callback(api.close)
        staged = [stage_fixture(api, file_name) for file_name in fixture_files()]
        before = _statuses(api, staged)
        watches = {
            kind: stack.enter_context(
                ObjectWatch(api, resource=plural, namespace=None, api_prefix=prefix)
            )
            for kind, (prefix, plural) in WATCHED.items()
        }
        for kind, watch in watches.items():
            _wait_until_every_object_was_seen(api, watch, kind)
        dashboard = stack.enter_context(DeadDashboard())
        started = time.monotonic()
        operator = OperatorUnderTest(
            kubeconfig=control_plane.kubeconfig,
            namespace=None,
            log_dir=tmp_path_factory.mktemp("takeover"),
            name="takeover",
            extra_args=("--dashboard-url-override", f"*/*={dashboard.url}"),
        )
        stack.callback(operator.stop)
        operator.wait_ready()
        settled = wait_until_settled(
            operator,
            expected=_custom_resource_counts(staged),
            last_change=lambda: max(
                watch.last_event_at() for kind, watch in watches.items() if kind != "Event"
            ),
            quiet_seconds=QUIET_SECONDS,
            timeout=SETTLE_TIMEOUT,
        )
        print(f"takeover: {settled}; {len(dashboard.requests)} dashboard requests")
        yield TakeoverRun(
            staged=staged,
            statuses_before=before,
            statuses_after=_statuses(api, staged),
            services_after=_services(api, staged),
            head_pods_after=_head_pods(api, staged),
            events={kind: watch.events_after(started) for kind, watch in watches.items()},
            dashboard_url=dashboard.url,
            dashboard_requests=list(dashboard.requests),
            dashboard_writes=dashboard.writes(),
            settled=settled,
            kube_events=_kube_events(api),
        )


def _wait_until_every_object_was_seen(api: ApiServer, watch: ObjectWatch, kind: str) -> None:
    """A watch starts with an ADDED event per existing object: until those are in, an event
    cannot be told from one the operator caused."""
    prefix, plural = WATCHED[kind]
    existing = len(request(api, "GET", f"{prefix}/{plural}")["items"] or ())
    wait_until(lambda: watch.seen() >= existing, timeout=30, what=f"the {kind} watch to list")


def _kube_events(api: ApiServer) -> list[str]:
    # The API server records Events of its own (its ClusterIP repair loop may flag a staged
    # Service's address before the allocator catches up); only the operator's are under test.
    listed = request(api, "GET", "/api/v1/events")["items"] or ()
    return sorted(
        f"{event.get('count', 1)}x {event.get('type')} {event.get('reason')} "
        f"{event['involvedObject'].get('kind')}/{event['involvedObject'].get('namespace')}/"
        f"{event['involvedObject'].get('name')}"
        for event in listed
        if event.get("reportingComponent") == OPERATOR_NAME
    )


def _custom_resource_counts(staged: list[StagedFixture]) -> dict[str, int]:
    return {kind: sum(len(fixture.of_kind(kind)) for fixture in staged) for kind in CUSTOM_KINDS}


def _statuses(
    api: ApiServer, staged: list[StagedFixture]
) -> dict[tuple[str, str, str], dict[str, Any]]:
    statuses = {}
    for fixture in staged:
        for kind in CUSTOM_KINDS:
            for obj in fixture.of_kind(kind):
                name = obj["metadata"]["name"]
                stored = request(api, "GET", resource_path(kind, fixture.namespace, name))
                statuses[(kind, fixture.namespace, name)] = stored.get("status") or {}
    return statuses


def _services(api: ApiServer, staged: list[StagedFixture]) -> dict[tuple[str, str], Any]:
    return {
        (fixture.namespace, service["metadata"]["name"]): service
        for fixture in staged
        for service in request(api, "GET", resource_path("Service", fixture.namespace))["items"]
    }


def _head_pods(api: ApiServer, staged: list[StagedFixture]) -> dict[tuple[str, str], list[str]]:
    heads: dict[tuple[str, str], list[str]] = {}
    for fixture in staged:
        for cluster in fixture.of_kind("RayCluster"):
            heads[(fixture.namespace, cluster["metadata"]["name"])] = []
        listed = request(
            api,
            "GET",
            resource_path("Pod", fixture.namespace) + "?labelSelector=ray.io/node-type%3Dhead",
        )
        for pod in listed["items"]:
            cluster_name = pod["metadata"]["labels"].get("ray.io/cluster", "")
            heads.setdefault((fixture.namespace, cluster_name), []).append(pod["metadata"]["name"])
    return heads
