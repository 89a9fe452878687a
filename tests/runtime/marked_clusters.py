"""The RayCluster the process tests hand to `ray-operator run` (with the test-only
MarkingController), and the replica that marked it as reconciled."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import Kubectl
from tests.runtime.controllers import RECONCILED_BY_ANNOTATION


def ray_cluster(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name},
            "spec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]
                        }
                    },
                }
            },
        }
    )


def reconciled_by(kubectl: Kubectl, namespace: str, name: str) -> str | None:
    output = kubectl("get", "raycluster", name, "-n", namespace, "-o", "json")
    annotations: dict[str, Any] = json.loads(output)["metadata"].get("annotations") or {}
    return annotations.get(RECONCILED_BY_ANNOTATION)
