"""Specification: the RayServeGraph controller's pure decisions — how long a failing fetch waits,
when a refresh annotation asks for a fetch (and that it waits for a failure's backoff and for the
refresh floor, without being dropped), how the RayService's cluster fields are patched, and what
of a URL the status shows."""

from __future__ import annotations

from typing import Any

import pytest
from ray_operator.builders.serve_graph import build_builder_configmap
from ray_operator.controllers.rayservegraph import (
    SPEC_HASH_ANNOTATION,
    _cluster_operations,
    service_name,
)
from ray_operator.controllers.serve_graph_documents import GraphMemory
from ray_operator.controllers.serve_graph_fetch import (
    REFRESH_FLOOR_SECONDS,
    fetch_reason,
    refresh_request,
    retry_delay,
)
from ray_operator.spec.kinds import CONFIG_MAP, RAY_SERVE_GRAPH, WATCHED_KINDS, watch_selectors
from ray_operator.spec.serve_graph_names import REFRESH_REQUESTED_ANNOTATION
from ray_operator.urls import shown_url

EARLIER = "2026-11-23T21:00:00.000001Z"
LATER = "2026-11-23T21:00:00.500000Z"


def graph(annotation: str | None = None, **spec: Any) -> dict[str, Any]:
    annotations = {REFRESH_REQUESTED_ANNOTATION: annotation} if annotation is not None else {}
    return {"metadata": {"name": "pipeline", "annotations": annotations}, "spec": spec}


def test_retryable_failures_back_off_exponentially_up_to_five_minutes() -> None:
    delays = [retry_delay(n, retryable=True, poll=None) for n in range(1, 12)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0]
    assert delays[-1] == 300.0
    assert retry_delay(10**9, retryable=True, poll=None) == 300.0


def test_permanent_failures_wait_longer_but_are_retried_eventually() -> None:
    """A fixed Secret is not watched: it is noticed by the next attempt."""
    assert retry_delay(1, retryable=False, poll=None) == 10.0
    assert retry_delay(2, retryable=False, poll=None) == 20.0
    assert retry_delay(50, retryable=False, poll=None) == 300.0


def test_a_poll_interval_caps_the_wait() -> None:
    assert retry_delay(10, retryable=True, poll=30.0) == 30.0
    assert retry_delay(1, retryable=True, poll=30.0) == 1.0


def test_a_refresh_annotation_asks_once_for_each_newer_value() -> None:
    memory = GraphMemory()
    assert refresh_request(graph(), {}, memory) is None
    assert refresh_request(graph(EARLIER), {}, memory) == EARLIER
    assert refresh_request(graph(EARLIER), {"lastRefreshHandled": EARLIER}, memory) is None
    assert refresh_request(graph(LATER), {"lastRefreshHandled": EARLIER}, memory) == LATER
    assert refresh_request(graph(EARLIER), {"lastRefreshHandled": LATER}, memory) is None


def test_a_refresh_handled_before_the_status_write_landed_is_not_handled_twice() -> None:
    memory = GraphMemory(refresh_handled=LATER)
    assert refresh_request(graph(LATER), {"lastRefreshHandled": EARLIER}, memory) is None


def test_a_refresh_annotation_that_is_no_timestamp_counts_once_and_a_huge_one_never() -> None:
    memory = GraphMemory()
    assert refresh_request(graph("now please"), {}, memory) == "now please"
    assert (
        refresh_request(graph("now please"), {"lastRefreshHandled": "now please"}, memory) is None
    )
    assert refresh_request(graph("x" * 100_000), {}, memory) is None


def fetched_once(*, at: float, retry_at: float | None = None) -> GraphMemory:
    """What a replica remembers after one fetch of generation 1 that started at `at`."""
    return GraphMemory(
        attempted_generation=1,
        last_attempt=at,
        last_success=None if retry_at is not None else at,
        failures=1 if retry_at is not None else 0,
        retry_at=retry_at,
    )


def generation_1(annotation: str | None = None) -> dict[str, Any]:
    rsg = graph(annotation)
    rsg["metadata"]["generation"] = 1
    return rsg


