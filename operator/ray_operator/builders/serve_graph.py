"""What a RayServeGraph creates, built purely: the Serve config compiled from its graph, the
ConfigMap that ships the graph builder, and the RayService that runs both.

Compilation puts each part of a `ServeGraph` where Serve treats it best (verified on a real head,
issue 14): the code-shaped part (import paths, init args and kwargs, handle wiring, ingress) goes
into the application's `args`, read by the builder module `servegraph/ray_operator_serve_graph.py`
(`import_path: ray_operator_serve_graph:build`); scaling and resources (num_replicas or
autoscaling, ray_actor_options, max_ongoing_requests, user_config) go into the application's
`deployments:` overrides. A replica change is then a lightweight Serve update (replicas kept);
an init-arg change rebuilds the application, as it must.

The config text is deterministic, so an unchanged graph never updates the RayService: keys are
sorted, deployments are listed by name and handles by argument (document order of deployments
and edges does not matter; `init_args` order does). Every string but plain words and paths is
double-quoted: KubeRay and our RayService controller read `serveConfigV2` with Go's YAML rules,
under which a plain `y`, `5e-3` or `2024-01-01` would stop being a string (`bounded_yaml`).

Numbers in `google.protobuf.Struct` are doubles on the wire: integral values within ±2**53 (where
every integer is exact) are compiled to ints, so `{"factor": 3}` reaches the user's constructor
as `3`, not `3.0`; other values stay floats.

The builder reaches the Ray containers through the ConfigMap
`<graph>-serve-graph-builder-<version>`, `<version>` the first 10 hex digits of the module's
sha256 (`builder_configmap_name`): mounted read-only at `BUILDER_MOUNT_PATH` and prepended to
`PYTHONPATH` of every Ray container (`inject_builder`). Whatever is first on PYTHONPATH runs in
every Python process of the cluster (a `sitecustomize.py`, a `.pth`), so the volume projects the
module file alone (`items`), and the ConfigMap is written `immutable`, holding exactly the module
(`build_builder_configmap`): the API server then refuses every later change of its content. An
immutable object is never refreshed in a running Pod (the kubelet stops watching it), hence the
version in the name: an operator whose module differs writes a new ConfigMap, and the changed
`rayClusterConfig` rolls the cluster out as any cluster change does. `builder_configmap_findings`
says, in fixed words, how a ConfigMap of that name differs from what the operator writes; the
controller trusts one only by that (content and immutability), never by its ownerReferences or
managedFields, which any client may set. If the Ray image itself sets PYTHONPATH, the
container's env entry shadows it (Kubernetes semantics); a PYTHONPATH the Pod template sets is
kept, after ours.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import yaml
from google.protobuf.struct_pb2 import ListValue, Struct, Value
from ray_operator_io.v1alpha1 import serve_graph_pb2

from ray_operator.spec import kuberay_names
from ray_operator.spec.raycluster import JSON
from ray_operator.spec.serve_graph_names import (
    BUILDER_IMPORT_PATH,
    BUILDER_MODULE,
    BUILDER_MOUNT_PATH,
    BUILDER_VOLUME,
    GRAPH_FORMAT,
    GRAPH_LABEL,
    SERVE_GRAPH_GROUP,
    SERVE_GRAPH_VERSION,
)

Object = Mapping[str, Any]

BUILDER_FILE = f"{BUILDER_MODULE}.py"
"""The ConfigMap's data key, and the file name the Ray containers import the builder from."""
BUILDER_CONFIGMAP_SUFFIX = "-serve-graph-builder"
PYTHONPATH = "PYTHONPATH"
_MAX_OBJECT_NAME = 253  # a ConfigMap name is a DNS subdomain
_MAX_LABEL_VALUE = 63
_SAFE_INTEGER = 2**53
_BUILDER_VERSION_LENGTH = 10
# When the Pod template takes PYTHONPATH from a Secret or ConfigMap (`valueFrom`), that value
# moves to this variable and PYTHONPATH becomes `<builder dir>:$(…)`: Kubernetes expands
# references to variables defined earlier in the list.
USER_PYTHONPATH = "RAY_OPERATOR_USER_PYTHONPATH"


