"""The local Ray agent never takes the operator down: a process that cannot be started is told
once (an Event, a WARNING line), tried again on every pass, and leaves no files behind."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from ray_operator.localray.agent import LocalRayRegistry
from ray_operator.runtime.kinds import RAY_CLUSTER
from ray_operator.runtime.store import Store

from tests.builders.clusters import raycluster
from tests.localray.agents import RecordedEvents, agent_without_ray, running_head_pod


async def test_a_ray_that_cannot_start_is_told_once_and_retried_without_leftovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = raycluster()
    store = Store()
    store.upsert(RAY_CLUSTER, cluster)
    registry = LocalRayRegistry()
    registry.created.record("Pod", running_head_pod(cluster))  # the operator's own Pod
    events = RecordedEvents()
    async with agent_without_ray(tmp_path, store=store, registry=registry, events=events) as agent:
        with caplog.at_level(logging.DEBUG, logger="ray_operator.localray.agent"):
            for _ in range(3):
                await agent.sync([running_head_pod(cluster)])

    failures = [r for r in caplog.records if "no-such-ray" in r.getMessage()]
    assert [r.levelname for r in failures] == ["WARNING", "DEBUG", "DEBUG"]
    assert "ns1/demo-head-abcde" in failures[0].getMessage()
    assert [reason for reason, _ in events.recorded] == ["LocalRayStartFailed"]
    assert "no-such-ray" in events.recorded[0][1]
    assert registry.get("ns1", "demo") is None
    assert not list((tmp_path / "state").glob("pods/*"))
