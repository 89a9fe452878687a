"""The refresh hook's pieces for the event tests: a RayServeGraph with `spec.refresh`, and the
Secret holding the hook's value and naming the graphs that opted in."""

from __future__ import annotations

import base64
from typing import Any

from ray_operator.spec.serve_graph_names import SECRET_GRAPHS_ANNOTATION

from tests.builders.clusters import raycluster

SECRET_VALUE = b"0123456789abcdef-hook-secret"
GRAPH = "pipeline"


def graph_manifest(name: str, *, refresh: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"url": "https://registry.example.com/graphs/pipeline.pb"},
        "rayClusterSpec": raycluster()["spec"],
    }
    if refresh:
        spec["refresh"] = {"secretRef": {"name": "graph-hook", "key": "secret"}}
    return {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": name},
        "spec": spec,
    }


def hook_secret(*, opted_in: tuple[str, ...] = (GRAPH,)) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "graph-hook",
            "annotations": {SECRET_GRAPHS_ANNOTATION: ",".join(opted_in)},
        },
        "data": {"secret": base64.b64encode(SECRET_VALUE).decode()},
    }