# --- the Serve config --------------------------------------------------------------------------


def compile_serve_config(
    graph: serve_graph_pb2.ServeGraph,
    *,
    default_application_name: str,
    http_options: Mapping[str, Any] | None,
) -> str:
    """The `serveConfigV2` text of a parsed graph (one application); deterministic.

    `default_application_name` names the application when the graph does not; `http_options`
    (the RayServeGraph's `spec.serveHttpOptions`) becomes the top-level `http_options`.
    """
    config: JSON = {"applications": [_application(graph, default_name=default_application_name)]}
    if http_options is not None:
        config["http_options"] = copy.deepcopy(dict(http_options))
    return render_serve_config(config)


def render_serve_config(config: Mapping[str, Any], *, pure_python: bool = False) -> str:
    """A Serve config as YAML text, keys sorted, strings quoted as Go's YAML needs them.

    libyaml's emitter when PyYAML has it (its wheels do, so the operator image does): 3 to 100
    times faster than PyYAML's own on a graph at the bounds of `parse_graph`, which keeps
    compiling in the tens of milliseconds. `pure_python` forces PyYAML's emitter, a port of
    libyaml's: it writes the same values, and the same text except for mapping keys that are
    empty or hold line breaks (simple vs `? ` complex keys), so an operator build without libyaml
    would rewrite such configs once.
    """
    return yaml.dump(
        config,
        Dumper=_PythonQuotingDumper if pure_python else _QuotingDumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=False,
        width=_NO_FOLDING,
    )


def digest(data: bytes | str) -> str:
    """`sha256:<hex>` of a document or a config text (UTF-8)."""
    raw = data.encode() if isinstance(data, str) else data
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _application(graph: serve_graph_pb2.ServeGraph, *, default_name: str) -> JSON:
    application: JSON = {
        "name": graph.application_name or default_name,
        "route_prefix": graph.route_prefix or "/",
        "import_path": BUILDER_IMPORT_PATH,
        "args": _builder_args(graph),
    }
    runtime_env = _runtime_env(graph.runtime_env)
    if runtime_env:
        application["runtime_env"] = runtime_env
    overrides = [
        override
        for override in (_override(deployment) for deployment in _by_name(graph.deployments))
        if len(override) > 1
    ]
    if overrides:
        application["deployments"] = overrides
    return application


def _builder_args(graph: serve_graph_pb2.ServeGraph) -> JSON:
    """`args`, as `GraphArgs` of the builder module reads them."""
    handles: dict[str, dict[str, str]] = {}
    for edge in graph.edges:
        handles.setdefault(edge.caller, {})[edge.argument] = edge.callee
    deployments = []
    for deployment in _by_name(graph.deployments):
        described: JSON = {"name": deployment.name, "import_path": deployment.import_path}
        if deployment.init_args.values:
            described["init_args"] = _plain_list(deployment.init_args)
        if deployment.init_kwargs.fields:
            described["init_kwargs"] = _plain_struct(deployment.init_kwargs)
        if deployment.name in handles:
            described["handles"] = dict(sorted(handles[deployment.name].items()))
        deployments.append(described)
    return {"format": GRAPH_FORMAT, "ingress": graph.ingress, "deployments": deployments}


def _override(deployment: serve_graph_pb2.Deployment) -> JSON:
    """The deployment's entry in the application's `deployments:` (just `name` when none)."""
    override: JSON = {"name": deployment.name}
    scaling = deployment.WhichOneof("scaling")
    if scaling == "num_replicas":
        override["num_replicas"] = deployment.num_replicas
    elif scaling == "autoscaling":
        override["autoscaling_config"] = _autoscaling(deployment.autoscaling)
    actor_options = _actor_options(deployment.ray_actor_options)
    if actor_options:
        override["ray_actor_options"] = actor_options
    if deployment.HasField("max_ongoing_requests"):
        override["max_ongoing_requests"] = deployment.max_ongoing_requests
    if deployment.HasField("user_config"):
        override["user_config"] = _plain_struct(deployment.user_config)
    return override


