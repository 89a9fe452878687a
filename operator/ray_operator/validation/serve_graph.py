"""Reading a ServeGraph document: protobuf bytes in, a checked `ServeGraph` out, or `GraphRejected`.

`parse_graph` is the only door from a fetched artifact to the compiler: it decodes the bytes
(`ray_operator_io.v1alpha1.ServeGraph`, proto3) and checks everything Serve or the builder that
runs inside Ray (`servegraph/ray_operator_serve_graph.py`) would otherwise trip over later, far
from the user: names, import paths, the wiring (unknown nodes, duplicate handles, cycles),
scaling and resources, the runtime_env. Each rejection names the field path
(`edges[2].callee: unknown deployment "modle"`) so a user can fix the document from the
condition message alone.

Decisions worth knowing:
- A deployment that no chain of edges reaches from the ingress is rejected. The builder returns
  the ingress's bound DAG, so Serve would never deploy it, and its scaling override (compiled
  into the application's `deployments:`) would name a deployment the application does not have,
  which Serve refuses at deploy time — a late, confusing failure instead of a clear early one.
- Unknown fields anywhere (a newer schema, or another message type that happened to decode) make
  the document `NotAServeGraph`: silently dropping a field a user set (say, a new resource
  option) would deploy something other than what they described.
- Numbers in `google.protobuf.Struct` are doubles on the wire; NaN and ±inf are refused (neither
  JSON nor Serve can carry them). `builders.serve_graph` turns integral ones back into ints.

Bounds (work is linear in the document, and the document is bounded): at most 256 KiB — the
compiled config is stored in a RayService (etcd refuses objects above 1.5 MiB) and escaping can
quadruple a string —, 64 deployments, 256 edges, 63-character names, Struct nesting 32 deep and
10,000 Struct values per document. At these bounds parsing takes about 50 ms and compiling 70 ms
on one core (measured); protobuf's own decoder stops at 100 levels of message nesting.

Messages never echo document bytes beyond a short, escaped excerpt of a name or key (`_quote`).
"""

from __future__ import annotations

import json
import keyword
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from graphlib import CycleError, TopologicalSorter
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.message import DecodeError, Message
from google.protobuf.struct_pb2 import ListValue, Struct, Value
from google.protobuf.unknown_fields import UnknownFieldSet
from ray_operator_io.v1alpha1 import serve_graph_pb2

from ray_operator.spec.serve_graph_names import MAX_DOCUMENT_BYTES

NOT_A_SERVE_GRAPH = "NotAServeGraph"
INVALID_GRAPH = "InvalidGraph"

MAX_DEPLOYMENTS = 64
MAX_EDGES = 256
MAX_NAME_LENGTH = 63
MAX_IMPORT_PATH_LENGTH = 256
MAX_ROUTE_PREFIX_LENGTH = 256
MAX_STRUCT_DEPTH = 32
MAX_STRUCT_VALUES = 10_000
MAX_RESOURCES = 32
MAX_PIP_PACKAGES = 64
MAX_PIP_ENTRY_LENGTH = 256
MAX_ENV_VARS = 64
MAX_ENV_VALUE_LENGTH = 4096
MAX_URI_LENGTH = 2048

# A deployment or application name: what Serve, the status and kubectl show; letters, digits and
# `-_.`, starting and ending with a letter or digit (Python class names like `Preprocess` fit).
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
# `package.module:attribute` — the form the builder imports (`importlib` + `getattr`).
_IMPORT_PATH = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*:{_IDENTIFIER}")
_ENV_NAME = re.compile(_IDENTIFIER)
_ARGUMENT = re.compile(_IDENTIFIER)
# Ray refuses these as custom resources: they have their own options.
_RESERVED_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
# Where Ray can download a working_dir from on every node (Ray's remote protocols minus plain
# http, which would let anyone on the path swap the code, and `file`, a path on the node).
_WORKING_DIR_SCHEMES = frozenset({"https", "s3", "gs", "azure", "abfss"})
_EXCERPT = 40


class GraphRejected(Exception):  # noqa: N818 (the contract's name)
    """A document that is not a valid ServeGraph: `reason` (a Parsed condition reason), `path`
    (the field, e.g. `edges[2].callee`; "" for the document as a whole) and `detail`."""

    def __init__(self, path: str, detail: str, *, reason: str = INVALID_GRAPH) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail
        self.reason = reason


