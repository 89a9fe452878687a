"""Reading a ServeGraph document: what is accepted, and every rejection naming its field path.

Each rejection of issue 14 is its own test; the condition message a user sees is `str(error)`,
`<field path>: <detail>`. Hypothesis feeds arbitrary bytes and damaged documents: the parser
answers `GraphRejected` (a Parsed=False condition), never anything else.
"""

from __future__ import annotations

import json
import math

import pytest
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_operator.validation.serve_graph import (
    INVALID_GRAPH,
    MAX_DEPLOYMENTS,
    MAX_DOCUMENT_BYTES,
    MAX_EDGES,
    MAX_STRUCT_DEPTH,
    MAX_STRUCT_VALUES,
    NOT_A_SERVE_GRAPH,
    GraphRejected,
    graph_summary,
    parse_graph,
)
from ray_operator_io.v1alpha1 import serve_graph_pb2

from tests.servegraph.graphs import ServeGraph, document, pipeline_graph, valid_graphs


def rejection(data: bytes | ServeGraph) -> GraphRejected:
    raw = data if isinstance(data, bytes) else document(data)
    with pytest.raises(GraphRejected) as caught:
        parse_graph(raw)
    return caught.value


def outcome(data: bytes) -> GraphRejected | None:
    """None when the bytes parse; the rejection otherwise (anything else propagates)."""
    try:
        parse_graph(data)
    except GraphRejected as error:
        return error
    return None


def deployment(graph: ServeGraph, name: str) -> serve_graph_pb2.Deployment:
    return next(item for item in graph.deployments if item.name == name)


# --- accepted ----------------------------------------------------------------------------------


def test_the_pipeline_document_parses_to_the_same_message() -> None:
    graph = pipeline_graph()
    assert parse_graph(document(graph)) == graph


def test_graph_summary_lists_names_and_edges_sorted() -> None:
    summary = graph_summary(parse_graph(document(pipeline_graph())))
    assert summary == {
        "ingress": "pre",
        "deployments": ["model", "post", "pre"],
        "edges": [
            {"caller": "model", "callee": "post", "argument": "post"},
            {"caller": "pre", "callee": "model", "argument": "model"},
        ],
    }


def test_a_single_deployment_without_edges_is_a_graph() -> None:
    graph = ServeGraph(ingress="only")
    graph.deployments.add(name="only", import_path="app:Only")
    assert parse_graph(document(graph)).ingress == "only"


def test_a_deployment_may_hold_two_handles_to_the_same_callee() -> None:
    graph = pipeline_graph()
    graph.edges.add(caller="pre", callee="model", argument="second_model")
    assert len(parse_graph(document(graph)).edges) == 3


@given(valid_graphs())
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_valid_graphs_parse(graph: ServeGraph) -> None:
    assert parse_graph(document(graph)) == graph


# --- not a ServeGraph at all ---------------------------------------------------------------------


def test_an_empty_document_is_not_a_serve_graph() -> None:
    error = rejection(b"")
    assert (error.reason, str(error)) == (NOT_A_SERVE_GRAPH, ": the document is empty (0 bytes)")


def test_a_truncated_document_is_not_a_serve_graph() -> None:
    data = document(pipeline_graph())
    error = rejection(data[: len(data) - 7])
    assert error.reason == NOT_A_SERVE_GRAPH
    assert str(error) == ": not a ServeGraph protobuf: the wire format is corrupt or truncated"


def test_json_text_is_not_a_serve_graph() -> None:
    error = rejection(b'{"ingress": "pre", "deployments": [{"name": "pre"}]}')
    assert error.reason == NOT_A_SERVE_GRAPH
    assert "looks like JSON text" in str(error)


