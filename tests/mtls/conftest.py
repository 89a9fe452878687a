"""The mTLS tests' plane: the one without a garbage collector (cleanup must be explicit), with
cert-manager's CRDs installed (see cert-manager/README.md) and no cert-manager controller: the
tests play its part. `start_operator(gates=...)` runs our operator in-process on it."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml
from ray_operator.app import Operator
from ray_operator.features import FeatureGates
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client

from tests.controllers.conftest import Harness, cluster_operators

CERT_MANAGER_DIR = Path(__file__).parent / "cert-manager"
CERT_MANAGER_CRDS = ("issuers.cert-manager.io", "certificates.cert-manager.io")
MTLS_ON = FeatureGates({"RayClusterMTLS": True})


def install_cert_manager_crds(kubeconfig: Path) -> None:
    """Apply the published CRDs, without the Helm-templated labels, and wait until served."""
    documents = []
    for name in ("crd-issuers.yaml", "crd-certificates.yaml"):
        crd = yaml.safe_load((CERT_MANAGER_DIR / name).read_text())
        crd["metadata"].pop("labels", None)
        documents.append(crd)
    kubectl = [shutil.which("kubectl") or "kubectl", "--kubeconfig", str(kubeconfig)]
    text = yaml.safe_dump_all(documents)
    subprocess.run([*kubectl, "apply", "--server-side", "-f", "-"], input=text.encode(), check=True)
    wait = [*kubectl, "wait", "--for=condition=Established", "--timeout=60s"]
    wait += [f"crd/{crd}" for crd in CERT_MANAGER_CRDS]
    # A CRD applied a moment ago may have no conditions yet, which `kubectl wait` takes for an
    # error rather than for "not yet" (as install_crds knows): ask again a few times.
    for attempt in range(10):
        waited = subprocess.run(wait, check=False, capture_output=True, text=True)
        if waited.returncode == 0:
            return
        time.sleep(0.5 * (attempt + 1))
    raise AssertionError(f"cert-manager's CRDs did not become established: {waited.stderr}")


@pytest.fixture(scope="session")
def control_plane(control_plane_without_gc: LocalControlPlane) -> LocalControlPlane:
    install_cert_manager_crds(control_plane_without_gc.kubeconfig)
    return control_plane_without_gc


@pytest.fixture
async def harness(control_plane: LocalControlPlane, namespace: str) -> AsyncIterator[Harness]:
    client = KubeClient(await load_api_client(control_plane.kubeconfig), metrics=Metrics())
    test_harness = Harness(control_plane.kubeconfig, namespace, client)
    try:
        yield test_harness
    finally:
        await client.close()


StartOperator = Callable[..., Awaitable[Operator]]


@pytest.fixture
async def start_operator(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> AsyncIterator[StartOperator]:
    """`await start_operator(gates=MTLS_ON)`: the RayCluster controller with those gates."""
    async with cluster_operators(control_plane.kubeconfig, namespace) as start_cluster_operator:

        async def start(*, gates: FeatureGates = MTLS_ON) -> Operator:
            return await start_cluster_operator(feature_gates=gates)

        yield start
