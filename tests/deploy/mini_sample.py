"""What a running operator must do for an install to count as working: reconcile
samples/ray-cluster.mini.yaml to `ready`, with its head and one worker."""

from __future__ import annotations

from tests.conftest import SAMPLES, Kubectl


def reconciles_mini_sample(kubectl: Kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", str(SAMPLES / "ray-cluster.mini.yaml"))
    kubectl(
        "wait", "-n", namespace, "--for=jsonpath={.status.state}=ready",
        "raycluster/ray-mini", "--timeout=120s",
    )  # fmt: skip
    pods = kubectl("get", "pods", "-n", namespace, "-l", "ray.io/cluster=ray-mini", "-o", "name")
    assert len(pods.split()) == 2