def parse_graph(data: bytes) -> serve_graph_pb2.ServeGraph:
    """Decode and check a ServeGraph document; raises only `GraphRejected`, for any input."""
    graph = _decode(data)
    _check_no_unknown_fields(graph, "")
    _check_application(graph)
    _check_deployments(graph.deployments)
    names = {deployment.name: index for index, deployment in enumerate(graph.deployments)}
    _check_ingress(graph.ingress, names)
    _check_edges(graph, names)
    _check_acyclic(graph.edges)
    _check_reachable(graph, names)
    _check_runtime_env(graph.runtime_env)
    return graph


def graph_summary(graph: serve_graph_pb2.ServeGraph) -> dict[str, Any]:
    """The `status.graph` of a RayServeGraph: ingress, deployment names, edges, all sorted."""
    edges = sorted((edge.caller, edge.callee, edge.argument) for edge in graph.edges)
    return {
        "ingress": graph.ingress,
        "deployments": sorted(deployment.name for deployment in graph.deployments),
        "edges": [
            {"caller": caller, "callee": callee, "argument": argument}
            for caller, callee, argument in edges
        ],
    }


# --- the document as a whole -------------------------------------------------------------------


def _decode(data: bytes) -> serve_graph_pb2.ServeGraph:
    if len(data) > MAX_DOCUMENT_BYTES:
        raise GraphRejected(
            "",
            f"the document is {len(data)} bytes; a ServeGraph may be at most "
            f"{MAX_DOCUMENT_BYTES} bytes (its compiled Serve config must fit in a RayService)",
        )
    if not data:
        raise GraphRejected("", "the document is empty (0 bytes)", reason=NOT_A_SERVE_GRAPH)
    graph = serve_graph_pb2.ServeGraph()
    try:
        graph.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError):
        raise GraphRejected(
            "", f"not a ServeGraph protobuf: {_guess_content(data)}", reason=NOT_A_SERVE_GRAPH
        ) from None
    return graph


def _guess_content(data: bytes) -> str:
    """A hint about what the bytes are instead, from their first non-blank byte only."""
    start = data.lstrip()[:1]
    if start in (b"{", b"["):
        return "it looks like JSON text (the document must be the binary protobuf encoding)"
    if start == b"<":
        return "it looks like HTML or XML (an error page?)"
    return "the wire format is corrupt or truncated"


def _check_no_unknown_fields(message: Message, path: str) -> None:
    """Unknown fields anywhere mean another message type or a newer schema (see module doc)."""
    unknown = UnknownFieldSet(message)
    if len(unknown):
        raise GraphRejected(
            path,
            f"unknown field number {unknown[0].field_number} (not a "
            "ray-operator.io/v1alpha1 ServeGraph, or written for a newer version of it)",
            reason=NOT_A_SERVE_GRAPH,
        )
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        child = _join(path, field.name)
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    _check_no_unknown_fields(item, f"{child}{_key(key)}")
        elif field.is_repeated:
            for index, item in enumerate(value):
                _check_no_unknown_fields(item, f"{child}[{index}]")
        else:
            _check_no_unknown_fields(value, child)


def _check_application(graph: serve_graph_pb2.ServeGraph) -> None:
    if graph.application_name:
        _check_name(graph.application_name, "application_name")
    prefix = graph.route_prefix
    if prefix:
        # Serve's own rules (ray/serve/schema.py `_route_prefix_format`), checked here so the
        # message names the field instead of surfacing as a failed deploy.
        if len(prefix) > MAX_ROUTE_PREFIX_LENGTH:
            raise GraphRejected("route_prefix", f"longer than {MAX_ROUTE_PREFIX_LENGTH} characters")
        if not prefix.startswith("/"):
            raise GraphRejected("route_prefix", f'{_quote(prefix)} must start with "/"')
        if len(prefix) > 1 and prefix.endswith("/"):
            raise GraphRejected("route_prefix", f'{_quote(prefix)} must not end with "/"')
        if any(character in prefix for character in "{}?#") or not prefix.isprintable():
            raise GraphRejected(
                "route_prefix", f"{_quote(prefix)} may not contain wildcards, ?, # or controls"
            )


# --- deployments -------------------------------------------------------------------------------


