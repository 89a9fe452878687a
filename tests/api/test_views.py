"""Specification: `ray_io.v1_views` types the very dicts the operator handles.

The views are TypedDicts generated from the same definitions as the CRDs: every object level of
a view has exactly the CRD's fields, with the CRD's required fields required (those the API
server defaults aside, as in the pydantic models). The cache's Pod projection only declares fields
the Pod view has, so a misspelt projection path cannot hide. And mypy, reading a cached cluster or
Pod through the store, rejects a misspelt field: that is what the views are for.
"""

from __future__ import annotations

import json
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NotRequired

import pytest
from mypy import api as mypy_api
from ray_io import v1_views
from ray_operator.runtime.projection import POD_FIELDS, Each, Fields

from tests.api.manifests import REPO_ROOT

CRDS = REPO_ROOT / "generated" / "ray_io" / "crds"
KINDS = {
    "rayclusters": v1_views.RayCluster,
    "rayjobs": v1_views.RayJob,
    "rayservices": v1_views.RayService,
    "raycronjobs": v1_views.RayCronJob,
}


def _fields(view: type) -> dict[str, tuple[Any, bool]]:
    """Field → (type, required) of a TypedDict view. Python 3.11 cannot tell NotRequired from
    postponed annotations (`__required_keys__` lists every key), so read the annotations."""
    hints = typing.get_type_hints(view, include_extras=True)
    fields = {}
    for name, hint in hints.items():
        optional = typing.get_origin(hint) is NotRequired
        fields[name] = (typing.get_args(hint)[0] if optional else hint, not optional)
    return fields


def _mismatches(schema: dict[str, Any], hint: Any, path: str) -> Iterator[str]:
    """Where the view `hint` and the CRD `schema` disagree, below `path`."""
    if typing.is_typeddict(hint):
        properties = schema.get("properties", {})
        fields = _fields(hint)
        if set(fields) != set(properties):
            yield f"{path}: view {sorted(fields)} != CRD {sorted(properties)}"
            return
        defaulted = {name for name, child in properties.items() if "default" in child}
        required = set(schema.get("required", ())) - defaulted
        view_required = {name for name, (_, is_required) in fields.items() if is_required}
        if view_required != required:
            yield f"{path}: view requires {sorted(view_required)}, CRD {sorted(required)}"
        for name, (child_hint, _) in fields.items():
            # A template's metadata is a trimmed ObjectMeta in the CRD, the whole one in the view.
            if name != "metadata":
                yield from _mismatches(properties[name], child_hint, f"{path}.{name}")
    elif typing.get_origin(hint) is list:
        yield from _mismatches(schema.get("items", {}), typing.get_args(hint)[0], f"{path}[]")
    elif typing.get_origin(hint) is dict:
        value_schema = schema.get("additionalProperties", {})
        yield from _mismatches(value_schema, typing.get_args(hint)[1], f"{path}{{}}")
    elif isinstance(hint, types.UnionType) and "x-kubernetes-int-or-string" not in schema:
        yield f"{path}: a union {hint} where the CRD has {schema.get('type')}"


@pytest.mark.parametrize("plural", sorted(KINDS))
def test_each_view_has_the_fields_of_its_crd_at_every_level(plural: str) -> None:
    crd = json.loads((CRDS / f"{plural}.json").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert list(_mismatches(schema, KINDS[plural], plural)) == []


def test_a_view_that_lost_a_field_is_told_apart_from_its_crd() -> None:
    crd = json.loads((CRDS / "rayclusters.json").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del schema["properties"]["spec"]["properties"]["headGroupSpec"]["properties"]["serviceType"]
    found = list(_mismatches(schema, v1_views.RayCluster, "rayclusters"))
    assert len(found) == 1
    assert found[0].startswith("rayclusters.spec.headGroupSpec: view [")


def _projection_paths_missing(shape: Fields, view: type, path: str) -> Iterator[str]:
    fields = _fields(view)
    for name, child in shape.keys.items():
        if name not in fields:
            yield f"{path}.{name}"
            continue
        hint = fields[name][0]
        if isinstance(child, Each):
            hint, child = typing.get_args(hint)[0], child.element
        if isinstance(child, Fields):
            yield from _projection_paths_missing(child, hint, f"{path}.{name}")


def test_the_pod_projection_declares_only_fields_the_pod_view_has() -> None:
    assert list(_projection_paths_missing(POD_FIELDS, v1_views.Pod, "pod")) == []


def test_a_misspelt_projection_field_is_found() -> None:
    misspelt = Fields({"status": Fields({"podIp": Fields({})})})
    assert list(_projection_paths_missing(misspelt, v1_views.Pod, "pod")) == ["pod.status.podIp"]


CACHE_READER = """
    from ray_operator.spec.kinds import POD, RAY_CLUSTER
    from ray_operator.runtime.store import StoreView


    def well_spelt(store: StoreView) -> object:
        cluster = store.get(RAY_CLUSTER, "default", "c")
        assert cluster is not None
        pods = store.list_for_cluster(POD, "default", "c")
        return cluster["spec"]["workerGroupSpecs"], pods[0]["status"]["podIP"]


    def misspelt(store: StoreView) -> object:
        cluster = store.get(RAY_CLUSTER, "default", "c")
        assert cluster is not None
        pods = store.list_for_cluster(POD, "default", "c")
        return cluster["spec"]["workerGroupSpec"], pods[0]["status"]["podIp"]
"""


def test_mypy_rejects_a_misspelt_field_of_what_the_cache_hands_out(tmp_path: Path) -> None:
    reader = tmp_path / "reader.py"
    reader.write_text(textwrap.dedent(CACHE_READER))
    recursion_limit = sys.getrecursionlimit()
    try:
        report, _, _ = mypy_api.run(
            [
                "--config-file",
                str(REPO_ROOT / "pyproject.toml"),
                "--cache-dir",
                str(tmp_path / "mypy-cache"),
                "--no-error-summary",
                "--hide-error-context",
                str(reader),
            ]
        )
    finally:
        # mypy raises the interpreter's limit for good (to 2**14); every later test would run
        # with a deeper Python than the operator's.
        sys.setrecursionlimit(recursion_limit)
    errors = [line.split(": error: ")[1] for line in report.splitlines() if ": error: " in line]
    assert errors == [
        'TypedDict "RayClusterSpec" has no key "workerGroupSpec"  [typeddict-item]',
        'TypedDict "PodStatus" has no key "podIp"  [typeddict-item]',
    ]
