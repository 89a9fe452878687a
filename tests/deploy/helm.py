"""The chart and the pinned helm (built if missing): `helm template` of the chart with `--set`
values, rendered once per run."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import yaml
from ray_operator.localcluster.binaries import ensure_helm

from tests.conftest import REPO_ROOT
from tests.deploy.manifests import DEFAULT_NAMESPACE, Manifest, _Loader

CHART = REPO_ROOT / "charts" / "ray-operator"


@functools.cache
def helm_binary() -> Path:
    """The pinned helm, built once per run if missing."""
    return ensure_helm()


def helm(*args: str) -> str:
    """The pinned helm (built if missing), raising with its stderr."""
    result = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def render(*sets: str, namespace: str = DEFAULT_NAMESPACE) -> list[Manifest]:
    """`helm template` of the chart with `--set` values `sets` (built once per run: read-only)."""
    return list(_render(sets, namespace))


@functools.cache
def _render(sets: tuple[str, ...], namespace: str) -> tuple[Manifest, ...]:
    args = ["template", "ray-operator", str(CHART), "--namespace", namespace]
    for value in sets:
        args += ["--set", value]
    return tuple(doc for doc in yaml.load_all(helm(*args), Loader=_Loader) if doc)
