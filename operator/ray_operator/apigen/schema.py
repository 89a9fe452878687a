"""The schema of each API as named definitions, and its two renderings: inlined CRD schemas and
the JSON Schema that the model generator reads.

Our Ray types come from `ray_types.yaml` (ray.io/v1), `serve_graph_types.yaml`
(ray-operator.io/v1alpha1, which also uses ray.io types such as RayClusterSpec) and
`legacy_types.yaml` (the legacy operator's cluster.ray.io/v1); every name they
refer to that is not one of them is a Kubernetes type from `kubernetes.KubernetesTypes`. Both
renderings start from the same closure of definitions, so the CRDs and the models cannot drift
apart, and a type two APIs share is defined once.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ray_operator.apigen.kubernetes import DEF_PREFIX, KubernetesTypes

Schema = dict[str, Any]

RAY_TYPES_FILE = Path(__file__).parent / "ray_types.yaml"

SERVE_GRAPH_TYPES_FILE = Path(__file__).parent / "serve_graph_types.yaml"

LEGACY_TYPES_FILE = Path(__file__).parent / "legacy_types.yaml"

KINDS = ("RayCluster", "RayJob", "RayService", "RayCronJob")


@dataclass(frozen=True)
class Api:
    """One API group and version: its kinds, the file of its types, and files it borrows from."""

    group: str
    version: str
    kinds: tuple[str, ...]
    types_file: Path
    borrowed_types_files: tuple[Path, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


RAY_IO = Api("ray.io", "v1", KINDS, RAY_TYPES_FILE)
RAY_OPERATOR_IO = Api(
    "ray-operator.io",
    "v1alpha1",
    ("RayServeGraph",),
    SERVE_GRAPH_TYPES_FILE,
    borrowed_types_files=(RAY_TYPES_FILE,),
)
APIS = (RAY_IO, RAY_OPERATOR_IO)
"""The APIs of crd/'s kustomization, which config/default installs."""
CLUSTER_RAY_IO = Api("cluster.ray.io", "v1", ("RayCluster",), LEGACY_TYPES_FILE)
"""The legacy Python operator's RayCluster, served only on request (`--legacy-clusters`): its
CRD sits apart, in crd/legacy/, installed by the config/legacy component."""

# `$field: Type.field` in a types file: the schema of that field of another type, as it is.
FIELD_REFERENCE = "$field"

# The definition name of ObjectMeta as a template embeds it (see `_embed_metadata`).
EMBEDDED_METADATA = "EmbeddedObjectMeta"


@dataclass(frozen=True)
class Definitions:
    """Every type reachable from an API's kinds, by name, with `$ref`s between them."""

    schemas: dict[str, Schema]
    ray_names: frozenset[str]
    api: Api = RAY_IO
    own_names: frozenset[str] = frozenset()
    """The types of the API's own types file (the others are borrowed or Kubernetes types)."""

    def is_ray(self, name: str) -> bool:
        """Whether `name` is one of our types (as opposed to a Kubernetes one)."""
        return name in self.ray_names


def load_definitions(kubernetes: KubernetesTypes, api: Api = RAY_IO) -> Definitions:
    """Collect the types of `api` and the borrowed and Kubernetes types they use, transitively."""
    own_types: dict[str, Schema] = yaml.safe_load(api.types_file.read_text())
    borrowed: dict[str, Schema] = {}
    for path in api.borrowed_types_files:
        borrowed.update(yaml.safe_load(path.read_text()))
    ray_types = {
        **borrowed,
        **{name: _resolve_fields(schema, borrowed) for name, schema in own_types.items()},
    }
    schemas: dict[str, Schema] = {}
    pending = list(api.kinds)
    while pending:
        name = pending.pop()
        if name in schemas:
            continue
        if name in ray_types:
            schema = _ray_definition(name, ray_types[name], api)
        elif name in kubernetes:
            schema = kubernetes.definition(name)
        else:
            raise KeyError(
                f"{name!r} is neither a Ray type in {api.types_file.name} nor a Kubernetes type"
            )
        schemas[name] = schema
        pending.extend(sorted(_references(schema)))
    schemas[EMBEDDED_METADATA] = kubernetes.embedded_metadata()
    unused = set(own_types) - set(schemas)
    if unused:
        raise ValueError(f"Ray types defined but never used: {sorted(unused)}")
    return Definitions(
        schemas=dict(sorted(schemas.items())),
        ray_names=frozenset(ray_types),
        api=api,
        own_names=frozenset(own_types),
    )


