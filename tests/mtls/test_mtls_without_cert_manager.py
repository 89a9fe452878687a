"""Specification: with the RayClusterMTLS gate on but cert-manager's CRDs absent, an mTLS cluster
is reported — a Warning Event and the status condition say cert-manager is missing and what to do
— with no Pod created, no crash and no retry loop; a cluster without tlsOptions runs as usual."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.conftest import running_control_plane
from tests.controllers.conftest import Harness, reconcile_errors
from tests.mtls.conftest import StartOperator
from tests.mtls.samples import SAMPLE_PATH


@pytest.fixture(scope="module")
def control_plane() -> Iterator[LocalControlPlane]:
    """A plane of this module's own: the others have cert-manager's CRDs."""
    with running_control_plane(controller_manager=False) as plane:
        yield plane


async def test_an_mtls_cluster_without_cert_manager_is_reported_and_gets_no_pods(
    harness: Harness, start_operator: StartOperator, caplog: pytest.LogCaptureFixture
) -> None:
    replica = await start_operator()
    assert "certificates.cert-manager.io is not installed" in caplog.text
    cluster: dict[str, Any] = yaml.safe_load(SAMPLE_PATH.read_text())
    await harness.apply(cluster)

    async def reported() -> dict[str, Any] | None:
        status = (await harness.cluster("ray-mtls")).get("status") or {}
        for condition in status.get("conditions") or []:
            if "cert-manager" in condition.get("message", ""):
                return dict(condition)
        return None

    condition = await harness.eventually(reported, what="the cert-manager condition")
    assert "install cert-manager" in condition["message"]
    events = await harness.get_json("events", "--field-selector", "type=Warning")
    assert any("cert-manager" in e["message"] for e in events["items"])
    assert await harness.pods("ray-mtls") == []
    assert reconcile_errors(replica, "RayCluster") == {}

    plain = yaml.safe_load(SAMPLE_PATH.read_text())
    plain["metadata"]["name"] = "ray-plain"
    del plain["spec"]["tlsOptions"]
    await harness.apply(plain)

    async def plain_pods() -> bool:
        return len(await harness.pods("ray-plain")) == 2

    await harness.eventually(plain_pods, what="the Pods of the cluster without tlsOptions")
