"""The crux of RayServeGraph, on the run's real Ray head: a compiled graph is a Serve application.

No operator and no Kubernetes here: the test compiles the pipeline graph
(tests/serve_apps/graph_pipeline.py: preprocess → model → postprocess), puts the builder module
the operator ships (`builder_source()`, the ConfigMap's content) where the head's PYTHONPATH
finds it (`RayHead.builder_dir`, standing in for the ConfigMap mount), PUTs the config to the
dashboard's Serve API as the RayService controller would, and asks the Serve proxy. Then it
changes the document the two ways a user does: an init arg and a replica count (the answer
changes, the model runs two replicas), and a replica count alone (Serve scales in place: the
other deployments keep their replicas — why scaling is compiled into `deployments:` overrides).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ray_operator.bounded_yaml import load_go_yaml as load_serve_config
from ray_operator.builders.serve_graph import BUILDER_FILE, builder_source, compile_serve_config
from ray_operator.dashboard.client import DashboardClient, DashboardEndpoint, DashboardOptions
from ray_operator.validation.serve_graph import parse_graph

from tests.controllers.conftest import eventually
from tests.controllers.ray_fixtures import ray_head
from tests.ray_head import RayHead
from tests.servegraph.graphs import ServeGraph, document, pipeline_graph
from tests.servegraph.pipeline import pipeline_answer, wait_for_pipeline_answer

APPLICATION = "pipeline"

__all__ = ["ray_head"]  # a fixture, used by name


@pytest.fixture
async def dashboard(ray_head: RayHead) -> AsyncIterator[DashboardClient]:
    ray_head.install_serve_graph_builder(builder_source(), file_name=BUILDER_FILE)
    endpoint = DashboardEndpoint(ray_head.dashboard_url, token=ray_head.token)
    async with DashboardClient(endpoint, options=DashboardOptions(start_timeout=60)) as client:
        yield client


async def deploy(dashboard: DashboardClient, head: RayHead, graph: ServeGraph) -> None:
    """What the operator does with a fetched document, then what the RayService controller does
    with the resulting `serveConfigV2` (read with Go's YAML rules, PUT as JSON)."""
    text = compile_serve_config(
        parse_graph(document(graph)),
        default_application_name=APPLICATION,
        # Serve's proxy address is fixed once Serve runs: the shared head's, on loopback.
        http_options={"host": "127.0.0.1", "port": head.serve_port},
    )
    await dashboard.deploy_serve_applications(load_serve_config(text))


async def settled_replicas(head: RayHead) -> dict[str, set[str]] | None:
    """Replica ids of each deployment once the application is RUNNING and every deployment
    HEALTHY (None before: mid-update, old and new replicas can both be running)."""
    details: Any = await asyncio.to_thread(head.get, "/api/serve/applications/")
    application = (details.get("applications") or {}).get(APPLICATION) or {}
    deployments = application.get("deployments") or {}
    if application.get("status") != "RUNNING" or any(
        deployment.get("status") != "HEALTHY" for deployment in deployments.values()
    ):
        return None
    return {
        name: {
            replica["replica_id"]
            for replica in deployment.get("replicas") or []
            if replica.get("state") == "RUNNING"
        }
        for name, deployment in deployments.items()
    }


async def wait_for_replica_counts(head: RayHead, counts: dict[str, int]) -> dict[str, set[str]]:
    async def check() -> dict[str, set[str]] | None:
        replicas = await settled_replicas(head)
        if replicas is None or {name: len(ids) for name, ids in replicas.items()} != counts:
            return None
        return replicas

    result: dict[str, set[str]] = await eventually(
        check, within=90, what=f"replicas {counts}", interval=0.5
    )
    return result


async def test_a_compiled_graph_answers_through_the_serve_proxy_and_follows_changes(
    ray_head: RayHead, dashboard: DashboardClient
) -> None:
    await deploy(dashboard, ray_head, pipeline_graph(factor=3, model_replicas=1))
    await wait_for_pipeline_answer(ray_head, "out=9", within=90)  # (2 + 1) × 3
    await wait_for_replica_counts(ray_head, {"pre": 1, "model": 1, "post": 1})

    # A changed init arg rebuilds the application; the replica count is applied with it.
    await deploy(dashboard, ray_head, pipeline_graph(factor=4, model_replicas=2))
    await wait_for_pipeline_answer(ray_head, "out=12", within=90)  # (2 + 1) × 4
    scaled = await wait_for_replica_counts(ray_head, {"pre": 1, "model": 2, "post": 1})

    # A replica count alone is a lightweight update: the other deployments keep their replicas.
    await deploy(dashboard, ray_head, pipeline_graph(factor=4, model_replicas=1))
    after = await wait_for_replica_counts(ray_head, {"pre": 1, "model": 1, "post": 1})
    assert (after["pre"], after["post"]) == (scaled["pre"], scaled["post"])
    assert after["model"] < scaled["model"]
    assert await pipeline_answer(ray_head) == "out=12"
