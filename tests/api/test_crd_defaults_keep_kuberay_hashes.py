"""Specification: our CRDs store a KubeRay manifest exactly as KubeRay's CRDs do, as far as
KubeRay's hashes can see. Each sample of ../shared/fixtures/kuberay-samples is created through
OUR CRDs on the real API server (defaults applied by it, unknown fields pruned by it), read back,
and hashed: the values equal those KubeRay wrote when it ran the same sample
(../shared/fixtures/kuberay-created). A CRD default that differed from KubeRay's would change
them, and a takeover would recreate the cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from ray_operator.builders.rayservice import cluster_config_hash
from ray_operator.spec.hashing import pod_template_hash

from tests.builders.kuberay_created import (
    CLUSTER_HASH,
    CREATED_FILES,
    RECREATE_HASH,
    hash_expectations,
)
from tests.conftest import KUBERAY_FIXTURES, Kubectl


def _sample_documents(filename: str) -> dict[tuple[str, str], dict[str, Any]]:
    documents = yaml.safe_load_all((KUBERAY_FIXTURES / filename).read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in documents if d}


def _as_created_by_user(obj: dict[str, Any]) -> dict[str, Any]:
    """What a user would apply: the object without anything the server or an operator wrote."""
    metadata = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": metadata["name"], "labels": metadata.get("labels") or {}},
        "spec": obj["spec"],
    }


def _stored(kubectl: Kubectl, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    kubectl("create", "--namespace", namespace, "--filename", "-", input_text=json.dumps(obj))
    kind, name = obj["kind"], obj["metadata"]["name"]
    stored: dict[str, Any] = json.loads(
        kubectl("get", kind, name, "--namespace", namespace, "--output=json")
    )
    return stored


@pytest.mark.parametrize("filename", [f for f in CREATED_FILES if hash_expectations(f)])
def test_samples_stored_through_our_crds_hash_to_kuberays_values(
    filename: str, kubectl: Kubectl, namespace: str
) -> None:
    sample = _sample_documents(filename)
    for expectation in hash_expectations(filename):
        source = expectation.source
        kind, name = source["kind"], source["metadata"]["name"]
        # The user's own manifest when the sample has it (no defaults yet: our CRD applies
        # them); a RayCluster a RayJob or RayService made, as KubeRay created it.
        original = sample.get((kind, name)) or _as_created_by_user(source)
        stored = _stored(kubectl, namespace, _as_created_by_user(original))
        ours = (
            cluster_config_hash(stored)
            if expectation.annotation == CLUSTER_HASH
            else pod_template_hash(stored)
        )
        assert expectation.annotation in (CLUSTER_HASH, RECREATE_HASH)
        assert ours == expectation.expected, f"{expectation.annotated} from {kind}/{name}"


# KubeRay adds the submitter container to the head of a SidecarMode RayJob's cluster: that
# cluster's spec is not the RayJob's `rayClusterSpec`.
SIDECAR_MODE = "ray-job.sidecar-mode.yaml"


@pytest.mark.parametrize(
    "filename", [f for f in CREATED_FILES if f.startswith("ray-job.") and hash_expectations(f)]
)
def test_rayjob_cluster_specs_stored_through_our_crds_hash_to_kuberays_values(
    filename: str, kubectl: Kubectl, namespace: str
) -> None:
    sample = _sample_documents(filename)
    for expectation in hash_expectations(filename):
        labels = expectation.source["metadata"].get("labels") or {}
        job = sample[("RayJob", labels["ray.io/originated-from-cr-name"])]
        stored_job = _stored(kubectl, namespace, _as_created_by_user(job))
        cluster = {"spec": stored_job["spec"]["rayClusterSpec"]}
        matches = pod_template_hash(cluster) == expectation.expected
        assert matches == (filename != SIDECAR_MODE), expectation.annotated
