"""Where dashboards are found (pure), and the per-cluster cool-down after a failure."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from ray_operator.controllers.dashboards import DashboardAccess
from ray_operator.dashboard.resolver import (
    InClusterResolver,
    StaticResolver,
    dashboard_address,
    head_pod_to_address,
    parse_overrides,
    resolver_from_overrides,
)
from ray_operator.runtime.store import Store
from ray_operator.spec.dashboard_errors import DashboardUnavailable
from ray_operator.spec.dashboard_models import JobInfo, JobSubmission, parse_serve_applications
from ray_operator.spec.kinds import POD

from tests.ray_head import free_port


def cluster(name: str = "c", namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray"}]}}}
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {"headGroupSpec": head, **spec},
    }


def head_pod(
    of: dict[str, Any] | None = None,
    *,
    ip: str = "10.1.2.3",
    name: str = "c-head-x",
    ready: bool = True,
    **metadata: Any,
) -> dict[str, Any]:
    """The head Pod the cluster `of` made, as cached; `metadata` replaces its fields."""
    owner = of or cluster()
    meta = owner["metadata"]
    return {
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {"ray.io/cluster": meta["name"], "ray.io/node-type": "head"},
            "ownerReferences": [{"kind": "RayCluster", "name": meta["name"], "uid": meta["uid"]}],
            **metadata,
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_in_cluster_dashboard_is_the_head_pod_ip_never_the_head_service_name() -> None:
    assert InClusterResolver().dashboard_url(cluster(), head_pod()) == "http://10.1.2.3:8265"
    assert InClusterResolver().dashboard_url(cluster(), None) is None
    # What KubeRay stores as a RayJob's dashboardURL, for the tenant's own submitter only.
    assert dashboard_address(cluster(), cluster_domain="corp") == "c-head-svc.ns.svc.corp:8265"


def test_in_cluster_serve_proxy_is_the_head_pod_ip() -> None:
    assert InClusterResolver().serve_proxy_url(cluster(), head_pod()) == "http://10.1.2.3:8000"
    assert InClusterResolver().serve_proxy_url(cluster(), {}) is None


def test_the_ports_are_the_head_containers_and_an_ipv6_address_is_bracketed() -> None:
    ports = [{"name": "dashboard", "containerPort": 9000}, {"name": "serve", "containerPort": 81}]
    owner = cluster()
    owner["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] = ports
    pod = head_pod(owner, ip="fd00::7")
    assert InClusterResolver().dashboard_url(owner, pod) == "http://[fd00::7]:9000"
    assert InClusterResolver().serve_proxy_url(owner, pod) == "http://[fd00::7]:81"


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(head_pod(ownerReferences=[{"uid": "forged-elsewhere"}]), id="not-owned"),
        pytest.param(head_pod(ownerReferences=[]), id="no-owner"),
        pytest.param(head_pod(namespace="b"), id="other-namespace"),
        pytest.param(head_pod(deletionTimestamp="2026-11-28T00:00:00Z"), id="terminating"),
        pytest.param(
            head_pod(labels={"ray.io/cluster": "c", "ray.io/node-type": "worker"}), id="worker"
        ),
        pytest.param(
            head_pod(labels={"ray.io/cluster": "d", "ray.io/node-type": "head"}), id="other-label"
        ),
        pytest.param(head_pod(ip="victim.b.svc.cluster.local"), id="not-an-ip"),
        pytest.param(head_pod(ip=""), id="no-ip"),
    ],
)
def test_only_the_clusters_own_live_head_pod_is_ever_addressed(other: dict[str, Any]) -> None:
    assert head_pod_to_address(cluster(), [other]) is None
    assert InClusterResolver().dashboard_url(cluster(), other) is None
    assert InClusterResolver().serve_proxy_url(cluster(), other) is None


def test_a_cluster_without_a_uid_has_no_head_pod_to_address() -> None:
    owner = cluster()
    pod = head_pod(owner)
    del owner["metadata"]["uid"]
    assert InClusterResolver().dashboard_url(owner, pod) is None


def test_a_ready_head_pod_is_chosen_before_one_that_is_not() -> None:
    starting = head_pod(name="c-head-a", ip="10.0.0.1", ready=False)
    ready = head_pod(name="c-head-b", ip="10.0.0.2")
    assert head_pod_to_address(cluster(), [starting, ready]) is ready
    assert head_pod_to_address(cluster(), [starting]) is starting
    assert head_pod_to_address(cluster(), []) is None


def test_static_entries_match_exact_names_before_globs_then_fall_back() -> None:
    resolver = StaticResolver(
        {"ns/*": "http://glob", "ns/c": "http://exact"}, fallback=InClusterResolver()
    )
    assert resolver.dashboard_url(cluster("c"), None) == "http://exact"
    assert resolver.dashboard_url(cluster("other"), None) == "http://glob"
    elsewhere = cluster("c", "elsewhere")
    assert resolver.dashboard_url(elsewhere, head_pod(elsewhere)) == "http://10.1.2.3:8265"
    assert StaticResolver({}).dashboard_url(cluster(), None) is None


def test_overrides_parse_and_reject_malformed_entries() -> None:
    assert parse_overrides(["ns/c=http://127.0.0.1:8265/"]) == {"ns/c": "http://127.0.0.1:8265"}
    for bad in ("ns=http://x", "ns/c", "ns/c=ftp://x", "/c=http://x"):
        with pytest.raises(ValueError, match=r"ns|must start|expected"):
            parse_overrides([bad])
    assert isinstance(resolver_from_overrides(), InClusterResolver)
    assert resolver_from_overrides(["ns/*=http://h"]).dashboard_url(cluster(), None) == "http://h"


def test_job_info_and_serve_details_parse_leniently() -> None:
    info = JobInfo.from_json({"submission_id": "s", "status": "RUNNING", "new_field": 1})
    assert info.submission_id == "s"
    assert not info.terminal
    apps = parse_serve_applications(
        {"applications": {"": {"status": "RUNNING", "deployments": {}}}}
    )
    assert list(apps) == ["default"]
    assert JobSubmission("e", "s").to_json() == {"entrypoint": "e", "submission_id": "s"}


async def test_a_failed_dashboard_is_not_asked_again_during_its_cooldown() -> None:
    now = [100.0]
    resolver = StaticResolver({"ns/*": f"http://127.0.0.1:{free_port()}"})
    access = DashboardAccess(None, resolver=resolver, clock=lambda: now[0])  # type: ignore[arg-type]
    with pytest.raises(DashboardUnavailable, match="ClientConnector"):
        async with access.open(cluster()) as ray:
            await ray.version()
    assert access.cooldown_remaining(cluster()) == 1.0
    with pytest.raises(DashboardUnavailable, match="not asking again"):
        async with access.open(cluster()):
            pass
    now[0] += 1.0
    with pytest.raises(DashboardUnavailable, match="ClientConnector"):
        async with access.open(cluster()) as ray:
            await ray.version()
    assert access.cooldown_remaining(cluster()) == 2.0  # doubled
    assert access.cooldown_remaining(cluster("other")) == 0.0


@pytest.fixture
async def recording_dashboard() -> AsyncIterator[tuple[int, list[str]]]:
    """A loopback HTTP server that records `METHOD path` of each request: (port, requests)."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.json_response({"version": "test"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1], seen
    finally:
        await runner.cleanup()


