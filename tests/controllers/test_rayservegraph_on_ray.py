"""Specification: a RayServeGraph serves its DAG through a real Ray head and follows its document.

The whole chain runs for real: the artifact server (TLS, bearer token) serves the protobuf
document of tests/serve_apps/graph_pipeline.py's preprocess → model → postprocess; the
RayServeGraph controller fetches, parses and compiles it and creates the RayService and the
builder ConfigMap; the RayService controller sends the config to the run's Ray head (KWOK plays
the kubelet, the head stands in for every cluster, as in test_rayservice.py); Serve builds the
DAG with the builder module the operator shipped — the test copies the ConfigMap's data, as read
from the API server, to where the head imports it (`RayHead.builder_dir`, standing in for the
mount) — and the Serve proxy answers with the DAG's output.

The graph operator starts first and the Ray controllers only once the builder is in place: Serve
imports it when it builds the application, and nothing must PUT the config before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray_operator.builders.serve_graph import BUILDER_FILE
from ray_operator.spec.kinds import RAY_SERVE_GRAPH, RAY_SERVICE

from tests.controllers.conftest import Harness, eventually
from tests.controllers.ray_fixtures import auth_secret, ray_head
from tests.controllers.rayservegraph_fixtures import (
    GRAPH_PATH,
    TOKEN,
    StartGraphOperator,
    artifacts,
    builder_configmap,
    condition,
    rayservegraph,
    registry_secrets,
    request_refresh,
    start_graph_operator,
    wait_for_condition,
)
from tests.ray_head import RayHead
from tests.servegraph.artifact_server import ArtifactServer
from tests.servegraph.graphs import document, pipeline_graph
from tests.servegraph.pipeline import wait_for_pipeline_answer

__all__ = [  # fixtures, used by name
    "artifacts",
    "auth_secret",
    "ray_head",
    "registry_secrets",
    "start_graph_operator",
]


async def model_replicas(head: RayHead) -> int | None:
    """Running replicas of the `model` deployment once the application is RUNNING."""
    details: Any = await asyncio.to_thread(head.get, "/api/serve/applications/")
    application = (details.get("applications") or {}).get("pipeline") or {}
    if application.get("status") != "RUNNING":
        return None
    model = (application.get("deployments") or {}).get("model") or {}
    return sum(1 for r in model.get("replicas") or () if r.get("state") == "RUNNING")


async def deploy_pipeline(
    harness: Harness,
    artifacts: ArtifactServer,
    head: RayHead,
    start_graph_operator: StartGraphOperator,
) -> dict[str, Any]:
    """Apply the pipeline graph, install the builder the operator shipped, start the Ray
    controllers; the graph's status once Ready."""
    await start_graph_operator()
    http_options = {"host": "127.0.0.1", "port": head.serve_port}
    await harness.apply(
        rayservegraph("pipeline", artifacts.url(GRAPH_PATH), http_options=http_options)
    )
    configmap = await builder_configmap(harness, "pipeline")
    head.install_serve_graph_builder(configmap["data"][BUILDER_FILE], file_name=BUILDER_FILE)
    await start_graph_operator.ray_controllers(head)
    return await wait_for_condition(harness, "pipeline", "Ready", within=180)


async def test_a_pipeline_graph_becomes_ready_and_the_serve_proxy_answers_with_its_output(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    ray_head: RayHead,
    start_graph_operator: StartGraphOperator,
    auth_secret: str,
) -> None:
    artifacts.serve(GRAPH_PATH, document(pipeline_graph(factor=3)), token=TOKEN)
    status = await deploy_pipeline(harness, artifacts, ray_head, start_graph_operator)
    # (2 + 1) × 3, through pre → model → post
    await wait_for_pipeline_answer(ray_head, "out=9", within=120)

    assert status["phase"] == "Ready"
    for kind in ("Fetched", "Parsed", "Deployed", "Ready"):
        assert condition(status, kind)["status"] == "True", status
        assert condition(status, kind)["observedGeneration"] == 1
    assert condition(status, "Deployed")["reason"] == "RayServiceReady"
    # What scripts do: `kubectl wait` on the Ready condition.
    await harness.kubectl(
        "wait", "--for=condition=Ready", "rayservegraph/pipeline", "--timeout=10s"
    )
    rayservice = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    assert condition(dict(rayservice["status"]), "Ready")["status"] == "True"


async def test_a_changed_document_updates_the_same_rayservice_in_place_and_the_answer_changes(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    ray_head: RayHead,
    start_graph_operator: StartGraphOperator,
    auth_secret: str,
) -> None:
    artifacts.serve(GRAPH_PATH, document(pipeline_graph(factor=3)), token=TOKEN)
    first = await deploy_pipeline(harness, artifacts, ray_head, start_graph_operator)
    await wait_for_pipeline_answer(ray_head, "out=9", within=120)
    before = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    cluster = before["status"]["activeServiceStatus"]["rayClusterName"]

    # One more model replica and a changed init arg, announced through a refresh request.
    artifacts.serve(GRAPH_PATH, document(pipeline_graph(factor=4, model_replicas=2)), token=TOKEN)
    await request_refresh(harness, "pipeline")
    await wait_for_pipeline_answer(ray_head, "out=12", within=120)  # (2 + 1) × 4

    async def ready_at_new_revision() -> dict[str, Any] | None:
        graph = await harness.client.get(RAY_SERVE_GRAPH, "pipeline", namespace=harness.namespace)
        status = dict(graph.get("status") or {})
        if status.get("revision") == first["revision"]:
            return None
        return status if condition(status, "Ready").get("status") == "True" else None

    status = await eventually(ready_at_new_revision, within=120, what="Ready at the new revision")
    assert status["serveConfigDigest"] != first["serveConfigDigest"]
    after = await harness.client.get(RAY_SERVICE, "pipeline", namespace=harness.namespace)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # updated, not recreated
    assert after["status"]["activeServiceStatus"]["rayClusterName"] == cluster  # no new cluster
    assert not (after["status"].get("pendingServiceStatus") or {}).get("rayClusterName")
    assert (
        after["spec"]["rayClusterConfig"] == before["spec"]["rayClusterConfig"]
    )  # only serveConfigV2 changed

    async def two_model_replicas() -> bool:
        return await model_replicas(ray_head) == 2

    await eventually(two_model_replicas, within=90, what="2 model replicas", interval=0.5)
