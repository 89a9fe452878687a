"""The ray.io/v1 CustomResourceDefinitions that the operator installs.

They are read from the `ray_io.crds` package data (JSON copies of crd/*.yaml written by
`make generate`), so an installed operator finds them without the source tree.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

CRDS_PACKAGE = "ray_io.crds"


def crd_directory() -> Path:
    """The directory of the CRD files (JSON), for `kubectl apply -f`."""
    # ray_io is always installed as plain files (a wheel or an editable checkout), never zipped.
    return Path(str(resources.files(CRDS_PACKAGE)))


def crd_manifests() -> list[dict[str, Any]]:
    """The RayCluster, RayJob and RayService CRDs as plain objects, ready to apply."""
    return [json.loads(path.read_text()) for path in sorted(crd_directory().glob("*.json"))]