def test_an_html_error_page_is_not_a_serve_graph() -> None:
    error = rejection(b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>")
    assert error.reason == NOT_A_SERVE_GRAPH
    assert "looks like HTML" in str(error)
    assert "Bad Gateway" not in str(error)


def test_an_unknown_top_level_field_is_not_a_serve_graph() -> None:
    data = document(pipeline_graph()) + b"\xf8\x01\x01"  # field 31, varint 1
    error = rejection(data)
    assert error.reason == NOT_A_SERVE_GRAPH
    assert str(error).startswith(": unknown field number 31 ")


def test_an_unknown_nested_field_names_its_path() -> None:
    options = serve_graph_pb2.ActorOptions(num_cpus=1).SerializeToString() + b"\x48\x07"
    extra = serve_graph_pb2.Deployment(name="x").SerializeToString()
    deployment_bytes = extra + b"\x3a" + bytes([len(options)]) + options  # field 7: actor options
    graph = ServeGraph(ingress="x").SerializeToString()
    data = graph + b"\x22" + bytes([len(deployment_bytes)]) + deployment_bytes
    error = rejection(data)
    assert (error.reason, error.path) == (NOT_A_SERVE_GRAPH, "deployments[0].ray_actor_options")
    assert "unknown field number 9" in error.detail


def test_another_message_type_is_not_a_serve_graph() -> None:
    # Its field 1 is a varint where a ServeGraph has a string: protobuf keeps it as unknown.
    other = Timestamp(seconds=1_700_000_000, nanos=5)
    error = rejection(other.SerializeToString())
    assert (error.reason, error.path) == (NOT_A_SERVE_GRAPH, "")
    assert error.detail.startswith("unknown field number 1 ")


def test_another_message_type_that_happens_to_decode_is_still_rejected() -> None:
    # A Struct's map entries decode as ServeGraph field 1 (a string): the name check catches it.
    other = Struct()
    other.update({"ingress": "pre", "replicas": 3})
    assert rejection(other.SerializeToString()).path == "application_name"


def test_a_document_over_the_size_bound_is_refused_before_decoding() -> None:
    error = rejection(b"\x00" * (MAX_DOCUMENT_BYTES + 1))
    assert error.path == ""
    assert f"at most {MAX_DOCUMENT_BYTES} bytes" in error.detail


# --- the graph ---------------------------------------------------------------------------------


def test_a_graph_without_deployments_is_empty() -> None:
    error = rejection(ServeGraph(application_name="app", ingress="pre"))
    assert (error.reason, str(error)) == (
        INVALID_GRAPH,
        "deployments: empty graph: at least one deployment is required",
    )


def test_duplicate_deployment_names_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments.add(name="model", import_path="other:Model")
    assert str(rejection(graph)) == 'deployments[3].name: duplicate deployment name "model"'


def test_a_deployment_without_a_name_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].name = ""
    assert str(rejection(graph)) == "deployments[1].name: required"


@pytest.mark.parametrize("name", ["-pre", "pre-", "pre process", "pré", "a/b", "x" * 64])
def test_a_deployment_name_outside_the_alphabet_or_too_long_is_rejected(name: str) -> None:
    graph = pipeline_graph()
    graph.deployments[2].name = name
    assert rejection(graph).path == "deployments[2].name"


def test_an_unknown_ingress_is_rejected() -> None:
    graph = pipeline_graph()
    graph.ingress = "prep"
    assert str(rejection(graph)) == 'ingress: unknown deployment "prep"'


def test_a_missing_ingress_is_rejected() -> None:
    graph = pipeline_graph()
    graph.ingress = ""
    assert rejection(graph).path == "ingress"


def test_an_edge_from_an_unknown_caller_is_rejected() -> None:
    graph = pipeline_graph()
    graph.edges.add(caller="ghost", callee="post", argument="post")
    assert str(rejection(graph)) == 'edges[2].caller: unknown deployment "ghost"'


def test_an_edge_to_an_unknown_callee_is_rejected() -> None:
    graph = pipeline_graph()
    graph.edges[1].callee = "modle"
    assert str(rejection(graph)) == 'edges[1].callee: unknown deployment "modle"'


def test_a_cycle_is_rejected_and_named_in_call_order() -> None:
    graph = pipeline_graph()
    graph.edges.add(caller="post", callee="pre", argument="again")
    assert str(rejection(graph)) == 'edges: cycle "model" → "post" → "pre" → "model"'


def test_a_deployment_calling_itself_is_a_cycle() -> None:
    graph = pipeline_graph()
    graph.edges.add(caller="model", callee="model", argument="me")
    assert str(rejection(graph)) == 'edges: cycle "model" → "model"'


def test_a_deployment_unreachable_from_the_ingress_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments.add(name="orphan", import_path="app:Orphan")
    error = rejection(graph)
    assert error.path == "deployments[3].name"
    assert error.detail.startswith('"orphan" is not reachable from the ingress "pre"')


def test_too_many_deployments_are_rejected() -> None:
    graph = ServeGraph(ingress="d0")
    for index in range(MAX_DEPLOYMENTS + 1):
        graph.deployments.add(name=f"d{index}", import_path="app:D")
    assert rejection(graph).path == "deployments"


def test_too_many_edges_are_rejected() -> None:
    graph = pipeline_graph()
    for index in range(MAX_EDGES):
        graph.edges.add(caller="pre", callee="post", argument=f"post{index}")
    assert str(rejection(graph)) == f"edges: {MAX_EDGES + 2} edges; at most {MAX_EDGES} are allowed"