def _resolve_fields(node: Any, types: dict[str, Schema]) -> Any:
    """Replace each `$field: Type.field` by a copy of that field's schema in `types`."""
    if isinstance(node, list):
        return [_resolve_fields(item, types) for item in node]
    if not isinstance(node, dict):
        return node
    if FIELD_REFERENCE in node:
        type_name, field = node[FIELD_REFERENCE].split(".", 1)
        return copy.deepcopy(types[type_name]["properties"][field])
    return {key: _resolve_fields(value, types) for key, value in node.items()}


def _ray_definition(name: str, source: Schema, api: Api) -> Schema:
    schema: Schema = _qualify_references(copy.deepcopy(source))
    if name in api.kinds:
        schema["properties"] = {
            "apiVersion": {
                "type": "string",
                "description": f"The API version of this object, {api.api_version}.",
            },
            "kind": {"type": "string", "description": f"The kind of this object, {name}."},
            "metadata": {"$ref": DEF_PREFIX + "ObjectMeta"},
            **schema["properties"],
        }
    return schema


def _qualify_references(node: Any) -> Any:
    """Turn the `$ref: Name` shorthand of ray_types.yaml into `#/$defs/Name`, and mark objects."""
    if isinstance(node, list):
        return [_qualify_references(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: _qualify_references(value) for key, value in node.items()}
    if "$ref" in result and not result["$ref"].startswith("#"):
        result["$ref"] = DEF_PREFIX + result["$ref"]
    if "properties" in result or "additionalProperties" in result:
        result.setdefault("type", "object")
    return result


def _references(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if "$ref" in node:
            found.add(node["$ref"].removeprefix(DEF_PREFIX))
        for value in node.values():
            found |= _references(value)
    elif isinstance(node, list):
        for item in node:
            found |= _references(item)
    return found


def _embed_metadata(definitions: Definitions) -> dict[str, Schema]:
    """Point the `metadata` of every Kubernetes type at the embedded form of ObjectMeta.

    Only the three kinds keep a real ObjectMeta; a Pod template's or a Service's metadata is part
    of our object, and the API server stores no more of it than a template needs.
    """
    schemas = copy.deepcopy(definitions.schemas)
    for name, schema in schemas.items():
        if definitions.is_ray(name):
            continue
        metadata = schema.get("properties", {}).get("metadata")
        if metadata is not None and metadata.get("$ref") == DEF_PREFIX + "ObjectMeta":
            metadata["$ref"] = DEF_PREFIX + EMBEDDED_METADATA
    return schemas


def crd_schema(definitions: Definitions, kind: str, *, kubernetes_descriptions: bool) -> Schema:
    """The openAPIV3Schema of `kind`'s CRD: every reference inlined (CRDs allow no `$ref`)."""
    schemas = _embed_metadata(definitions)
    root = copy.deepcopy(schemas[kind])
    # The API server validates a custom object's own metadata itself; the CRD must only say object.
    root["properties"]["metadata"] = {"type": "object"}

    def inline(node: Any, *, in_ray_type: bool) -> Any:
        if isinstance(node, list):
            return [inline(item, in_ray_type=in_ray_type) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = node["$ref"].removeprefix(DEF_PREFIX)
            result = inline(schemas[target], in_ray_type=definitions.is_ray(target))
            # A description beside a reference describes the field, not its type: it wins.
            description = node.get("description")
            if description is not None and in_ray_type:
                result["description"] = description
            elif description is not None and kubernetes_descriptions:
                result["description"] = summary(description)
            for key, value in node.items():
                if key not in ("$ref", "description"):
                    result[key] = value
            return result
        result = {}
        for key, value in node.items():
            if key == "description" and not in_ray_type:
                if kubernetes_descriptions:
                    result[key] = summary(value)
                continue
            if key == "properties":
                result[key] = {
                    field: inline(child, in_ray_type=in_ray_type) for field, child in value.items()
                }
            elif key in ("items", "additionalProperties", "anyOf"):
                result[key] = inline(value, in_ray_type=in_ray_type)
            else:
                result[key] = value
        return result

    schema: Schema = inline(root, in_ray_type=True)
    return schema


_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!etc)\.(\s|$)")


def summary(description: str) -> str:
    """The first sentence of a Kubernetes description: enough for `kubectl explain`, and a
    fraction of the size (a RayJob embeds three Pod templates, and etcd caps an object at 1.5 MiB).
    """
    match = _SENTENCE_END.search(description)
    return description[: match.start() + 1] if match else description.strip()


def with_kubernetes_types(
    definitions: Definitions, kubernetes: KubernetesTypes, names: tuple[str, ...]
) -> Definitions:
    """`definitions` plus the Kubernetes types `names` and every type they refer to."""
    schemas = dict(definitions.schemas)
    pending = list(names)
    while pending:
        name = pending.pop()
        if name not in schemas:
            schemas[name] = kubernetes.definition(name)
            pending.extend(sorted(_references(schemas[name])))
    return replace(definitions, schemas=dict(sorted(schemas.items())))


def model_schema(
    definitions: Definitions,
    imported: frozenset[str] = frozenset(),
    *,
    roots: tuple[str, ...] = (),
) -> Schema:
    """A JSON Schema with one named definition per type, for datamodel-code-generator.

    It differs from the CRD schemas only where Python wants it to: timestamps stay strings (so a
    model dumps exactly what it read), quantities are `int | str` without the pattern (pydantic
    cannot apply a string pattern to an int), and Kubernetes types keep no descriptions.

    Types named in `imported` are classes of another models module: each is left as an empty
    placeholder class of its name (which `models.render_models` swaps for an import), and the
    types only they use are left out. `roots` are types wanted beside the API's kinds (and the
    types they use), e.g. a Kubernetes Pod.
    """
    defs: dict[str, Schema] = {}
    for name in _model_closure(definitions, imported, roots):
        if name in imported:
            defs[name] = {"type": "object", "title": name}
            continue
        schema = definitions.schemas[name]
        defs[name] = _for_models(schema, keep_descriptions=definitions.is_ray(name))
        if defs[name].get("type") == "object":
            # The class name: the generator otherwise derives names from field names.
            defs[name]["title"] = name
    api = definitions.api
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": model_root_title(api),
        "description": f"The {api.api_version} API.",
        "type": "object",
        "properties": {name: {"$ref": DEF_PREFIX + name} for name in (*api.kinds, *roots)},
        "$defs": defs,
    }


def _model_closure(
    definitions: Definitions, imported: frozenset[str], roots: tuple[str, ...]
) -> list[str]:
    """The types reachable from the kinds and `roots` without looking inside an imported type,
    sorted."""
    found: set[str] = set()
    pending = [*definitions.api.kinds, *roots]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        if name not in imported:
            pending.extend(_references(definitions.schemas[name]))
    found.discard(EMBEDDED_METADATA)
    return sorted(found)


def model_root_title(api: Api) -> str:
    """The holder class the model generator makes of the schema's root (ray.io/v1 -> RayIoV1)."""
    words = [*re.split(r"[^A-Za-z0-9]+", api.group), api.version]
    return "".join(word[:1].upper() + word[1:] for word in words)


def _for_models(node: Any, *, keep_descriptions: bool) -> Any:
    if isinstance(node, list):
        return [_for_models(item, keep_descriptions=keep_descriptions) for item in node]
    if not isinstance(node, dict):
        return node
    result = {}
    for key, value in node.items():
        if key == "description" and not keep_descriptions:
            continue
        if key == "x-kubernetes-validations":
            continue
        if key == "format" and value == "date-time":
            continue
        if key == "pattern" and node.get("x-kubernetes-int-or-string"):
            continue
        if key == "required":
            # The API server fills in a defaulted field before anyone reads the object, so for
            # the models it is optional: a manifest may leave out `minReplicas`.
            defaulted = {field for field, child in node["properties"].items() if "default" in child}
            value = [field for field in value if field not in defaulted]
            if not value:
                continue
        if key == "properties":
            result[key] = {
                field: _for_models(child, keep_descriptions=keep_descriptions)
                for field, child in value.items()
            }
        elif key in ("items", "additionalProperties", "anyOf"):
            result[key] = _for_models(value, keep_descriptions=keep_descriptions)
        else:
            result[key] = value
    return result
