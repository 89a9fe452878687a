"""Specification: the RayServeGraph controller against the real API server and a real artifact
server (TLS, bearer token, ETag) on loopback, without Ray: what it fetches and when, what it
writes, what it refuses, and what it cleans up. (Serving through a real Ray head:
test_rayservegraph_on_ray.py.)

Only the RayServeGraph controller runs here, so the RayService it creates stays as created: what
these tests see of it is exactly what the graph controller wrote.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from typing import Any

import pytest
from ray_operator.builders.serve_graph import (
    BUILDER_FILE,
    builder_configmap_name,
    builder_source,
    digest,
)
from ray_operator.controllers.rayservegraph import FINALIZER, SPEC_HASH_ANNOTATION
from ray_operator.spec.fetch_types import FetchPolicy
from ray_operator.spec.kinds import CONFIG_MAP, RAY_SERVE_GRAPH, RAY_SERVICE
from ray_operator.spec.serve_graph_names import GRAPH_LABEL

from tests.controllers.conftest import Harness, eventually, reconcile_errors
from tests.controllers.rayservegraph_fixtures import (
    GRAPH_PATH,
    TOKEN,
    StartGraphOperator,
    artifacts,
    builder_configmap,
    condition,
    create_token_secret,
    events_about,
    graph_status,
    queue_idle,
    rayservegraph,
    registry_secrets,
    request_refresh,
    start_graph_operator,
    wait_for_condition,
    wait_for_object,
    wait_until_gone,
)
from tests.servegraph.artifact_server import ArtifactServer
from tests.servegraph.graphs import document, pipeline_graph

__all__ = ["artifacts", "registry_secrets", "start_graph_operator"]  # fixtures, used by name


async def _resource_versions(harness: Harness) -> tuple[str, str]:
    """The resourceVersions of graph "pipeline" and of its RayService: equal later = no write."""
    graph = await harness.client.get(RAY_SERVE_GRAPH, "pipeline", namespace=harness.namespace)
    rayservice = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    return graph["metadata"]["resourceVersion"], rayservice["metadata"]["resourceVersion"]


async def _fetched_and_deployed(harness: Harness, name: str) -> dict[str, Any]:
    """The status once the document is fetched and parsed, and the RayService created."""
    await wait_for_condition(harness, name, "Parsed")
    await wait_for_object(harness, RAY_SERVICE, name)
    return await graph_status(harness, name)


@pytest.fixture
async def deployed_pipeline(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> dict[str, Any]:
    """Graph "pipeline" (the document of `pipeline_graph()`, fetched with the registry token)
    deployed by a running graph operator: its status once fetched, parsed and its RayService
    created."""
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    return await _fetched_and_deployed(harness, "pipeline")


async def test_a_graph_is_fetched_with_the_token_and_becomes_an_owned_rayservice(
    harness: Harness, artifacts: ArtifactServer, deployed_pipeline: dict[str, Any]
) -> None:
    body = document(pipeline_graph())  # what deployed_pipeline served
    status = deployed_pipeline

    assert artifacts.request_count(GRAPH_PATH) == 1
    assert status["artifact"]["digest"] == digest(body)
    assert status["artifact"]["sizeBytes"] == len(body)
    assert status["artifact"]["url"] == artifacts.url(GRAPH_PATH)
    assert status["revision"] == digest(body)[len("sha256:") :][:12]
    assert status["graph"] == {
        "ingress": "pre",
        "deployments": ["model", "post", "pre"],
        "edges": [
            {"caller": "model", "callee": "post", "argument": "post"},
            {"caller": "pre", "callee": "model", "argument": "model"},
        ],
    }
    assert status["rayServiceName"] == "pipeline"
    assert status["observedGeneration"] == 1
    assert condition(status, "Fetched")["reason"] == "Fetched"
    assert condition(status, "Fetched")["observedGeneration"] == 1
    # No RayService controller runs here: the RayService never becomes ready.
    assert condition(status, "Deployed")["status"] == "False"
    assert condition(status, "Ready")["status"] == "False"
    assert status["phase"] == "Deploying"

    graph = await harness.client.get(RAY_SERVE_GRAPH, "pipeline", namespace=harness.namespace)
    rayservice = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    (owner,) = rayservice["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "RayServeGraph",
        graph["metadata"]["uid"],
        True,
    )
    assert rayservice["metadata"]["labels"][GRAPH_LABEL] == "pipeline"
    assert digest(rayservice["spec"]["serveConfigV2"]) == status["serveConfigDigest"]
    assert SPEC_HASH_ANNOTATION in rayservice["metadata"]["annotations"]
    assert FINALIZER in graph["metadata"]["finalizers"]
    configmap = await builder_configmap(harness, "pipeline")
    assert configmap["data"] == {BUILDER_FILE: builder_source()}
    assert configmap["immutable"] is True
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == graph["metadata"]["uid"]


async def test_polling_an_unchanged_document_costs_one_304_and_writes_nothing(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    replica = await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH), poll="10s"))
    status = await _fetched_and_deployed(harness, "pipeline")
    await eventually(lambda: _true(queue_idle(replica)), what="the operator idle")
    written = await _resource_versions(harness)

    # The poll's reconcile is over once the second request was answered and the queue is idle.
    async def polled() -> bool:
        return artifacts.request_count(GRAPH_PATH) >= 2 and queue_idle(replica)

    await eventually(polled, within=30, what="one poll", interval=0.05)
    first, second = artifacts.requests(GRAPH_PATH)[:2]
    assert first.status == 200
    assert (second.status, second.if_none_match) == (304, status["artifact"]["etag"])
    assert await _resource_versions(harness) == written


async def test_a_rejected_document_names_the_field_and_leaves_the_rayservice_as_it_was(
    harness: Harness, artifacts: ArtifactServer, deployed_pipeline: dict[str, Any]
) -> None:
    before = deployed_pipeline
    rayservice = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)

    broken = pipeline_graph()
    broken.edges[0].callee = "modle"
    artifacts.serve(GRAPH_PATH, document(broken), token=TOKEN)
    stamp = await request_refresh(harness, "pipeline")
    status = await wait_for_condition(harness, "pipeline", "Parsed", status="False")

    parsed = condition(status, "Parsed")
    assert parsed["reason"] == "InvalidGraph"
    assert parsed["message"].startswith("edges[0].callee: ")
    assert "modle" in parsed["message"]
    assert condition(status, "Fetched")["status"] == "True"
    assert condition(status, "Ready")["status"] == "False"
    assert status["phase"] == "Invalid"
    assert status["lastRefreshHandled"] == stamp
    # What is deployed is still the good document.
    for field in ("artifact", "revision", "serveConfigDigest", "graph"):
        assert status[field] == before[field]
    after = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    assert after["metadata"]["resourceVersion"] == rayservice["metadata"]["resourceVersion"]
    assert artifacts.request_count(GRAPH_PATH) == 2
    reasons = {event["reason"] for event in await events_about(harness, "pipeline")}
    assert "GraphRejected" in reasons


async def test_a_secret_not_opted_in_for_the_host_is_never_sent(
    harness: Harness,
    artifacts: ArtifactServer,
    start_graph_operator: StartGraphOperator,
) -> None:
    """Confused deputy: whoever may create a RayServeGraph names a Secret of the namespace and a
    URL of their choosing; the Secret opted in for another host only."""
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    await create_token_secret(harness, hosts="registry.example.com")
    await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    status = await wait_for_condition(
        harness, "pipeline", "Fetched", status="False", reason="SecretNotOptedIn"
    )

    assert artifacts.request_count(GRAPH_PATH) == 0
    assert status["phase"] == "Failed"
    assert condition(status, "Ready")["reason"] == "SecretNotOptedIn"
    assert "rayServiceName" in status
    assert "artifact" not in status
    events = await events_about(harness, "pipeline")
    assert "FetchFailed" in {event["reason"] for event in events}
    assert TOKEN not in json.dumps(status) + json.dumps(events)
    assert not (await harness.get_json("rayservices"))["items"]


async def test_a_host_outside_the_allowed_hosts_is_never_contacted(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    # The Secret opted in for the artifact server, but the operator may fetch elsewhere only.
    policy = FetchPolicy(allowed_hosts=frozenset({"registry.example.com"}), allow_loopback=True)
    await start_graph_operator(policy=policy)
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    status = await wait_for_condition(
        harness, "pipeline", "Fetched", status="False", reason="HostNotAllowed"
    )
    assert artifacts.request_count(GRAPH_PATH) == 0
    assert TOKEN not in json.dumps(status)


@pytest.mark.usefixtures("deployed_pipeline")
async def test_deleting_the_graph_deletes_its_rayservice_and_configmap(harness: Harness) -> None:
    await builder_configmap(harness, "pipeline")

    await harness.kubectl("delete", "rayservegraph", "pipeline", "--wait=false")
    await wait_until_gone(harness, RAY_SERVE_GRAPH, "pipeline")
    # The local control plane has no garbage collector: only the controller deletes these.
    await wait_until_gone(harness, RAY_SERVICE, "pipeline")
    await wait_until_gone(harness, CONFIG_MAP, builder_configmap_name("pipeline"))


async def test_failing_fetches_back_off_per_object_and_leave_other_graphs_alone(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    artifacts.serve("/flaky.pb", b"", token=TOKEN, mode="500")
    artifacts.serve("/missing.pb", b"", token=TOKEN, mode="404")
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    replica = await start_graph_operator()
    seen: dict[str, list[float]] = {"/flaky.pb": [], "/missing.pb": []}
    watching = asyncio.create_task(_record_request_times(artifacts, seen))
    try:
        await harness.apply(rayservegraph("flaky", artifacts.url("/flaky.pb")))
        await harness.apply(rayservegraph("missing", artifacts.url("/missing.pb")))
        await harness.apply(rayservegraph("healthy", artifacts.url(GRAPH_PATH)))
        await _fetched_and_deployed(harness, "healthy")
        await wait_for_condition(harness, "flaky", "Fetched", status="False", reason="ServerError")
        await wait_for_condition(harness, "missing", "Fetched", status="False", reason="NotFound")
        await eventually(
            lambda: _true(len(seen["/flaky.pb"]) >= 4), within=30, what="4 attempts at /flaky.pb"
        )
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)

    # A server error is retried after 1, 2, 4 s (a poll of the counter every 50 ms blurs each).
    flaky = seen["/flaky.pb"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(flaky)]
    for gap, expected in zip(gaps, (1.0, 2.0, 4.0), strict=False):
        assert gap >= expected - 0.2, gaps
    # A 404 is permanent: retried after 10 s at the earliest, not in a loop.
    missing = seen["/missing.pb"]
    assert missing
    assert all(later - earlier >= 9.8 for earlier, later in itertools.pairwise(missing))
    assert artifacts.request_count(GRAPH_PATH) == 1
    # Fetch failures never fail the reconcile (its retries would follow the queue's backoff,
    # and Deployed would stop being mirrored); a status write from a stale cache may conflict.
    assert set(reconcile_errors(replica, "RayServeGraph")) <= {"Conflict"}


async def _record_request_times(artifacts: ArtifactServer, seen: dict[str, list[float]]) -> None:
    """Append the time each new request at a path was noticed (polled every 50 ms)."""
    while True:
        for path, times in seen.items():
            count = artifacts.request_count(path)
            while len(times) < count:
                times.append(time.monotonic())
        await asyncio.sleep(0.05)


async def _true(value: bool) -> bool:
    return value


async def test_an_invalid_spec_fetches_nothing_until_it_is_fixed(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """The webhook would refuse it; without one the controller re-validates the same rules."""
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    await start_graph_operator()
    manifest = rayservegraph("pipeline", artifacts.url(GRAPH_PATH), poll="5s")
    await harness.apply(manifest)
    status = await wait_for_condition(
        harness, "pipeline", "Ready", status="False", reason="InvalidSpec"
    )
    assert "spec.source.pollInterval" in condition(status, "Ready")["message"]
    assert status["phase"] == "Invalid"
    assert artifacts.request_count(GRAPH_PATH) == 0

    manifest["spec"]["source"]["pollInterval"] = "10s"
    await harness.apply(manifest)
    status = await _fetched_and_deployed(harness, "pipeline")
    assert condition(status, "Ready")["reason"] != "InvalidSpec"
    assert status["observedGeneration"] == 2


async def test_a_restarted_operator_fetches_once_and_writes_nothing_for_the_same_document(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    first = await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    await _fetched_and_deployed(harness, "pipeline")
    await eventually(lambda: _true(queue_idle(first)), what="the operator idle")
    await start_graph_operator.stop(first)
    written = await _resource_versions(harness)

    second = await start_graph_operator()

    async def refetched() -> bool:
        return artifacts.request_count(GRAPH_PATH) >= 2 and queue_idle(second)

    await eventually(refetched, within=30, what="the new replica's fetch", interval=0.05)
    # Without the bytes in memory, a 304 would leave nothing to deploy: no If-None-Match.
    assert artifacts.requests(GRAPH_PATH)[1][:2] == (200, None)
    assert await _resource_versions(harness) == written


async def test_a_server_echoing_the_token_gets_it_into_no_status_event_or_log(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    artifacts.serve(GRAPH_PATH, b"", token=TOKEN, mode="echo-401")
    await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    status = await wait_for_condition(
        harness, "pipeline", "Fetched", status="False", reason="Unauthorized"
    )
    assert artifacts.requests(GRAPH_PATH)[0].authorization == f"Bearer {TOKEN}"
    events = await events_about(harness, "pipeline")
    assert events
    assert TOKEN not in json.dumps(status)
    assert TOKEN not in json.dumps(events)
    assert TOKEN not in caplog.text


@pytest.mark.usefixtures("deployed_pipeline")
async def test_a_changed_cluster_spec_is_patched_into_the_same_rayservice(
    harness: Harness, artifacts: ArtifactServer
) -> None:
    manifest = rayservegraph("pipeline", artifacts.url(GRAPH_PATH))  # as deployed_pipeline applied
    before = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)

    head = manifest["spec"]["rayClusterSpec"]["headGroupSpec"]
    head["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.60.0-py311"
    await harness.apply(manifest)

    async def patched() -> dict[str, Any] | None:
        current = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
        config = current["spec"]["rayClusterConfig"]
        image = config["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
        return current if image.endswith("-py311") else None

    after: dict[str, Any] = await eventually(patched, what="the new image in the RayService")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["serveConfigV2"] == before["spec"]["serveConfigV2"]
    annotations = after["metadata"]["annotations"]
    assert (
        annotations[SPEC_HASH_ANNOTATION] != before["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    )
    # The builder stays mounted: the injection is applied to the new spec too.
    volumes = after["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["volumes"]
    assert {
        "name": "ray-operator-serve-graph",
        "configMap": {
            "name": builder_configmap_name("pipeline"),
            "items": [{"key": BUILDER_FILE, "path": BUILDER_FILE}],
        },
    } in volumes
    assert artifacts.request_count(GRAPH_PATH) == 2  # a spec change fetches too


async def test_a_rayservice_of_the_same_name_that_is_not_ours_is_left_alone(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    theirs = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "pipeline"},
        "spec": {"rayClusterConfig": rayservegraph("x", "https://x")["spec"]["rayClusterSpec"]},
    }
    await harness.apply(theirs)
    before = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    status = await wait_for_condition(
        harness, "pipeline", "Deployed", status="False", reason="RayServiceConflict"
    )
    assert "spec.serviceName" in condition(status, "Deployed")["message"]
    after = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_a_builder_configmap_someone_else_made_stops_the_deployment_until_it_is_gone(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """Whoever may only create ConfigMaps must not get code into a graph's cluster: a ConfigMap
    already holding the builder's name is neither used nor overwritten, and no RayService is
    made, until it is deleted."""
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    planted = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": builder_configmap_name("pipeline")},
        "data": {BUILDER_FILE: "import os; os.system('steal the token')"},
    }
    await harness.apply(planted)
    await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))

    status = await wait_for_condition(
        harness, "pipeline", "Deployed", status="False", reason="BuilderConfigMapConflict"
    )
    message = condition(status, "Deployed")["message"]
    assert builder_configmap_name("pipeline") in message
    assert "steal" not in message
    name = planted["metadata"]["name"]
    kept = await harness.client.get(CONFIG_MAP, name, namespace=harness.namespace)
    assert kept["data"] == planted["data"]
    assert (await harness.client.list(RAY_SERVICE, namespace=harness.namespace)).items == []

    await harness.kubectl("delete", "configmap", name)
    await _fetched_and_deployed(harness, "pipeline")
    ours = await builder_configmap(harness, "pipeline")
    assert ours["data"][BUILDER_FILE] == builder_source()


@pytest.mark.usefixtures("deployed_pipeline")
async def test_a_new_service_name_moves_the_graph_to_a_new_rayservice_and_deletes_the_old(
    harness: Harness, artifacts: ArtifactServer
) -> None:
    manifest = rayservegraph("pipeline", artifacts.url(GRAPH_PATH))  # as deployed_pipeline applied

    manifest["spec"]["serviceName"] = "serving"
    await harness.apply(manifest)
    renamed = await wait_for_object(harness, RAY_SERVICE, "serving")
    await wait_until_gone(harness, RAY_SERVICE, "pipeline")
    assert renamed["metadata"]["labels"][GRAPH_LABEL] == "pipeline"
    status = await graph_status(harness, "pipeline")
    assert status["rayServiceName"] == "serving"


async def test_servers_that_never_answer_hold_no_worker_from_other_graphs(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """As many graphs as the operator has workers (4) point at a server that never answers and
    may take 30 s each; a healthy graph applied after them is still deployed in seconds, not
    after the hung fetches time out: fetches run beside the shared worker pool. (The namespace
    gets fetch slots for all five here: with the default share of 2, its own hung fetches
    would rightly keep its healthy one waiting; other namespaces' never do, see
    tests/adversarial/test_fetch_hardening.py.)"""
    artifacts.serve("/hang.pb", b"", token=TOKEN, mode="hang")
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    await start_graph_operator(
        policy=FetchPolicy(
            allow_loopback=True, max_concurrent_fetches=8, max_concurrent_fetches_per_namespace=8
        )
    )
    for index in range(4):
        hung = rayservegraph(f"hung-{index}", artifacts.url("/hang.pb"))
        hung["spec"]["source"]["timeoutSeconds"] = 30
        await harness.apply(hung)
    await eventually(
        lambda: _true(artifacts.request_count("/hang.pb") >= 4), within=15, what="4 hung fetches"
    )

    started = time.monotonic()
    await harness.apply(rayservegraph("healthy", artifacts.url(GRAPH_PATH)))
    await _fetched_and_deployed(harness, "healthy")

    assert time.monotonic() - started < 10
    for index in range(4):
        status = await graph_status(harness, f"hung-{index}")
        assert "Fetched" not in {c["type"] for c in status.get("conditions") or ()} or (
            condition(status, "Fetched")["status"] != "False"
        ), "a hung fetch ended before its 30 s timeout"