def _check_deployments(deployments: Iterable[serve_graph_pb2.Deployment]) -> None:
    listed = list(deployments)
    if not listed:
        raise GraphRejected("deployments", "empty graph: at least one deployment is required")
    if len(listed) > MAX_DEPLOYMENTS:
        raise GraphRejected(
            "deployments", f"{len(listed)} deployments; at most {MAX_DEPLOYMENTS} are allowed"
        )
    budget = _ValueBudget()
    seen: set[str] = set()
    for index, deployment in enumerate(listed):
        path = f"deployments[{index}]"
        _check_name(deployment.name, f"{path}.name")
        if deployment.name in seen:
            raise GraphRejected(
                f"{path}.name", f"duplicate deployment name {_quote(deployment.name)}"
            )
        seen.add(deployment.name)
        _check_import_path(deployment.import_path, f"{path}.import_path")
        _check_list(deployment.init_args, f"{path}.init_args", budget, depth=1)
        _check_struct(deployment.init_kwargs, f"{path}.init_kwargs", budget, depth=1)
        _check_struct(deployment.user_config, f"{path}.user_config", budget, depth=1)
        _check_scaling(deployment, path)
        _check_actor_options(deployment.ray_actor_options, f"{path}.ray_actor_options")
        if deployment.HasField("max_ongoing_requests") and deployment.max_ongoing_requests < 1:
            raise GraphRejected(f"{path}.max_ongoing_requests", "must be at least 1")


def _check_name(name: str, path: str) -> None:
    if not name:
        raise GraphRejected(path, "required")
    if len(name) > MAX_NAME_LENGTH:
        raise GraphRejected(path, f"{_quote(name)} is longer than {MAX_NAME_LENGTH} characters")
    if _NAME.fullmatch(name) is None:
        raise GraphRejected(
            path,
            f"{_quote(name)} must be letters, digits, '-', '_' or '.', starting and ending "
            "with a letter or digit",
        )


def _check_import_path(import_path: str, path: str) -> None:
    if not import_path:
        raise GraphRejected(path, 'required ("package.module:attribute")')
    if len(import_path) > MAX_IMPORT_PATH_LENGTH:
        raise GraphRejected(path, f"longer than {MAX_IMPORT_PATH_LENGTH} characters")
    if _IMPORT_PATH.fullmatch(import_path) is None:
        raise GraphRejected(
            path,
            f'{_quote(import_path)} is not "package.module:attribute" (Python identifiers, '
            "one colon before the class, function or deployment)",
        )


class _ValueBudget:
    """Counts Struct values across the whole document (the compiled YAML grows with them)."""

    def __init__(self) -> None:
        self.used = 0

    def take(self, path: str) -> None:
        self.used += 1
        if self.used > MAX_STRUCT_VALUES:
            raise GraphRejected(
                path, f"the document holds more than {MAX_STRUCT_VALUES} Struct values"
            )


def _check_struct(struct: Struct, path: str, budget: _ValueBudget, *, depth: int) -> None:
    for key, value in struct.fields.items():
        _check_value(value, f"{path}{_key(key)}", budget, depth=depth)


def _check_list(values: ListValue, path: str, budget: _ValueBudget, *, depth: int) -> None:
    for index, value in enumerate(values.values):
        _check_value(value, f"{path}[{index}]", budget, depth=depth)


def _check_value(value: Value, path: str, budget: _ValueBudget, *, depth: int) -> None:
    budget.take(path)
    if depth > MAX_STRUCT_DEPTH:
        raise GraphRejected(path, f"nested deeper than {MAX_STRUCT_DEPTH} levels")
    kind = value.WhichOneof("kind")
    if kind == "number_value" and not math.isfinite(value.number_value):
        raise GraphRejected(path, "must be a finite number (not NaN or infinity)")
    if kind == "struct_value":
        _check_struct(value.struct_value, path, budget, depth=depth + 1)
    elif kind == "list_value":
        _check_list(value.list_value, path, budget, depth=depth + 1)


def _check_scaling(deployment: serve_graph_pb2.Deployment, path: str) -> None:
    scaling = deployment.WhichOneof("scaling")
    if scaling == "num_replicas" and deployment.num_replicas < 1:
        raise GraphRejected(f"{path}.num_replicas", "must be at least 1")
    if scaling != "autoscaling":
        return
    autoscaling = deployment.autoscaling
    where = f"{path}.autoscaling"
    if autoscaling.max_replicas < 1:
        raise GraphRejected(f"{where}.max_replicas", "must be at least 1")
    if autoscaling.min_replicas > autoscaling.max_replicas:
        raise GraphRejected(
            f"{where}.min_replicas",
            f"{autoscaling.min_replicas} is greater than max_replicas ({autoscaling.max_replicas})",
        )
    if autoscaling.HasField("initial_replicas") and not (
        autoscaling.min_replicas <= autoscaling.initial_replicas <= autoscaling.max_replicas
    ):
        raise GraphRejected(
            f"{where}.initial_replicas",
            f"{autoscaling.initial_replicas} is outside [min_replicas, max_replicas] "
            f"([{autoscaling.min_replicas}, {autoscaling.max_replicas}])",
        )
    if autoscaling.HasField("target_ongoing_requests"):
        _check_quantity(
            autoscaling.target_ongoing_requests, f"{where}.target_ongoing_requests", positive=True
        )
    for delay in ("upscale_delay_s", "downscale_delay_s"):
        if autoscaling.HasField(delay):
            _check_quantity(getattr(autoscaling, delay), f"{where}.{delay}")