# --- edges' arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("argument", ["", "2fast", "with-dash", "class", "née", "a" * 64])
def test_an_edge_argument_that_is_no_python_identifier_is_rejected(argument: str) -> None:
    graph = pipeline_graph()
    graph.edges[0].argument = argument
    assert rejection(graph).path == "edges[0].argument"


def test_a_duplicate_edge_argument_of_one_caller_is_rejected() -> None:
    graph = pipeline_graph()
    graph.edges.add(caller="pre", callee="post", argument="model")
    assert str(rejection(graph)) == 'edges[2].argument: duplicate argument "model" for caller "pre"'


def test_an_edge_argument_clashing_with_an_init_kwarg_is_rejected() -> None:
    graph = pipeline_graph()
    deployment(graph, "model").init_kwargs.update({"post": "from kwargs"})
    assert str(rejection(graph)) == (
        'edges[1].argument: "post" is also a key of deployments[1].init_kwargs'
    )


# --- one deployment's fields ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "import_path",
    [
        "",
        "graph_pipeline",
        "graph_pipeline:",
        ":Model",
        "a:b:c",
        "a..b:C",
        "a b:C",
        "1a:C",
        "a:b.c",
    ],
)
def test_a_bad_import_path_is_rejected(import_path: str) -> None:
    graph = pipeline_graph()
    graph.deployments[0].import_path = import_path
    assert rejection(graph).path == "deployments[0].import_path"


def test_negative_cpus_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].ray_actor_options.num_cpus = -0.5
    assert str(rejection(graph)) == (
        "deployments[1].ray_actor_options.num_cpus: must be at least 0, not -0.5"
    )


def test_nan_gpus_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].ray_actor_options.num_gpus = math.nan
    assert str(rejection(graph)) == (
        "deployments[1].ray_actor_options.num_gpus: must be a finite number (not NaN or infinity)"
    )


def test_an_infinite_custom_resource_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[0].ray_actor_options.resources["accelerator"] = math.inf
    assert rejection(graph).path == "deployments[0].ray_actor_options.resources.accelerator"


def test_a_negative_custom_resource_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[0].ray_actor_options.resources["tpu-v4"] = -1
    error = rejection(graph)
    assert error.path == 'deployments[0].ray_actor_options.resources["tpu-v4"]'
    assert error.detail == "must be at least 0, not -1"


def test_cpus_as_a_custom_resource_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[0].ray_actor_options.resources["CPU"] = 1
    assert rejection(graph).path == "deployments[0].ray_actor_options.resources.CPU"


def test_zero_replicas_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].num_replicas = 0
    assert str(rejection(graph)) == "deployments[1].num_replicas: must be at least 1"


def test_autoscaling_with_min_above_max_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].autoscaling.min_replicas = 5
    graph.deployments[1].autoscaling.max_replicas = 3
    assert str(rejection(graph)) == (
        "deployments[1].autoscaling.min_replicas: 5 is greater than max_replicas (3)"
    )


def test_autoscaling_without_max_replicas_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].autoscaling.min_replicas = 0
    assert rejection(graph).path == "deployments[1].autoscaling.max_replicas"


def test_initial_replicas_outside_the_autoscaling_range_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].autoscaling.max_replicas = 3
    graph.deployments[1].autoscaling.initial_replicas = 4
    assert rejection(graph).path == "deployments[1].autoscaling.initial_replicas"


def test_a_zero_autoscaling_target_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].autoscaling.max_replicas = 3
    graph.deployments[1].autoscaling.target_ongoing_requests = 0
    assert rejection(graph).path == "deployments[1].autoscaling.target_ongoing_requests"


def test_a_negative_autoscaling_delay_is_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].autoscaling.max_replicas = 3
    graph.deployments[1].autoscaling.downscale_delay_s = -1
    assert rejection(graph).path == "deployments[1].autoscaling.downscale_delay_s"


def test_zero_max_ongoing_requests_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[2].max_ongoing_requests = 0
    assert rejection(graph).path == "deployments[2].max_ongoing_requests"


def test_a_nan_in_init_kwargs_is_rejected_with_its_key() -> None:
    graph = pipeline_graph()
    graph.deployments[1].init_kwargs.update({"factor": math.nan})
    assert rejection(graph).path == "deployments[1].init_kwargs.factor"