def _autoscaling(autoscaling: serve_graph_pb2.AutoscalingConfig) -> JSON:
    config: JSON = {
        "min_replicas": autoscaling.min_replicas,
        "max_replicas": autoscaling.max_replicas,
    }
    if autoscaling.HasField("initial_replicas"):
        config["initial_replicas"] = autoscaling.initial_replicas
    for field in ("target_ongoing_requests", "upscale_delay_s", "downscale_delay_s"):
        if autoscaling.HasField(field):
            config[field] = _number(getattr(autoscaling, field))
    return config


def _actor_options(options: serve_graph_pb2.ActorOptions) -> JSON:
    result: JSON = {}
    for field in ("num_cpus", "num_gpus"):
        if options.HasField(field):
            result[field] = _number(getattr(options, field))
    if options.HasField("memory_bytes"):
        result["memory"] = options.memory_bytes
    if options.resources:
        result["resources"] = {
            name: _number(amount) for name, amount in sorted(options.resources.items())
        }
    return result


def _runtime_env(runtime_env: serve_graph_pb2.RuntimeEnv) -> JSON:
    result: JSON = {}
    if runtime_env.pip:
        result["pip"] = list(runtime_env.pip)
    if runtime_env.env_vars:
        result["env_vars"] = dict(sorted(runtime_env.env_vars.items()))
    if runtime_env.working_dir:
        result["working_dir"] = runtime_env.working_dir
    return result


def _by_name(deployments: Iterable[serve_graph_pb2.Deployment]) -> list[serve_graph_pb2.Deployment]:
    return sorted(deployments, key=lambda deployment: deployment.name)


def _plain_struct(struct: Struct) -> JSON:
    return {key: _plain(value) for key, value in sorted(struct.fields.items())}


def _plain_list(values: ListValue) -> list[Any]:
    return [_plain(value) for value in values.values]


def _plain(value: Value) -> Any:
    """A Struct value as plain Python (depth and size were bounded by `parse_graph`)."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return _number(value.number_value)
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return _plain_struct(value.struct_value)
    if kind == "list_value":
        return _plain_list(value.list_value)
    return None  # null_value, or a Value with no kind set


def _number(number: float) -> int | float:
    """Integral doubles within ±2**53 as ints (see the module docstring)."""
    if number.is_integer() and abs(number) <= _SAFE_INTEGER:
        return int(number)
    return number


_SafeDumperBase: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _QuotingDumper(_SafeDumperBase):  # type: ignore[misc]
    """Double-quotes every string that is not plainly a word or a path (keys too), and never
    writes anchors/aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _PythonQuotingDumper(yaml.SafeDumper):
    """`_QuotingDumper` on PyYAML's pure-Python emitter."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# Strings left unquoted: a letter, `_` or `/` first (never a number, a timestamp or `.inf`), then
# word characters, `.`, `/` and `-`; minus the words Go's YAML (yaml.v2) reads as booleans or null.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_GO_YAML_WORDS = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null"})


def _quoted(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    plain = _PLAIN.fullmatch(text) is not None and text.lower() not in _GO_YAML_WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=None if plain else '"')


_QuotingDumper.add_representer(str, _quoted)
_PythonQuotingDumper.add_representer(str, _quoted)
_NO_FOLDING = 1 << 30  # PyYAML folds long double-quoted strings at `width`; keep one line each


# --- the builder module and its ConfigMap ------------------------------------------------------


@functools.cache
def builder_source() -> str:
    """The text of the builder module the Ray containers import (shipped as package data)."""
    package = resources.files("ray_operator.servegraph")
    return package.joinpath(BUILDER_FILE).read_text(encoding="utf-8")


@functools.cache
def builder_digest() -> str:
    """`sha256:<hex>` of the builder module: what a builder ConfigMap must hold."""
    return digest(builder_source())


def builder_version() -> str:
    """The module's short version (10 hex digits of its digest), the last part of the name."""
    return builder_digest().removeprefix("sha256:")[:_BUILDER_VERSION_LENGTH]


