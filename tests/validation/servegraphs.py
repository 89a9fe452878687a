"""A valid RayServeGraph manifest for the validation tests, whose top-level spec fields a test
replaces."""

from __future__ import annotations

from typing import Any

from tests.builders.clusters import raycluster


def graph(**spec: Any) -> dict[str, Any]:
    """A valid RayServeGraph; keyword arguments replace top-level spec fields."""
    manifest: dict[str, Any] = {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": "pipeline", "namespace": "ns1"},
        "spec": {
            "source": {
                "url": "https://registry.example.com/graphs/pipeline.pb",
                "tokenSecretRef": {"name": "registry-token", "key": "token"},
                "pollInterval": "5m",
                "timeoutSeconds": 30,
                "maxBytes": 4 * 1024 * 1024,
            },
            "rayClusterSpec": raycluster()["spec"],
            "refresh": {"secretRef": {"name": "graph-hook", "key": "secret"}},
        },
    }
    manifest["spec"].update(spec)
    return manifest