def test_an_infinity_deep_in_init_args_is_rejected_with_its_position() -> None:
    graph = pipeline_graph()
    graph.deployments[2].init_args.extend([{"weights": [1, 2, math.inf]}])
    assert rejection(graph).path == "deployments[2].init_args[1].weights[2]"


def test_a_struct_nested_too_deep_is_rejected() -> None:
    nested: object = 1
    for _ in range(MAX_STRUCT_DEPTH):
        nested = [nested]
    graph = pipeline_graph()
    graph.deployments[1].user_config.update({"deep": nested})
    error = rejection(graph)
    assert error.path.startswith("deployments[1].user_config.deep[0][0]")
    assert error.detail == f"nested deeper than {MAX_STRUCT_DEPTH} levels"


def test_too_many_struct_values_in_a_document_are_rejected() -> None:
    graph = pipeline_graph()
    graph.deployments[1].init_args.extend([None] * (MAX_STRUCT_VALUES // 2))
    graph.deployments[2].init_args.extend([None] * (MAX_STRUCT_VALUES // 2))
    assert len(document(graph)) < MAX_DOCUMENT_BYTES
    error = rejection(graph)
    assert error.path.startswith("deployments[2].init_args[")
    assert error.detail == f"the document holds more than {MAX_STRUCT_VALUES} Struct values"


# --- the application ---------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["api", "/api/", "/{id}", "/a?b", "/a\nb", "/" + "a" * 256])
def test_a_bad_route_prefix_is_rejected(prefix: str) -> None:
    graph = pipeline_graph()
    graph.route_prefix = prefix
    assert rejection(graph).path == "route_prefix"


def test_a_bad_application_name_is_rejected() -> None:
    graph = pipeline_graph()
    graph.application_name = "my app"
    assert str(rejection(graph)).startswith('application_name: "my app" must be letters')


def test_pythonpath_in_runtime_env_is_rejected() -> None:
    graph = pipeline_graph()
    graph.runtime_env.env_vars["PYTHONPATH"] = "/mine"
    error = rejection(graph)
    assert error.path == "runtime_env.env_vars.PYTHONPATH"
    assert "graph builder" in error.detail


def test_an_env_var_name_that_is_no_name_is_rejected() -> None:
    graph = pipeline_graph()
    graph.runtime_env.env_vars["A=B"] = "c"
    assert rejection(graph).path == 'runtime_env.env_vars["A=B"]'


@pytest.mark.parametrize(
    "working_dir",
    ["/home/me/app", "./app", "app.zip", "file:///tmp/app.zip", "local:///app", "http://x/a.zip"],
)
def test_a_working_dir_that_is_no_remote_uri_is_rejected(working_dir: str) -> None:
    graph = pipeline_graph()
    graph.runtime_env.working_dir = working_dir
    error = rejection(graph)
    assert error.path == "runtime_env.working_dir"
    assert "remote URI" in error.detail


def test_a_working_dir_with_credentials_is_rejected_without_echoing_them() -> None:
    graph = pipeline_graph()
    graph.runtime_env.working_dir = "https://user:hunter2@example.com/app.zip"
    error = rejection(graph)
    assert error.path == "runtime_env.working_dir"
    assert "hunter2" not in str(error)


def test_a_pip_entry_with_a_newline_is_rejected() -> None:
    graph = pipeline_graph()
    graph.runtime_env.pip.extend(["numpy", "requests\n--index-url http://evil"])
    assert rejection(graph).path == "runtime_env.pip[1]"


# --- messages stay short and printable ----------------------------------------------------------


def test_a_huge_hostile_name_is_excerpted_and_escaped_in_the_message() -> None:
    graph = pipeline_graph()
    graph.ingress = "\x1b[31m" + "A" * 100_000
    message = str(rejection(graph))
    assert len(message) < 120
    assert "\x1b" not in message
    assert message.startswith('ingress: unknown deployment "\\u001b[31mAAA')


# --- hostile bytes -----------------------------------------------------------------------------


@given(st.binary(max_size=512))
@settings(max_examples=1000, deadline=None)
def test_arbitrary_bytes_never_raise_anything_but_graph_rejected(data: bytes) -> None:
    error = outcome(data)
    if error is not None:
        assert error.reason in (NOT_A_SERVE_GRAPH, INVALID_GRAPH)
        assert str(error) == f"{error.path}: {error.detail}"


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_damaged_documents_never_raise_anything_but_graph_rejected(data: st.DataObject) -> None:
    original = bytearray(document(pipeline_graph()))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(original) - 1))
        original[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(original)))
    error = outcome(bytes(original[:cut]))
    assert error is None or json.dumps(str(error)).isascii()
