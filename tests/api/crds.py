"""Our CRD files as the tests read them (one by kind, every sub-schema of a schema), and a row of
kubectl's table output."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.api.manifests import REPO_ROOT

COLUMN_GAP = re.compile(r"\s{2,}")
CRD_FILES = {
    "RayCluster": REPO_ROOT / "crd" / "ray.io_rayclusters.yaml",
    "RayJob": REPO_ROOT / "crd" / "ray.io_rayjobs.yaml",
    "RayService": REPO_ROOT / "crd" / "ray.io_rayservices.yaml",
    "RayCronJob": REPO_ROOT / "crd" / "ray.io_raycronjobs.yaml",
}


def load_crd(kind: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.load(CRD_FILES[kind].read_text(), Loader=yaml.CSafeLoader)
    return crd


def walk(schema: dict[str, Any], path: str = "") -> Any:
    """Every (path, sub-schema) of a schema, depth first."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def table(output: str, name: str) -> tuple[list[str], list[str]]:
    """The header and the row of `name` in kubectl's table output (columns split on 2+ spaces)."""
    blocks = [block.splitlines() for block in output.strip().split("\n\n")]
    for header, *rows in blocks:
        for row in rows:
            if row.startswith(name + " "):
                return COLUMN_GAP.split(header.strip()), COLUMN_GAP.split(row.strip())
    raise AssertionError(f"{name} not in:\n{output}")
