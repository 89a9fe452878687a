"""Our mTLS sample (samples/mtls/ray-cluster.mtls.yaml) as a stored RayCluster, for the tests."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.conftest import REPO_ROOT

SAMPLE_PATH = REPO_ROOT / "samples" / "mtls" / "ray-cluster.mtls.yaml"
_SAMPLE: dict[str, Any] = yaml.safe_load(SAMPLE_PATH.read_text())
UID = "0123abcd-4567-89ef-0123-456789abcdef"


def mtls_cluster(*, uid: str = UID, namespace: str = "team-a") -> dict[str, Any]:
    """The sample as the API server would hand it over: with a namespace and a uid."""
    cluster = copy.deepcopy(_SAMPLE)
    cluster["metadata"].update(namespace=namespace, uid=uid)
    return cluster