def cluster_on_port(port: int) -> dict[str, Any]:
    owner = cluster()
    ports = [{"name": "dashboard", "containerPort": port}]
    owner["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] = ports
    return owner


async def test_the_dashboard_is_asked_at_the_cached_head_pod_of_the_cluster(
    recording_dashboard: tuple[int, list[str]],
) -> None:
    port, seen = recording_dashboard
    owner = cluster_on_port(port)
    store = Store()
    store.upsert(POD, head_pod(owner, ip="127.0.0.1"))
    access = DashboardAccess(None, store=store)  # type: ignore[arg-type]
    async with access.open(owner) as ray:
        await ray.version()
    assert seen == ["GET /api/version"]
    assert access.dashboard_url(owner) == f"http://127.0.0.1:{port}"


async def test_no_request_is_made_when_the_cluster_has_no_head_pod_of_its_own(
    recording_dashboard: tuple[int, list[str]],
) -> None:
    port, seen = recording_dashboard
    owner = cluster_on_port(port)
    store = Store()
    # A tenant's look-alike: the labels, an IP, but no ownerReference to this cluster.
    store.upsert(POD, head_pod(owner, ip="127.0.0.1", ownerReferences=[]))
    access = DashboardAccess(None, store=store)  # type: ignore[arg-type]
    with pytest.raises(DashboardUnavailable) as raised:
        async with access.open(owner) as ray:
            await ray.version()
    assert seen == []
    assert raised.value.unreachable_cause == "NoAddress"
    fixed = (
        "no dashboard address for RayCluster ns/c: none is configured and no head Pod of this "
        "cluster has an IP yet"
    )
    assert str(raised.value) == fixed
    reported = access.reachability(owner, raised.value)
    assert reported is not None
    assert reported.message == f"The Ray dashboard cannot be reached (NoAddress): {fixed}"
