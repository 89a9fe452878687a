"""The CustomResourceDefinitions that `make run` and the tests install: ray.io/v1 (RayCluster,
RayJob, RayService, RayCronJob) and ray-operator.io/v1alpha1 (RayServeGraph); and on request
the legacy operator's cluster.ray.io/v1 RayCluster (served with `--legacy-clusters`).

The legacy CRD is never installed by default: with it, `kubectl get rayclusters` resolves to
cluster.ray.io (kubectl takes the first group in alphabetical order), not to ray.io.

They are read from the `ray_io.crds`, `ray_operator_io.crds` and `cluster_ray_io.crds` package
data (JSON copies of crd/ written by `make generate`), so an installed operator finds them without
the source tree.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

CRDS_PACKAGES = ("ray_io.crds", "ray_operator_io.crds")
LEGACY_CRDS_PACKAGE = "cluster_ray_io.crds"


def crd_files(*, legacy: bool = False) -> list[Path]:
    """The CRD files (JSON), for `kubectl apply -f`, in a fixed order; the legacy one too when
    `legacy`."""
    packages = (*CRDS_PACKAGES, LEGACY_CRDS_PACKAGE) if legacy else CRDS_PACKAGES
    # The packages are always installed as plain files (a wheel or an editable checkout).
    return [
        path
        for package in packages
        for path in sorted(Path(str(resources.files(package))).glob("*.json"))
    ]


def crd_manifests(*, legacy: bool = False) -> list[dict[str, Any]]:
    """Every CRD as a plain object, ready to apply."""
    return [json.loads(path.read_text()) for path in crd_files(legacy=legacy)]


def crd_names(*, legacy: bool = False) -> list[str]:
    """The CRDs' names (rayclusters.ray.io, ...), for `kubectl wait crd/<name>`."""
    return [str(manifest["metadata"]["name"]) for manifest in crd_manifests(legacy=legacy)]
