"""Kubernetes types for our schemas, from the OpenAPI v3 documents of the pinned kube-apiserver.

This module owns the saved documents under `kubernetes/` (fetched once from a real API server by
`python -m ray_operator.apigen --fetch-openapi KUBECONFIG`) and their translation into named JSON
Schema definitions that a CustomResourceDefinition may contain: references become
`#/$defs/<ShortName>`, the special scalar types (Quantity, IntOrString, Time) get the forms that
structural schemas require, and keys a CRD refuses (`x-kubernetes-patch-*`, unions, ...) go.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Schema = dict[str, Any]

DOCUMENTS_DIR = Path(__file__).parent / "kubernetes"

# The group-version documents we take types from: the core group, plus networking for the
# NetworkPolicy rules and IngressTLS that RayCluster embeds. Each document also carries the
# apimachinery types (ObjectMeta, Condition, Quantity, ...) that its types refer to.
DOCUMENTS = {
    "api__v1_openapi.json": "/openapi/v3/api/v1",
    "apis__networking.k8s.io__v1_openapi.json": "/openapi/v3/apis/networking.k8s.io/v1",
}

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
MICRO_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
CONDITION = "io.k8s.apimachinery.pkg.apis.meta.v1.Condition"

# The grammar of a resource.Quantity, the same pattern controller-gen puts on Quantity fields, so
# that a malformed "2Gb" is refused when the object is written rather than when a Pod is built.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# Validation that Go markers on metav1.Condition add (and KubeRay's CRDs therefore carry) but
# the OpenAPI document does not.
CONDITION_RULES: dict[str, Schema] = {
    "type": {
        "maxLength": 316,
        "pattern": (
            r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        ),
    },
    "status": {"enum": ["True", "False", "Unknown"]},
    "observedGeneration": {"minimum": 0},
    "reason": {
        "maxLength": 1024,
        "minLength": 1,
        "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
    },
    "message": {"maxLength": 32768},
}

# ObjectMeta inside a template is not a real object's metadata: the API server keeps only these
# fields of it (as controller-gen's generateEmbeddedObjectMeta does for KubeRay).
EMBEDDED_METADATA_FIELDS = ("annotations", "finalizers", "labels", "name", "namespace")

# Schema keys a structural CRD schema accepts; everything else in the OpenAPI document is dropped.
ALLOWED_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "properties",
        "additionalProperties",
        "items",
        "required",
        "default",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "nullable",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-validations",
    }
)

REF_PREFIX = "#/components/schemas/"
DEF_PREFIX = "#/$defs/"


class KubernetesTypes:
    """The Kubernetes types of the saved OpenAPI documents, addressed by their short names."""

    def __init__(self, documents_dir: Path = DOCUMENTS_DIR) -> None:
        self._schemas: dict[str, Schema] = {}
        for filename in sorted(DOCUMENTS):
            document = json.loads((documents_dir / filename).read_text())
            self._schemas.update(document["components"]["schemas"])
        self._full_names: dict[str, list[str]] = {}
        for full_name in self._schemas:
            self._full_names.setdefault(short_name(full_name), []).append(full_name)

    def __contains__(self, name: str) -> bool:
        return name in self._full_names

    def full_name(self, name: str) -> str:
        """The fully qualified name of a short type name; ambiguous names are an error."""
        candidates = self._full_names[name]
        if len(candidates) != 1:
            raise ValueError(f"Kubernetes type name {name!r} is ambiguous: {candidates}")
        return candidates[0]

    def definition(self, name: str) -> Schema:
        """The CRD-ready schema of the type `name`, with references to other types by short name."""
        full_name = self.full_name(name)
        if full_name == QUANTITY:
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": QUANTITY_PATTERN,
                "x-kubernetes-int-or-string": True,
            }
        if full_name == INT_OR_STRING:
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            }
        if full_name in (TIME, MICRO_TIME):
            return {"type": "string", "format": "date-time"}
        schema: Schema = _normalize(self._schemas[full_name], self)
        if full_name == CONDITION:
            for field, rules in CONDITION_RULES.items():
                schema["properties"][field].update(rules)
        return schema

    def embedded_metadata(self) -> Schema:
        """ObjectMeta as kept inside a template: names, labels, annotations, finalizers."""
        meta = self.definition("ObjectMeta")
        properties = {
            field: {
                key: value
                for key, value in meta["properties"][field].items()
                if not key.startswith("x-kubernetes-")
            }
            for field in EMBEDDED_METADATA_FIELDS
        }
        return {
            "type": "object",
            "description": meta.get("description", ""),
            "properties": properties,
        }


def short_name(full_name: str) -> str:
    """`io.k8s.api.core.v1.PodTemplateSpec` -> `PodTemplateSpec`."""
    return full_name.rsplit(".", 1)[-1]


def _normalize(node: Any, types: KubernetesTypes) -> Any:
    if isinstance(node, list):
        return [_normalize(item, types) for item in node]
    if not isinstance(node, dict):
        return node
    # The documents wrap every reference as allOf: [$ref] to hang a description and a default
    # beside it; a CRD schema has no allOf of references, so unwrap it.
    if "allOf" in node and len(node["allOf"]) == 1:
        merged = {key: value for key, value in node.items() if key != "allOf"}
        merged.update(node["allOf"][0])
        node = merged
    if "$ref" in node:
        target = short_name(node["$ref"].removeprefix(REF_PREFIX))
        types.full_name(target)  # fails loudly on a name we could not tell apart
        result: Schema = {"$ref": DEF_PREFIX + target}
        if "description" in node:
            result["description"] = node["description"]
        return result
    result = {}
    for key, value in node.items():
        if key not in ALLOWED_KEYS:
            continue
        if key == "default" and isinstance(value, (dict, list)):
            # `default: {}` marks non-pointer structs in Go, not a value the server should fill
            # in; controller-gen leaves it out, and so do we, or every Pod would grow empty objects.
            continue
        if key == "properties":
            required = set(node.get("required", ()))
            result[key] = {
                name: _normalize(_without_zero_default(child) if name in required else child, types)
                for name, child in value.items()
            }
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            result[key] = _normalize(_without_zero_default(value), types)
        else:
            result[key] = value
    if "properties" in result or "additionalProperties" in result:
        result.setdefault("type", "object")
    return result


def _without_zero_default(node: Schema) -> Schema:
    """Drop the Go zero value that openapi-gen writes as the default of non-pointer fields.

    On a required field (or a list item, or a map value) such a default would let the server fill
    in a value the user must give, e.g. a port number of 0; controller-gen writes none, and our
    CRDs should refuse what KubeRay's refuse.
    """
    if node.get("default") in ("", 0, False) and not isinstance(node.get("default"), dict):
        return {key: value for key, value in node.items() if key != "default"}
    return node


def fetch_documents(kubeconfig: Path, documents_dir: Path = DOCUMENTS_DIR) -> Iterator[Path]:
    """Download the OpenAPI documents from the API server in `kubeconfig` into `documents_dir`."""
    documents_dir.mkdir(parents=True, exist_ok=True)
    version = documents_dir / "version.json"
    # Which server the documents came from, for whoever bumps the pinned Kubernetes version.
    version.write_text(json.dumps(_get(kubeconfig, "/version"), indent=1, sort_keys=True) + "\n")
    yield version
    for filename, path in sorted(DOCUMENTS.items()):
        document = _get(kubeconfig, path)
        # Only the type definitions are of use here; the API paths would triple the file.
        kept = {key: document[key] for key in ("openapi", "info", "components")}
        target = documents_dir / filename
        # Re-serialised with sorted keys so that a refresh shows up as a readable diff.
        target.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
        yield target


def _get(kubeconfig: Path, path: str) -> Any:
    raw = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", path],
        check=True,
        capture_output=True,
    ).stdout
    return json.loads(raw)
