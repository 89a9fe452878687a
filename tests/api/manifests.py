"""The manifests the API must accept: our samples and the KubeRay samples users already have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_io import v1
from ray_operator_io.v1alpha1 import models as v1alpha1

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES = REPO_ROOT / "samples"
KUBERAY_SAMPLES = REPO_ROOT.parent / "shared" / "fixtures" / "kuberay-samples"

MODELS: dict[
    str,
    type[v1.RayCluster | v1.RayJob | v1.RayService | v1.RayCronJob | v1alpha1.RayServeGraph],
] = {
    "RayCluster": v1.RayCluster,
    "RayJob": v1.RayJob,
    "RayService": v1.RayService,
    "RayCronJob": v1.RayCronJob,
    "RayServeGraph": v1alpha1.RayServeGraph,
}


def manifest_files() -> list[Any]:
    """Every YAML file of samples/ and of the KubeRay fixtures, as pytest parameters."""
    files = sorted(SAMPLES.glob("*.yaml")) + sorted(KUBERAY_SAMPLES.glob("*.yaml"))
    return [pytest.param(path, id=f"{path.parent.name}/{path.name}") for path in files]


def documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a file."""
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def ray_documents(path: Path) -> list[dict[str, Any]]:
    """The ray.io and ray-operator.io documents of a file."""
    return [document for document in documents(path) if document.get("kind") in MODELS]


def round_trip(document: dict[str, Any]) -> dict[str, Any]:
    """Parse `document` with its model and dump it back the way the API spells it."""
    model = MODELS[document["kind"]].model_validate(document)
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_unset=True)
    return dumped
