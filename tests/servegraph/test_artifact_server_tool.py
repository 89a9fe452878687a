"""The development registry (`python -m ray_operator.servegraph.artifact_server`) of the
RayServeGraph walk-through (docs/features/rayservegraph.md), fetched with the operator's own
`fetch_artifact` on 127.0.0.1."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from ray_operator.servegraph.artifact_server import (
    GraphFile,
    graph_application,
    parse_arguments,
    tls_context,
)
from ray_operator.servegraph.fetch import fetch_artifact
from ray_operator.spec.fetch_types import (
    Artifact,
    ArtifactFetchError,
    ArtifactRequest,
    FetchPolicy,
    NotModified,
)
from ray_operator_io.v1alpha1 import serve_graph_pb2

TOKEN = "dev-token-5e1f"
LOOPBACK = FetchPolicy(allow_loopback=True)
GRAPH = {
    "applicationName": "pipeline",
    "ingress": "pre",
    "deployments": [
        {"name": "pre", "importPath": "graph_pipeline:Preprocess"},
        {"name": "model", "importPath": "graph_pipeline:Model", "initKwargs": {"factor": 3}},
    ],
    "edges": [{"caller": "pre", "callee": "model", "argument": "model"}],
}
Serve = Callable[..., Any]


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    """`await serve(graph_file, tls_dir=None) -> base URL`: the tool's app on 127.0.0.1."""
    runners: list[web.AppRunner] = []

    async def start(graph_file: Path, *, tls_dir: Path | None = None) -> str:
        application = graph_application(GraphFile(graph_file), token=TOKEN, path="/graph.pb")
        runner = web.AppRunner(application)
        await runner.setup()
        runners.append(runner)
        context = tls_context(tls_dir) if tls_dir else None
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
        port = runner.addresses[0][1]
        return f"{'https' if context else 'http'}://127.0.0.1:{port}/graph.pb"

    yield start
    for runner in runners:
        await runner.cleanup()


def write_graph(path: Path, graph: dict[str, Any]) -> Path:
    path.write_text(json.dumps(graph))
    return path


def fetch_request(url: str, **changes: Any) -> ArtifactRequest:
    fields: dict[str, Any] = {
        "url": url,
        "token": TOKEN,
        "ca_bundle": None,
        "etag": None,
        "timeout_seconds": 10.0,
        "max_bytes": 1024 * 1024,
        "allow_insecure_http": True,
    }
    fields.update(changes)
    return ArtifactRequest(**fields)


async def test_the_tool_serves_the_json_graph_as_protobuf_with_an_etag(
    tmp_path: Path, serve: Serve
) -> None:
    url = await serve(write_graph(tmp_path / "graph.json", GRAPH))

    artifact = await fetch_artifact(fetch_request(url), policy=LOOPBACK)
    unchanged = await fetch_artifact(fetch_request(url, etag=artifact.etag), policy=LOOPBACK)

    assert isinstance(artifact, Artifact)
    graph = serve_graph_pb2.ServeGraph.FromString(artifact.body)
    assert [d.name for d in graph.deployments] == ["pre", "model"]
    assert graph.deployments[1].init_kwargs["factor"] == 3
    assert unchanged == NotModified(etag=artifact.etag)


async def test_the_tool_refuses_a_wrong_token(tmp_path: Path, serve: Serve) -> None:
    url = await serve(write_graph(tmp_path / "graph.json", GRAPH))

    with pytest.raises(ArtifactFetchError) as caught:
        await fetch_artifact(fetch_request(url, token="wrong"), policy=LOOPBACK)

    assert caught.value.reason == "Unauthorized"


async def test_the_tool_serves_the_file_again_once_it_changed(tmp_path: Path, serve: Serve) -> None:
    graph_file = write_graph(tmp_path / "graph.json", GRAPH)
    url = await serve(graph_file)
    first = await fetch_artifact(fetch_request(url), policy=LOOPBACK)
    assert isinstance(first, Artifact)

    changed = json.loads(json.dumps(GRAPH))
    changed["deployments"][1]["initKwargs"]["factor"] = 4
    write_graph(graph_file, changed)
    stat = graph_file.stat()
    os.utime(graph_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # coarse clocks
    second = await fetch_artifact(fetch_request(url, etag=first.etag), policy=LOOPBACK)

    assert isinstance(second, Artifact)
    assert second.etag != first.etag


async def test_the_tool_speaks_tls_with_the_ca_it_writes(tmp_path: Path, serve: Serve) -> None:
    url = await serve(write_graph(tmp_path / "graph.json", GRAPH), tls_dir=tmp_path / "tls")
    ca_bundle = (tmp_path / "tls" / "ca.crt").read_bytes()

    artifact = await fetch_artifact(
        fetch_request(url, ca_bundle=ca_bundle, allow_insecure_http=False), policy=LOOPBACK
    )

    assert isinstance(artifact, Artifact)


def test_the_tool_needs_a_graph_and_a_token() -> None:
    arguments = parse_arguments(["--graph", "g.json", "--token-file", "t"])

    assert (arguments.port, arguments.path, arguments.tls_dir) == (8765, "/graph.pb", None)
    with pytest.raises(SystemExit):
        parse_arguments(["--graph", "g.json"])