def test_a_refresh_fetches_at_once_when_the_last_fetch_is_older_than_the_floor() -> None:
    memory = fetched_once(at=100.0)
    now = 100.0 + REFRESH_FLOOR_SECONDS
    assert fetch_reason(generation_1(LATER), memory, refresh=LATER, now=now) is not None
    assert fetch_reason(generation_1(), memory, refresh=None, now=now) is None


def test_refreshes_never_fetch_more_often_than_the_floor() -> None:
    memory = fetched_once(at=100.0)
    for now in (100.0, 101.0, 100.0 + REFRESH_FLOOR_SECONDS - 0.1):
        assert fetch_reason(generation_1(LATER), memory, refresh=LATER, now=now) is None


def test_a_refresh_during_a_backoff_waits_for_its_end_and_is_served_by_the_retry() -> None:
    memory = fetched_once(at=100.0, retry_at=140.0)  # say a permanent failure, 40 s
    for now in (110.0, 120.0, 139.9):  # well past the floor, still in the backoff
        assert fetch_reason(generation_1(LATER), memory, refresh=LATER, now=now) is None
    assert fetch_reason(generation_1(LATER), memory, refresh=LATER, now=140.0) is not None
    # Not dropped meanwhile: the annotation still asks, as long as no fetch took it.
    assert refresh_request(generation_1(LATER), {"lastRefreshHandled": EARLIER}, memory) == LATER


def test_a_spec_change_still_fetches_at_once() -> None:
    memory = fetched_once(at=100.0, retry_at=400.0)
    changed = generation_1()
    changed["metadata"]["generation"] = 2
    assert fetch_reason(changed, memory, refresh=None, now=100.5) == "the spec changed"


def test_cluster_fields_are_set_exactly_and_the_hash_stamped() -> None:
    existing = {
        "metadata": {"annotations": {"keep": "me"}},
        "spec": {"rayClusterConfig": {"old": True}, "upgradeStrategy": {"type": "None"}},
    }
    part = {"rayClusterConfig": {"new": True}, "rayClusterDeletionDelaySeconds": 5}
    assert _cluster_operations(existing, part, "abc") == [
        {"op": "add", "path": "/spec/rayClusterConfig", "value": {"new": True}},
        {"op": "remove", "path": "/spec/upgradeStrategy"},
        {"op": "add", "path": "/spec/rayClusterDeletionDelaySeconds", "value": 5},
        {
            "op": "add",
            "path": "/metadata/annotations/ray-operator.io~1serve-graph-cluster-hash",
            "value": "abc",
        },
    ]


def test_the_hash_annotation_is_added_with_the_map_when_there_is_none() -> None:
    operations = _cluster_operations({"metadata": {}, "spec": {}}, {}, "abc")
    assert operations == [
        {"op": "add", "path": "/metadata/annotations", "value": {SPEC_HASH_ANNOTATION: "abc"}}
    ]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://registry.example.com/g.pb", "https://registry.example.com/g.pb"),
        (
            "https://user:pw@registry.example.com:8443/g.pb?token=x#f",
            "https://registry.example.com:8443/g.pb",
        ),
        ("https://[::1]:8443/g.pb", "https://[::1]:8443/g.pb"),
    ],
)
def test_the_status_shows_a_url_without_userinfo_query_or_fragment(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def test_the_rayservice_is_named_after_the_graph_unless_the_spec_names_it() -> None:
    assert service_name(graph()) == "pipeline"
    assert service_name(graph(serviceName="serving")) == "serving"


def test_only_the_builder_configmaps_are_watched() -> None:
    """The cache holds a graph's builder module, never the namespace's other ConfigMaps."""
    rsg = {"metadata": {"name": "pipeline", "namespace": "ns", "uid": "u"}, "spec": {}}
    builder = build_builder_configmap(rsg)
    (selector,) = watch_selectors(CONFIG_MAP)
    assert selector is not None
    assert selector.matches(builder["metadata"]["labels"])
    assert not selector.matches({"app": "web"})
    assert not selector.matches({"app.kubernetes.io/created-by": "ray-operator"})
    assert CONFIG_MAP in WATCHED_KINDS
    assert RAY_SERVE_GRAPH in WATCHED_KINDS
    assert watch_selectors(RAY_SERVE_GRAPH) == (None,)
