"""Legacy RayClusters for the tests: the two published examples, and a small one to vary."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
LEGACY_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "legacy-ray-operator"
EXAMPLES = ("example_cluster.yaml", "example_cluster2.yaml")
KEEP_ALIVE = {
    "command": ["/bin/bash", "-c", "--"],
    "args": ["trap : TERM INT; sleep infinity & wait;"],
}
DELETE = object()


def load_example(file_name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((LEGACY_FIXTURES / file_name).read_text())
    return document


def legacy_pod(container_name: str) -> dict[str, Any]:
    """A pod type's podConfig as the legacy examples write it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"legacy-{container_name}-"},
        "spec": {
            "containers": [
                {
                    "name": container_name,
                    "image": "rayproject/ray:2.9.0",
                    **copy.deepcopy(KEEP_ALIVE),
                }
            ]
        },
    }


def small_legacy_cluster() -> dict[str, Any]:
    """A head type and one worker type, every count given."""
    return {
        "apiVersion": "cluster.ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "legacy"},
        "spec": {
            "maxWorkers": 10,
            "headPodType": "head",
            "podTypes": [
                {
                    "name": "head",
                    "minWorkers": 0,
                    "maxWorkers": 0,
                    "podConfig": legacy_pod("ray-head"),
                },
                {
                    "name": "cpu",
                    "minWorkers": 1,
                    "maxWorkers": 4,
                    "podConfig": legacy_pod("ray-worker"),
                },
            ],
        },
    }


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(path: str) -> list[str | int]:
    return [int(index) if index else key for key, index in _STEP.findall(path)]


def get_path(document: Any, path: str) -> Any:
    """The value at a path such as `spec.podTypes[1].minWorkers`; KeyError when absent."""
    for step in _steps(path):
        document = document[step]
    return document


def set_path(document: Any, path: str, value: Any) -> None:
    """Set (or, with DELETE, remove; one past a list's end: append) the value at `path`,
    creating objects on the way."""
    *parents, last = _steps(path)
    for step in parents:
        document = document.setdefault(step, {}) if isinstance(step, str) else document[step]
    if value is DELETE:
        del document[last]
    elif isinstance(last, int) and last == len(document):
        document.append(value)
    else:
        document[last] = value
