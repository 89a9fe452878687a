"""Specification: every sample and every KubeRay manifest is valid ray.io/v1, for the real API
server (strict field validation, so an unknown or misspelt field fails) and for our models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.manifests import (
    KUBERAY_SAMPLES,
    SAMPLES,
    manifest_files,
    ray_documents,
    round_trip,
)
from tests.conftest import Kubectl


def test_both_manifest_folders_are_present() -> None:
    assert len(list(SAMPLES.glob("*.yaml"))) >= 5
    assert len(list(KUBERAY_SAMPLES.glob("*.yaml"))) >= 30


@pytest.mark.parametrize("path", manifest_files())
def test_manifest_is_accepted_by_the_api_server_with_strict_validation(
    path: Path, kubectl: Kubectl, namespace: str
) -> None:
    kubectl(
        "apply",
        "--server-side",
        "--validate=strict",
        "--field-manager=api-test",
        "--namespace",
        namespace,
        "--filename",
        str(path),
    )
    for document in ray_documents(path):
        kind, name = document["kind"], document["metadata"]["name"]
        stored = json.loads(kubectl("get", kind, name, "--namespace", namespace, "--output=json"))
        # What the server stores (defaults, managedFields, timestamps) round-trips as well.
        assert round_trip(stored) == stored


@pytest.mark.parametrize("path", manifest_files())
def test_manifest_round_trips_through_the_models(path: Path) -> None:
    ray_objects = ray_documents(path)
    assert ray_objects, f"{path.name} holds no Ray object"
    for document in ray_objects:
        assert round_trip(document) == document


def test_status_written_through_the_status_subresource_round_trips(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "--server-side", "-n", namespace, "-f", str(SAMPLES / "ray-cluster.mini.yaml"))
    status = {
        "state": "ready",
        "desiredCPU": "2",
        "desiredMemory": "3Gi",
        "desiredGPU": "0",
        "desiredTPU": "0",
        "desiredWorkerReplicas": 1,
        "availableWorkerReplicas": 1,
        "lastUpdateTime": "2026-01-01T00:00:00Z",
        "head": {"podIP": "10.244.0.5", "serviceName": "ray-mini-head-svc"},
        "endpoints": {"dashboard": "8265", "gcs-server": "6379"},
        "conditions": [
            {
                "type": "HeadPodReady",
                "status": "True",
                "reason": "HeadPodRunningAndReady",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "observedGeneration": 1,
    }
    kubectl(
        "patch", "raycluster", "ray-mini", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip

    stored = json.loads(kubectl("get", "raycluster", "ray-mini", "-n", namespace, "-o", "json"))

    assert stored["status"] == status
    assert round_trip(stored) == stored
