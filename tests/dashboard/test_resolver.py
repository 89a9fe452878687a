"""Where dashboards are found (pure), and the per-cluster cool-down after a failure."""

from __future__ import annotations

from typing import Any

import pytest
from ray_operator.controllers.dashboards import DashboardAccess
from ray_operator.dashboard.errors import DashboardUnavailable
from ray_operator.dashboard.models import JobInfo, JobSubmission, parse_serve_applications
from ray_operator.dashboard.resolver import (
    InClusterResolver,
    StaticResolver,
    dashboard_address,
    parse_overrides,
    resolver_from_overrides,
)

from tests.ray_head import free_port


def cluster(name: str = "c", namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray"}]}}}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"headGroupSpec": head, **spec},
    }


def test_in_cluster_dashboard_is_the_head_service_dns_name() -> None:
    assert InClusterResolver().dashboard_url(cluster()) == (
        "http://c-head-svc.ns.svc.cluster.local:8265"
    )
    assert dashboard_address(cluster(), cluster_domain="corp") == "c-head-svc.ns.svc.corp:8265"


def test_in_cluster_serve_proxy_is_the_head_pod_ip() -> None:
    pod = {"status": {"podIP": "10.1.2.3"}}
    assert InClusterResolver().serve_proxy_url(cluster(), pod) == "http://10.1.2.3:8000"
    assert InClusterResolver().serve_proxy_url(cluster(), {}) is None


def test_static_entries_match_exact_names_before_globs_then_fall_back() -> None:
    resolver = StaticResolver(
        {"ns/*": "http://glob", "ns/c": "http://exact"}, fallback=InClusterResolver()
    )
    assert resolver.dashboard_url(cluster("c")) == "http://exact"
    assert resolver.dashboard_url(cluster("other")) == "http://glob"
    assert resolver.dashboard_url(cluster("c", "elsewhere")) == (
        "http://c-head-svc.elsewhere.svc.cluster.local:8265"
    )
    assert StaticResolver({}).dashboard_url(cluster()) is None


def test_overrides_parse_and_reject_malformed_entries() -> None:
    assert parse_overrides(["ns/c=http://127.0.0.1:8265/"]) == {"ns/c": "http://127.0.0.1:8265"}
    for bad in ("ns=http://x", "ns/c", "ns/c=ftp://x", "/c=http://x"):
        with pytest.raises(ValueError, match=r"ns|must start|expected"):
            parse_overrides([bad])
    assert isinstance(resolver_from_overrides(), InClusterResolver)
    assert resolver_from_overrides(["ns/*=http://h"]).dashboard_url(cluster()) == "http://h"


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
