"""Specification: crd/, generated/ray_io/ and generated/ray_operator_io/ are exactly what
`make generate` makes of the sources in operator/ray_operator/apigen/, so editing either by
hand, or forgetting to regenerate after changing a source (a .proto included), fails here."""

from __future__ import annotations

from pathlib import Path

from ray_operator.apigen import SERVE_GRAPH_DIR, render, stale_files, write
from ray_operator.apigen.protos import render_protos
from ray_operator_io.v1alpha1 import serve_graph_pb2

from tests.api.manifests import REPO_ROOT


def test_committed_output_is_what_the_generator_makes() -> None:
    stale = stale_files(REPO_ROOT, render())
    assert stale == [], f"run `make generate`; stale: {[str(path) for path in stale]}"


def test_generator_writes_the_same_output_into_an_empty_directory(tmp_path: Path) -> None:
    files = render()
    write(tmp_path, files)
    assert stale_files(tmp_path, files) == []
    assert stale_files(tmp_path, render()) == [], "two runs of the generator differ"


def test_a_file_left_in_generated_ray_operator_io_is_stale(tmp_path: Path) -> None:
    files = render()
    write(tmp_path, files)
    leftover = SERVE_GRAPH_DIR / "v1alpha1" / "old_pb2.py"
    (tmp_path / leftover).write_text("")
    assert stale_files(tmp_path, files) == [leftover]
    write(tmp_path, files)
    assert not (tmp_path / leftover).exists()


def test_protoc_output_is_byte_identical_on_every_run() -> None:
    first, second = render_protos(), render_protos()
    assert first == second
    assert sorted(str(path) for path in first) == [
        "generated/ray_operator_io/v1alpha1/serve_graph_pb2.py",
        "generated/ray_operator_io/v1alpha1/serve_graph_pb2.pyi",
    ]


def test_the_generated_protobuf_module_is_the_serve_graph_schema() -> None:
    descriptor = serve_graph_pb2.DESCRIPTOR
    assert descriptor.package == "ray_operator_io.v1alpha1"
    assert descriptor.name == "ray_operator_io/v1alpha1/serve_graph.proto"
    edge = serve_graph_pb2.Edge(caller="pre", callee="model", argument="model")
    graph = serve_graph_pb2.ServeGraph(ingress="pre", edges=[edge])
    assert serve_graph_pb2.ServeGraph.FromString(graph.SerializeToString()) == graph
