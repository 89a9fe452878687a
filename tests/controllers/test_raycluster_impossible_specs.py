"""A RayCluster that can never run, written without the webhook, is reported, not retried or hung on
(issue 12, findings 1 and 8): the controller re-validates with the webhook's rules, so the
cluster gets the InvalidSpec condition and one Warning event naming the field, no Pod is
created, and the event loop stays responsive (a `1e10000000` CPU limit used to take seconds of
quantity arithmetic per reconcile; a missing image, a traceback and an Event per retry).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from ray_operator.app import Operator
from ray_operator.cli import controllers_for
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.client import load_api_client

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness, operator_settings

Change = Callable[[dict[str, Any]], None]
INT32_MAX = 2**31 - 1


def impossible_cluster(change: Change) -> dict[str, Any]:
    cluster = scalable_cluster("impossible", replicas=1, max_replicas=5)
    change(cluster)
    return cluster


def _worker(cluster: dict[str, Any]) -> dict[str, Any]:
    group: dict[str, Any] = cluster["spec"]["workerGroupSpecs"][0]
    return group


def _huge_cpu(cluster: dict[str, Any]) -> None:
    _worker(cluster)["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = (
        "1e10000000"
    )


def _no_image(cluster: dict[str, Any]) -> None:
    del cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]


def _int32_replicas(cluster: dict[str, Any]) -> None:
    _worker(cluster).update(replicas=INT32_MAX, maxReplicas=INT32_MAX)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param(
            _huge_cpu,
            "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[cpu]",
            id="cpu-1e10000000",
        ),
        pytest.param(
            _no_image, "spec.headGroupSpec.template.spec.containers[0].image", id="missing-image"
        ),
        pytest.param(_int32_replicas, "spec.workerGroupSpecs[0].replicas", id="int32-replicas"),
    ],
)
async def test_an_impossible_cluster_gets_the_invalid_spec_condition_and_no_pod(
    harness: Harness, operator: Operator, change: Change, field: str
) -> None:
    await harness.apply(impossible_cluster(change))

    async def invalid_condition() -> dict[str, Any] | None:
        status = (await harness.cluster("impossible")).get("status", {})
        return next(
            (
                c
                for c in status.get("conditions", [])
                if c["type"] == "InvalidSpec" and c["status"] == "True"
            ),
            None,
        )

    condition = await harness.eventually(invalid_condition, what="InvalidSpec condition")
    assert condition["message"].startswith(f"{field}: ")
    assert operator.heartbeat.lag() < 1.0
    events = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=impossible,type=Warning"
    )
    reasons = [event["reason"] for event in events["items"]]
    assert reasons == ["InvalidRayClusterSpec"], reasons
    assert harness.created_pods == {}


async def test_the_controller_applies_the_configured_pods_per_cluster_bound(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> None:
    # `ray-operator run --max-pods-per-cluster 5`: the controllers `cli` wires get that bound.
    settings = dataclasses.replace(
        operator_settings(control_plane.kubeconfig, namespace), max_pods_per_cluster=5
    )
    api = await load_api_client(control_plane.kubeconfig)
    replica = Operator(settings, api=api, controllers=controllers_for(settings))
    stop = asyncio.Event()
    task = asyncio.create_task(replica.run(stop), name="operator-with-a-small-bound")
    try:
        await harness.apply(impossible_cluster(lambda c: _worker(c).update(replicas=5)))

        async def invalid_message() -> str | None:
            status = (await harness.cluster("impossible")).get("status", {})
            invalid = [c for c in status.get("conditions", []) if c["type"] == "InvalidSpec"]
            return invalid[0]["message"] if invalid else None

        message = await harness.eventually(invalid_message, what="InvalidSpec condition")
        assert message.startswith("spec.workerGroupSpecs: Invalid value: 6: ")
        assert "at most 5 Pods per cluster" in message
        assert harness.created_pods == {}
    finally:
        stop.set()
        assert await asyncio.wait_for(task, timeout=30) == 0
        await api.close()