def builder_configmap_name(graph_name: str) -> str:
    """`<graph>-serve-graph-builder-<version>`; the graph's part is clipped and hashed if too
    long. A new module is a new name (see the module docstring)."""
    suffix = f"{BUILDER_CONFIGMAP_SUFFIX}-{builder_version()}"
    name = f"{graph_name}{suffix}"
    if len(name) <= _MAX_OBJECT_NAME:
        return name
    keep = _MAX_OBJECT_NAME - len(suffix) - 9  # "-" + 8 hex
    return f"{graph_name[:keep].rstrip('-.')}-{_short_hash(graph_name)}{suffix}"


def graph_label_value(graph_name: str) -> str:
    """The `GRAPH_LABEL` value: the graph's name, clipped and hashed past 63 characters (a
    RayServeGraph name may be 253 long, a label value not)."""
    if len(graph_name) <= _MAX_LABEL_VALUE:
        return graph_name
    keep = _MAX_LABEL_VALUE - 9
    return f"{graph_name[:keep].rstrip('-.')}-{_short_hash(graph_name)}"


def build_builder_configmap(rsg: Object) -> JSON:
    """The ConfigMap holding the builder module and nothing else, immutable, labelled and owned
    like the rest."""
    metadata = rsg["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _dependent_metadata(
            rsg, name=builder_configmap_name(metadata["name"]), namespace=metadata["namespace"]
        ),
        "data": {BUILDER_FILE: builder_source()},
        "immutable": True,
    }


def builder_configmap_findings(configmap: Object) -> list[str]:
    """How `configmap` differs from what `build_builder_configmap` writes, in fixed words (never
    its keys or content, which whoever wrote them chose); empty when it holds exactly the
    module, nothing else, and is immutable."""
    data = configmap.get("data") or {}
    module = data.get(BUILDER_FILE)
    findings = []
    if not isinstance(module, str) or digest(module) != builder_digest():
        findings.append("a module that is not the operator's")
    if any(key != BUILDER_FILE for key in data):
        findings.append("data keys besides the module")
    if configmap.get("binaryData"):
        findings.append("binaryData")
    if configmap.get("immutable") is not True:
        findings.append("no immutable: true")
    return findings


def mounted_configmap_names(ray_cluster_spec: Object) -> set[str]:
    """The ConfigMaps the Pod templates of a RayCluster spec mount (as a volume, or projected)."""
    groups = [
        ray_cluster_spec.get("headGroupSpec"),
        *(ray_cluster_spec.get("workerGroupSpecs") or []),
    ]
    names: set[str] = set()
    for group in groups:
        pod_spec = ((group or {}).get("template") or {}).get("spec") or {}
        for volume in pod_spec.get("volumes") or ():
            sources = [volume, *((volume.get("projected") or {}).get("sources") or ())]
            names.update(
                str(source["configMap"]["name"])
                for source in sources
                if isinstance(source.get("configMap"), Mapping) and source["configMap"].get("name")
            )
    return names


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


# --- the RayService ----------------------------------------------------------------------------


def build_rayservice(rsg: Object, *, serve_config: str) -> JSON:
    """The RayService running the graph: named `spec.serviceName` or after the graph, owned by it,
    its `rayClusterConfig` the graph's `rayClusterSpec` with the builder injected."""
    metadata = rsg["metadata"]
    spec = rsg.get("spec") or {}
    service_spec: JSON = {
        "serveConfigV2": serve_config,
        "rayClusterConfig": inject_builder(
            spec.get("rayClusterSpec") or {},
            configmap_name=builder_configmap_name(metadata["name"]),
        ),
    }
    for field in ("upgradeStrategy", "rayClusterDeletionDelaySeconds"):
        if spec.get(field) is not None:
            service_spec[field] = copy.deepcopy(spec[field])
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": _dependent_metadata(
            rsg,
            name=str(spec.get("serviceName") or metadata["name"]),
            namespace=metadata["namespace"],
        ),
        "spec": service_spec,
    }