def _check_actor_options(options: serve_graph_pb2.ActorOptions, path: str) -> None:
    for field in ("num_cpus", "num_gpus"):
        if options.HasField(field):
            _check_quantity(getattr(options, field), f"{path}.{field}")
    if len(options.resources) > MAX_RESOURCES:
        raise GraphRejected(
            f"{path}.resources", f"{len(options.resources)} resources; at most {MAX_RESOURCES}"
        )
    for name, amount in sorted(options.resources.items()):
        where = f"{path}.resources{_key(name)}"
        if not name or len(name) > MAX_NAME_LENGTH or not name.isprintable():
            raise GraphRejected(
                where, f"a resource name is 1 to {MAX_NAME_LENGTH} printable characters"
            )
        if name in _RESERVED_RESOURCES:
            raise GraphRejected(where, f"{_quote(name)} is set by its own option, not resources")
        _check_quantity(amount, where)


def _check_quantity(amount: float, path: str, *, positive: bool = False) -> None:
    if not math.isfinite(amount):
        raise GraphRejected(path, "must be a finite number (not NaN or infinity)")
    if positive and amount <= 0:
        raise GraphRejected(path, f"must be greater than 0, not {amount:g}")
    if amount < 0:
        raise GraphRejected(path, f"must be at least 0, not {amount:g}")


# --- wiring ------------------------------------------------------------------------------------


def _check_ingress(ingress: str, names: Mapping[str, int]) -> None:
    if not ingress:
        raise GraphRejected("ingress", "required: the name of the deployment that takes requests")
    if ingress not in names:
        raise GraphRejected("ingress", f"unknown deployment {_quote(ingress)}")


def _check_edges(graph: serve_graph_pb2.ServeGraph, names: Mapping[str, int]) -> None:
    if len(graph.edges) > MAX_EDGES:
        raise GraphRejected("edges", f"{len(graph.edges)} edges; at most {MAX_EDGES} are allowed")
    arguments: set[tuple[str, str]] = set()
    for index, edge in enumerate(graph.edges):
        path = f"edges[{index}]"
        for end in ("caller", "callee"):
            name = getattr(edge, end)
            if not name:
                raise GraphRejected(f"{path}.{end}", "required: a deployment name")
            if name not in names:
                raise GraphRejected(f"{path}.{end}", f"unknown deployment {_quote(name)}")
        _check_argument(edge.argument, f"{path}.argument")
        if (edge.caller, edge.argument) in arguments:
            raise GraphRejected(
                f"{path}.argument",
                f"duplicate argument {_quote(edge.argument)} for caller {_quote(edge.caller)}",
            )
        arguments.add((edge.caller, edge.argument))
        caller_index = names[edge.caller]
        if edge.argument in graph.deployments[caller_index].init_kwargs.fields:
            raise GraphRejected(
                f"{path}.argument",
                f"{_quote(edge.argument)} is also a key of deployments[{caller_index}].init_kwargs",
            )


def _check_argument(argument: str, path: str) -> None:
    if not argument:
        raise GraphRejected(path, "required: the keyword argument that receives the handle")
    if len(argument) > MAX_NAME_LENGTH:
        raise GraphRejected(path, f"longer than {MAX_NAME_LENGTH} characters")
    if _ARGUMENT.fullmatch(argument) is None or keyword.iskeyword(argument):
        raise GraphRejected(path, f"{_quote(argument)} is not a Python identifier")


def _check_acyclic(edges: Iterable[serve_graph_pb2.Edge]) -> None:
    callees: dict[str, set[str]] = {}
    for edge in edges:
        callees.setdefault(edge.caller, set()).add(edge.callee)
    try:
        # Sorted so the cycle named is the same for the same document.
        sorter = TopologicalSorter({caller: sorted(callees[caller]) for caller in sorted(callees)})
        sorter.prepare()
    except CycleError as error:
        # graphlib lists each node before the one that depends on it (callee before caller);
        # reversed, the cycle reads in the direction of the calls.
        cycle = " → ".join(_quote(name) for name in reversed(error.args[1]))
        raise GraphRejected("edges", f"cycle {cycle}") from None


