"""Specification: `--batch-scheduler=volcano` on an API server without Volcano's PodGroup CRD
runs on: the start names the missing CRD, a RayCluster gets a Warning Event saying which CRD to
install (KubeRay's reconcile fails the same way, without the Event), nothing crashes.

On the shared plane with the garbage collector, which never gets the PodGroup CRDs (only the
controllers' plane does, in tests/controllers/test_batch_scheduling.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from ray_operator.app import Operator, served_kinds, watched_kinds
from ray_operator.cli import controllers_for
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.settings import Settings
from ray_operator.spec.kinds import VOLCANO_POD_GROUP, WATCHED_KINDS

from tests.conftest import Kubectl
from tests.controllers.conftest import eventually, operator_settings

CLUSTER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "lonely"},
    "spec": {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {
                "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}]}
            },
        }
    },
}


async def test_the_missing_podgroup_crd_is_named_at_start(
    control_plane: LocalControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    wanted = watched_kinds(Settings(batch_scheduler="volcano"))
    assert wanted == (*WATCHED_KINDS, VOLCANO_POD_GROUP)
    assert VOLCANO_POD_GROUP not in watched_kinds(Settings(batch_scheduler="yunikorn"))
    api = await load_api_client(control_plane.kubeconfig)
    try:
        assert await served_kinds(KubeClient(api, metrics=Metrics()), wanted) == list(WATCHED_KINDS)
    finally:
        await api.close()
    assert "podgroups.scheduling.volcano.sh is not installed" in caplog.text


async def test_a_raycluster_is_told_which_crd_is_missing_and_the_operator_keeps_running(
    control_plane: LocalControlPlane,
    kubectl: Kubectl,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = dataclasses.replace(
        operator_settings(control_plane.kubeconfig, namespace), batch_scheduler="volcano"
    )
    api = await load_api_client(control_plane.kubeconfig)
    kinds = await served_kinds(KubeClient(api, metrics=Metrics()), watched_kinds(settings))
    replica = Operator(settings, api=api, controllers=controllers_for(settings), kinds=kinds)
    stop = asyncio.Event()
    task = asyncio.create_task(replica.run(stop), name="operator-without-podgroup-crd")
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(CLUSTER))
        selector = "reason=PodGroupCRDMissing,involvedObject.name=lonely"

        async def told() -> list[Any] | None:
            listed = kubectl(
                "get", "events", "-n", namespace, "--field-selector", selector, "-o", "json"
            )
            return json.loads(listed)["items"] or None

        [event] = await eventually(told, what="the missing CRD told")
        assert event["type"] == "Warning"
        assert "podgroups.scheduling.volcano.sh is not installed" in event["message"]
        assert not task.done()
        # The Event says what to do; the retries' log lines need no traceback.
        retries = [r for r in caplog.records if "is not installed" in r.getMessage()]
        assert retries
        assert not any(r.exc_info for r in retries)
    finally:
        stop.set()
        assert await asyncio.wait_for(task, timeout=30) == 0
        await api.close()
