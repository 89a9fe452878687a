"""The CustomResourceDefinitions that the operator installs: ray.io/v1 (RayCluster, RayJob,
RayService) and ray-operator.io/v1alpha1 (RayServeGraph).

They are read from the `ray_io.crds` and `ray_operator_io.crds` package data (JSON copies of
crd/*.yaml written by `make generate`), so an installed operator finds them without the source
tree.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

CRDS_PACKAGES = ("ray_io.crds", "ray_operator_io.crds")


def crd_files() -> list[Path]:
    """The CRD files (JSON), for `kubectl apply -f`, in a fixed order."""
    # Both packages are always installed as plain files (a wheel or an editable checkout).
    return [
        path
        for package in CRDS_PACKAGES
        for path in sorted(Path(str(resources.files(package))).glob("*.json"))
    ]


def crd_manifests() -> list[dict[str, Any]]:
    """Every CRD as a plain object, ready to apply."""
    return [json.loads(path.read_text()) for path in crd_files()]


def crd_names() -> list[str]:
    """The CRDs' names (rayclusters.ray.io, ...), for `kubectl wait crd/<name>`."""
    return [str(manifest["metadata"]["name"]) for manifest in crd_manifests()]
