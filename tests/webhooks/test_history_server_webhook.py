"""Specification, at the real API server: with the RayClusterHistoryServer gate off (the default)
the webhook refuses `historyServerOptions`, in a RayCluster or a RayJob's cluster, naming the
flag that turns it on; with the gate on, the sample under samples/feature-gates is admitted
unchanged and a broken collector is refused with every problem and its field path."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ray_operator.features import parse_feature_gates
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.validation.limits import ClusterLimits

from tests.conftest import REPO_ROOT, Kubectl
from tests.webhooks.conftest import intercepted, load_sample, serving_webhooks

SAMPLE_FILE = REPO_ROOT / "samples" / "feature-gates" / "ray-cluster.history-server.yaml"
GATE_OFF_MESSAGE = (
    "spec.historyServerOptions: Forbidden: the RayClusterHistoryServer feature gate is off in "
    "this operator (--feature-gates=RayClusterHistoryServer=true turns it on)"
)


def sample() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SAMPLE_FILE.read_text())
    return loaded


@pytest.fixture(scope="module")
def gate_on_namespace(control_plane: LocalControlPlane) -> Iterator[str]:
    """A namespace intercepted by webhooks of an operator run with the gate on."""
    limits = ClusterLimits(feature_gates=parse_feature_gates("RayClusterHistoryServer=true"))
    with serving_webhooks(control_plane, limits=limits) as server:
        kubectl = Kubectl(control_plane.kubeconfig)
        name = f"history-gate-on-{uuid.uuid4().hex[:6]}"
        kubectl("create", "namespace", name)
        yield intercepted(kubectl, name, server)


def dry_run(
    kubectl: Kubectl, namespace: str, manifest: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return kubectl.run(
        "create",
        "--dry-run=server",
        "-n",
        namespace,
        "-o",
        "json",
        "-f",
        "-",
        input_text=yaml.safe_dump(manifest),
    )


def test_gate_off_the_cluster_is_refused_naming_the_flag(
    kubectl: Kubectl, shared_webhook_namespace: str
) -> None:
    result = dry_run(kubectl, shared_webhook_namespace, sample())
    assert result.returncode != 0
    assert GATE_OFF_MESSAGE in result.stderr


def test_gate_off_a_rayjobs_cluster_with_it_is_refused_too(
    kubectl: Kubectl, shared_webhook_namespace: str
) -> None:
    job = load_sample("ray-job.sample.yaml", "RayJob")
    job["spec"]["rayClusterSpec"]["historyServerOptions"] = sample()["spec"]["historyServerOptions"]
    result = dry_run(kubectl, shared_webhook_namespace, job)
    assert result.returncode != 0
    assert "spec.rayClusterSpec.historyServerOptions: Forbidden: the RayClusterHistoryServer" in (
        result.stderr
    )


def test_gate_on_the_sample_is_admitted_unchanged(kubectl: Kubectl, gate_on_namespace: str) -> None:
    result = dry_run(kubectl, gate_on_namespace, sample())
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)
    assert stored["spec"]["historyServerOptions"] == sample()["spec"]["historyServerOptions"]


def test_gate_on_a_broken_collector_is_refused_with_every_problem(
    kubectl: Kubectl, gate_on_namespace: str
) -> None:
    broken = sample()
    collector = broken["spec"]["historyServerOptions"]["collectorOptions"]
    del collector["image"]
    collector["env"] = [
        {"name": "POD_IP", "value": "10.0.0.1"},
        {"name": "STORAGE_BACKEND", "value": "S3"},
    ]
    result = dry_run(kubectl, gate_on_namespace, broken)
    assert result.returncode != 0
    for expected in (
        "spec.historyServerOptions.collectorOptions.image: Required value",
        "spec.historyServerOptions.collectorOptions.env[0].name: Forbidden: POD_IP is set by "
        "the operator",
        "spec.historyServerOptions.collectorOptions.env: Required value: S3_REGION must be set "
        "when STORAGE_BACKEND is S3",
    ):
        assert expected in result.stderr
