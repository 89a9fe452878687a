"""A RayService asking for `NewClusterWithIncrementalUpgrade` where the Gateway API CRDs are not
installed (the session plane never has them): a Warning Event says what is missing, the reconcile
does not fail (no retry storm), and the RayService still gets its cluster."""

from __future__ import annotations

import pytest
from ray_operator.app import Operator

from tests.controllers.conftest import Harness, reconcile_errors
from tests.controllers.ray_fixtures import (
    StartOperator,
    auth_secret,
    head_only_cluster_spec,
    ray_head,
    start_operator,
)

__all__ = ["auth_secret", "ray_head", "start_operator"]  # fixtures, used by name


@pytest.fixture
async def operator_with_gate(start_operator: StartOperator, namespace: str) -> Operator:
    """The operator with its default gates (RayServiceIncrementalUpgrade on); the dashboards of
    this namespace's clusters mapped to a closed loopback port (no Ray is needed here)."""
    return await start_operator(dashboards={f"{namespace}/*": "http://127.0.0.1:9"})


async def test_missing_gateway_api_crds_are_reported_without_failing_the_reconcile(
    harness: Harness, operator_with_gate: Operator
) -> None:
    cluster = head_only_cluster_spec(serve=True)
    cluster["enableInTreeAutoscaling"] = True
    await harness.apply(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": {"name": "fruit"},
            "spec": {
                "serveConfigV2": "applications: []\n",
                "upgradeStrategy": {
                    "type": "NewClusterWithIncrementalUpgrade",
                    "clusterUpgradeOptions": {
                        "gatewayClassName": "istio",
                        "stepSizePercent": 10,
                        "intervalSeconds": 30,
                    },
                },
                "rayClusterConfig": cluster,
            },
        }
    )

    async def warned() -> str | None:
        events = await harness.get_json("events")
        return next(
            (
                e["message"]
                for e in events["items"]
                if e["reason"] == "FailedToCreateGateway" and e["type"] == "Warning"
            ),
            None,
        )

    message = await harness.eventually(warned, what="the missing Gateway API told")
    assert message == (
        "the Gateway API is not installed (no gateway.networking.k8s.io/v1 Gateway resource): "
        "NewClusterWithIncrementalUpgrade needs its CRDs and a Gateway controller"
    )

    async def has_cluster() -> bool:
        listed = await harness.get_json("rayclusters")
        return bool(listed["items"])

    await harness.eventually(has_cluster, what="the RayService's cluster")
    # No failed reconcile but the routine race of a status write on a stale cache.
    assert set(reconcile_errors(operator_with_gate, "RayService")) <= {"Conflict"}
