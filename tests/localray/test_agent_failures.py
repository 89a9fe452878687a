"""The local Ray agent never takes the operator down: a process that cannot be started is told
once (an Event, a WARNING line), tried again on every pass, and leaves no files behind."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from ray_operator.builders.pods import build_head_pod
from ray_operator.localray.agent import LocalRayAgent, LocalRayOptions, LocalRayRegistry
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.kinds import RAY_CLUSTER
from ray_operator.runtime.store import Store

from tests.builders.clusters import raycluster


def running_head_pod(cluster: dict[str, Any]) -> dict[str, Any]:
    pod = build_head_pod(cluster, suffix="abcde")
    pod["metadata"]["uid"] = "head-uid"
    pod["spec"]["nodeName"] = "kwok-node-0"
    pod["status"] = {"phase": "Running", "podIP": "10.244.0.9"}
    return pod


class RecordedEvents:
    """Events the agent records, kept in a list (the API server is not what this test is about)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str]] = []

    async def record(self, obj: Any, *, reason: str, message: str, type: str = "Normal") -> None:
        self.recorded.append((reason, message))


async def test_a_ray_that_cannot_start_is_told_once_and_retried_without_leftovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = raycluster()
    store = Store()
    store.upsert(RAY_CLUSTER, cluster)
    api = ApiClient()  # never called: nothing reaches the API server on this path
    client = KubeClient(api, metrics=Metrics())
    registry = LocalRayRegistry()
    events = RecordedEvents()
    agent = LocalRayAgent(
        client=client,
        store=store,
        events=events,  # type: ignore[arg-type]
        registry=registry,
        options=LocalRayOptions(
            directory=tmp_path / "state",
            node_name="kwok-node-0",
            ray_executable=str(tmp_path / "no-such-ray"),
        ),
    )
    try:
        with caplog.at_level(logging.DEBUG, logger="ray_operator.localray.agent"):
            for _ in range(3):
                await agent.sync([running_head_pod(cluster)])
    finally:
        await agent.stop_all()
        await api.close()

    failures = [r for r in caplog.records if "no-such-ray" in r.getMessage()]
    assert [r.levelname for r in failures] == ["WARNING", "DEBUG", "DEBUG"]
    assert "ns1/demo-head-abcde" in failures[0].getMessage()
    assert [reason for reason, _ in events.recorded] == ["LocalRayStartFailed"]
    assert "no-such-ray" in events.recorded[0][1]
    assert registry.get("ns1", "demo") is None
    assert not list((tmp_path / "state").glob("pods/*"))
