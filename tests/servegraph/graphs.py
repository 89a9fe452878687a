"""ServeGraph documents for the tests: the pipeline of tests/serve_apps/graph_pipeline.py, and a
Hypothesis strategy of random valid graphs.

`pipeline_graph()` is the three-deployment DAG the acceptance tests deploy (preprocess → model →
postprocess; `GET /?x=2` answers `out=9` with factor 3); its keyword arguments are what the
tests change between two versions of the document.
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st
from ray_operator_io.v1alpha1 import serve_graph_pb2

ServeGraph = serve_graph_pb2.ServeGraph


def pipeline_graph(
    *,
    factor: int = 3,
    model_replicas: int = 1,
    label: str = "out",
    application_name: str = "pipeline",
) -> ServeGraph:
    """preprocess → model → postprocess, every replica on 0 CPUs."""
    graph = ServeGraph(application_name=application_name, route_prefix="/", ingress="pre")
    pre = graph.deployments.add(name="pre", import_path="graph_pipeline:Preprocess")
    pre.num_replicas = 1
    model = graph.deployments.add(name="model", import_path="graph_pipeline:Model")
    model.init_kwargs.update({"factor": factor})
    model.num_replicas = model_replicas
    post = graph.deployments.add(name="post", import_path="graph_pipeline:Postprocess")
    post.init_args.extend([label])
    post.num_replicas = 1
    for deployment in graph.deployments:
        deployment.ray_actor_options.num_cpus = 0
    graph.edges.add(caller="pre", callee="model", argument="model")
    graph.edges.add(caller="model", callee="post", argument="post")
    return graph


def document(graph: ServeGraph) -> bytes:
    """The graph as a registry would serve it."""
    return graph.SerializeToString(deterministic=True)


def as_plain(value: Any) -> Any:
    """What a JSON value put into a Struct comes out as after compilation: numbers travel as
    doubles, integral ones within ±2**53 come back as ints."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        return int(number) if number.is_integer() and abs(number) <= 2**53 else number
    if isinstance(value, list):
        return [as_plain(item) for item in value]
    return {key: as_plain(item) for key, item in value.items()}


_names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,10}[A-Za-z0-9])?", fullmatch=True)
_modules = st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z_][a-z0-9_]{0,8}){0,2}", fullmatch=True)
_attributes = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
_finite = st.floats(allow_nan=False, allow_infinity=False)
_json_scalars = st.none() | st.booleans() | st.integers(-(2**60), 2**60) | _finite | st.text()
json_values = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
# Keyword arguments never named like the handles' arguments (`h0`, `h1`, …).
_kwarg_keys = st.text(max_size=8).filter(lambda key: not (key[:1] == "h" and key[1:].isdigit()))


@st.composite
def valid_graphs(draw: st.DrawFn) -> ServeGraph:
    """Random graphs `parse_graph` accepts: every deployment reachable from the ingress (the
    first one) through a DAG of edges; every option drawn within its bounds."""
    names = draw(st.lists(_names, min_size=1, max_size=6, unique=True))
    graph = ServeGraph(ingress=names[0])
    if draw(st.booleans()):
        graph.application_name = draw(_names)
    if draw(st.booleans()):
        graph.route_prefix = draw(st.sampled_from(["/", "/api", "/a/b-c"]))
    for name in names:
        _draw_deployment(draw, graph.deployments.add(name=name))
    arguments: dict[str, int] = {}
    for index in range(1, len(names)):
        # At least one edge from an earlier deployment keeps each one reachable; edges only ever
        # go from an earlier deployment to a later one, so the graph stays acyclic.
        callers = {draw(st.integers(0, index - 1))}
        callers |= set(draw(st.lists(st.integers(0, index - 1), max_size=2)))
        for caller in sorted(callers):
            number = arguments.get(names[caller], 0)
            arguments[names[caller]] = number + 1
            graph.edges.add(caller=names[caller], callee=names[index], argument=f"h{number}")
    _draw_runtime_env(draw, graph.runtime_env)
    shuffled = draw(st.permutations(list(graph.edges)))
    del graph.edges[:]
    graph.edges.extend(shuffled)
    return graph


def _draw_deployment(draw: st.DrawFn, deployment: serve_graph_pb2.Deployment) -> None:
    deployment.import_path = f"{draw(_modules)}:{draw(_attributes)}"
    deployment.init_args.extend(draw(st.lists(json_values, max_size=3)))
    deployment.init_kwargs.update(draw(st.dictionaries(_kwarg_keys, json_values, max_size=3)))
    scaling = draw(st.sampled_from(["none", "fixed", "autoscaling"]))
    if scaling == "fixed":
        deployment.num_replicas = draw(st.integers(1, 2**32 - 1))
    elif scaling == "autoscaling":
        low, high = sorted(draw(st.lists(st.integers(0, 1000), min_size=2, max_size=2)))
        deployment.autoscaling.min_replicas = low
        deployment.autoscaling.max_replicas = max(high, 1)
        if draw(st.booleans()):
            deployment.autoscaling.initial_replicas = draw(st.integers(low, max(high, 1)))
        if draw(st.booleans()):
            deployment.autoscaling.target_ongoing_requests = draw(
                st.floats(min_value=0.01, max_value=1e6)
            )
        if draw(st.booleans()):
            deployment.autoscaling.upscale_delay_s = draw(st.floats(min_value=0, max_value=1e6))
    options = deployment.ray_actor_options
    if draw(st.booleans()):
        options.num_cpus = draw(st.floats(min_value=0, max_value=1e6))
    if draw(st.booleans()):
        options.num_gpus = draw(st.floats(min_value=0, max_value=64))
    if draw(st.booleans()):
        options.memory_bytes = draw(st.integers(0, 2**64 - 1))
    resources = draw(
        st.dictionaries(
            st.text(string.ascii_letters + "_-/.", min_size=1, max_size=20).filter(
                lambda name: name not in {"CPU", "GPU", "memory", "object_store_memory"}
            ),
            st.floats(min_value=0, max_value=1e9),
            max_size=3,
        )
    )
    options.resources.update(resources)
    if draw(st.booleans()):
        deployment.max_ongoing_requests = draw(st.integers(1, 2**32 - 1))
    if draw(st.booleans()):
        deployment.user_config.update(draw(st.dictionaries(st.text(), json_values, max_size=3)))


def _draw_runtime_env(draw: st.DrawFn, runtime_env: serve_graph_pb2.RuntimeEnv) -> None:
    requirements = st.from_regex(r"[a-z][a-z0-9-]{0,10}(==[0-9]\.[0-9])?", fullmatch=True)
    runtime_env.pip.extend(draw(st.lists(requirements, max_size=4)))
    runtime_env.env_vars.update(
        draw(
            st.dictionaries(
                st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True).filter(
                    lambda name: name != "PYTHONPATH"
                ),
                st.text(max_size=20),
                max_size=3,
            )
        )
    )
    if draw(st.booleans()):
        runtime_env.working_dir = draw(
            st.sampled_from(["https://example.com/app.zip", "s3://bucket/code.zip"])
        )
