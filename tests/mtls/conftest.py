"""The mTLS tests' plane: the one without a garbage collector (cleanup must be explicit), with
cert-manager's CRDs installed (see cert-manager/README.md) and no cert-manager controller: the
tests play its part. `start_operator(gates=...)` runs our operator in-process on it."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_operator.app import Operator, served_kinds, watched_kinds
from ray_operator.controllers.raycluster import RayClusterController
from ray_operator.features import FeatureGates
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.validation.limits import ClusterLimits

from tests.controllers.conftest import Harness, operator_settings

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
    running: list[tuple[asyncio.Event, asyncio.Task[int], Any]] = []

    async def start(*, gates: FeatureGates = MTLS_ON) -> Operator:
        api = await load_api_client(control_plane.kubeconfig)
        settings = dataclasses.replace(
            operator_settings(control_plane.kubeconfig, namespace), feature_gates=gates
        )
        limits = ClusterLimits(feature_gates=gates)
        # As `ray-operator run` starts: the kinds the API server does not serve are left out.
        kinds = await served_kinds(
            KubeClient(api, metrics=Metrics()),
            watched_kinds(settings),
            namespaces=settings.namespaces,
        )
        replica = Operator(
            settings,
            api=api,
            controllers=[functools.partial(RayClusterController, limits=limits)],
            kinds=kinds,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(replica.run(stop), name="mtls-operator-under-test")
        running.append((stop, task, api))
        return replica

    try:
        yield start
    finally:
        for stop, _, _ in running:
            stop.set()
        for _, task, api in running:
            assert await asyncio.wait_for(task, timeout=30) == 0
            await api.close()