def _dependent_metadata(rsg: Object, *, name: str, namespace: str) -> JSON:
    meta: JSON = {
        "name": name,
        "namespace": namespace,
        "labels": {
            GRAPH_LABEL: graph_label_value(rsg["metadata"]["name"]),
            kuberay_names.CREATED_BY_LABEL: kuberay_names.CREATED_BY,
        },
    }
    owner = _owner_reference(rsg)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def _owner_reference(rsg: Object) -> JSON | None:
    """A controller reference to the RayServeGraph; None while its uid is unknown (dry builds)."""
    metadata = rsg["metadata"]
    if not metadata.get("uid"):
        return None
    return {
        "apiVersion": rsg.get("apiVersion", f"{SERVE_GRAPH_GROUP}/{SERVE_GRAPH_VERSION}"),
        "kind": rsg.get("kind", "RayServeGraph"),
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --- the builder in the Ray containers ---------------------------------------------------------


def inject_builder(ray_cluster_spec: Object, *, configmap_name: str) -> JSON:
    """A copy of `ray_cluster_spec` whose Ray containers (container 0 of the head and of every
    worker group) mount the builder module of the ConfigMap (that file alone) and find it first
    on PYTHONPATH.

    Deterministic and idempotent (injecting twice equals injecting once): the RayService
    controller compares `rayClusterConfig` by hash, so any drift would upgrade the cluster.
    """
    spec: JSON = copy.deepcopy(dict(ray_cluster_spec))
    groups = [spec.get("headGroupSpec"), *(spec.get("workerGroupSpecs") or [])]
    for group in groups:
        pod_spec = ((group or {}).get("template") or {}).get("spec")
        if isinstance(pod_spec, dict) and pod_spec.get("containers"):
            _inject_into_pod(pod_spec, configmap_name=configmap_name)
    return spec


def _inject_into_pod(pod_spec: JSON, *, configmap_name: str) -> None:
    # Only the module file: any other key would be importable too (`sitecustomize.py` runs in
    # every Python process). The ConfigMap holds nothing else; this holds if it ever did.
    items = [{"key": BUILDER_FILE, "path": BUILDER_FILE}]
    volume = {"name": BUILDER_VOLUME, "configMap": {"name": configmap_name, "items": items}}
    volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != BUILDER_VOLUME]
    pod_spec["volumes"] = [*volumes, volume]
    container = pod_spec["containers"][0]
    mount = {"name": BUILDER_VOLUME, "mountPath": BUILDER_MOUNT_PATH, "readOnly": True}
    mounts = [
        m
        for m in container.get("volumeMounts") or []
        if m.get("name") != BUILDER_VOLUME and m.get("mountPath") != BUILDER_MOUNT_PATH
    ]
    container["volumeMounts"] = [*mounts, mount]
    container["env"] = _prepend_to_pythonpath(list(container.get("env") or []))


def _prepend_to_pythonpath(env: list[JSON]) -> list[JSON]:
    """`env` with the builder directory first on PYTHONPATH (kept if already first)."""
    position = next((i for i, var in enumerate(env) if var.get("name") == PYTHONPATH), None)
    if position is None:
        return [*env, {"name": PYTHONPATH, "value": BUILDER_MOUNT_PATH}]
    current = env[position]
    if "valueFrom" in current:
        moved = {"name": USER_PYTHONPATH, "valueFrom": current["valueFrom"]}
        pythonpath = {"name": PYTHONPATH, "value": f"{BUILDER_MOUNT_PATH}:$({USER_PYTHONPATH})"}
        return [*env[:position], moved, pythonpath, *env[position + 1 :]]
    value = str(current.get("value") or "")
    if value.split(":")[0] == BUILDER_MOUNT_PATH:
        return env
    prepended = f"{BUILDER_MOUNT_PATH}:{value}" if value else BUILDER_MOUNT_PATH
    return [*env[:position], {"name": PYTHONPATH, "value": prepended}, *env[position + 1 :]]