def _check_reachable(graph: serve_graph_pb2.ServeGraph, names: Mapping[str, int]) -> None:
    reached = set(_reachable(graph.ingress, graph.edges))
    for name, index in names.items():
        if name not in reached:
            raise GraphRejected(
                f"deployments[{index}].name",
                f"{_quote(name)} is not reachable from the ingress {_quote(graph.ingress)} "
                "through edges; Serve would not deploy it (remove it or add an edge)",
            )


def _reachable(ingress: str, edges: Iterable[serve_graph_pb2.Edge]) -> Iterator[str]:
    callees: dict[str, list[str]] = {}
    for edge in edges:
        callees.setdefault(edge.caller, []).append(edge.callee)
    seen = {ingress}
    pending = [ingress]
    while pending:
        name = pending.pop()
        yield name
        for callee in callees.get(name, ()):
            if callee not in seen:
                seen.add(callee)
                pending.append(callee)


# --- runtime_env -------------------------------------------------------------------------------


def _check_runtime_env(runtime_env: serve_graph_pb2.RuntimeEnv) -> None:
    if len(runtime_env.pip) > MAX_PIP_PACKAGES:
        raise GraphRejected("runtime_env.pip", f"more than {MAX_PIP_PACKAGES} entries")
    for index, requirement in enumerate(runtime_env.pip):
        # One line of a requirements file each: a newline would smuggle in more lines.
        if not requirement.strip() or len(requirement) > MAX_PIP_ENTRY_LENGTH:
            raise GraphRejected(
                f"runtime_env.pip[{index}]", f"must be 1 to {MAX_PIP_ENTRY_LENGTH} characters"
            )
        if not requirement.isprintable():
            raise GraphRejected(f"runtime_env.pip[{index}]", "may not contain control characters")
    _check_env_vars(runtime_env.env_vars)
    if runtime_env.working_dir:
        _check_working_dir(runtime_env.working_dir)


def _check_env_vars(env_vars: Mapping[str, str]) -> None:
    if len(env_vars) > MAX_ENV_VARS:
        raise GraphRejected("runtime_env.env_vars", f"more than {MAX_ENV_VARS} variables")
    for name, value in sorted(env_vars.items()):
        path = f"runtime_env.env_vars{_key(name)}"
        if len(name) > MAX_NAME_LENGTH * 2 or _ENV_NAME.fullmatch(name) is None:
            raise GraphRejected(path, "not an environment variable name")
        if name == "PYTHONPATH":
            raise GraphRejected(
                path,
                "may not be set: it would hide the operator's graph builder module, which the "
                "Ray containers find on PYTHONPATH",
            )
        if len(value) > MAX_ENV_VALUE_LENGTH:
            raise GraphRejected(path, f"longer than {MAX_ENV_VALUE_LENGTH} characters")


def _check_working_dir(uri: str) -> None:
    path = "runtime_env.working_dir"
    if len(uri) > MAX_URI_LENGTH:
        raise GraphRejected(path, f"longer than {MAX_URI_LENGTH} characters")
    try:
        parts = urlsplit(uri)
    except ValueError:
        raise GraphRejected(path, "not a URI") from None
    if parts.scheme.lower() not in _WORKING_DIR_SCHEMES or not parts.netloc:
        raise GraphRejected(
            path,
            "must be a remote URI every Ray node can download "
            f"({', '.join(sorted(_WORKING_DIR_SCHEMES))}://…), not a local path",
        )
    if parts.username is not None or parts.password is not None:
        # The URI is stored in the RayService in clear text: credentials do not belong in it.
        raise GraphRejected(path, "may not carry credentials (user:password@)")


# --- message helpers ---------------------------------------------------------------------------


def _quote(text: str) -> str:
    """A short, escaped excerpt of a user string, safe to put in a condition message."""
    clipped = text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."
    return json.dumps(clipped, ensure_ascii=True).replace("\x7f", "\\u007f")


def _key(key: str) -> str:
    """A map key as a path element: `.name` for identifiers, `["…"]` otherwise."""
    if _ENV_NAME.fullmatch(key) and len(key) <= _EXCERPT:
        return f".{key}"
    return f"[{_quote(key)}]"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
