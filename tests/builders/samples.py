"""KubeRay's published RayCluster manifests (../shared/fixtures/kuberay-samples) for tests."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

SAMPLES_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "kuberay-samples"


def raycluster_samples() -> dict[str, dict[str, Any]]:
    """File name → the RayCluster document in it, for every sample file that holds one."""
    return copy.deepcopy(_load())


@functools.cache
def _load() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(SAMPLES_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "RayCluster":
                found[path.name] = document
    return found


def load_sample(file_name: str) -> dict[str, Any]:
    return raycluster_samples()[file_name]
