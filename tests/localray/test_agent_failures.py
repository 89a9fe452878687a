"""The local Ray agent never takes the operator down: a process that cannot be started is told
once (an Event, a WARNING line), tried again on every pass, and leaves no files behind. A Ray
process that ends is started again as a kubelet restarts a container: after a growing backoff,
unless the Pod's restartPolicy says Never."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from ray_operator.localray.agent import LocalRayRegistry
from ray_operator.runtime.store import Store
from ray_operator.spec.kinds import RAY_CLUSTER

from tests.builders.clusters import raycluster
from tests.localray.agents import (
    RecordedEvents,
    agent_without_ray,
    running_head_pod,
    sync_until,
)


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


def _operators_head_pod(*, restart_policy: str) -> tuple[Store, LocalRayRegistry, dict[str, Any]]:
    """A cluster in the cache and its head Pod, which the operator created."""
    cluster = raycluster()
    store = Store()
    store.upsert(RAY_CLUSTER, cluster)
    registry = LocalRayRegistry()
    pod = running_head_pod(cluster)
    pod["spec"]["restartPolicy"] = restart_policy
    registry.created.record("Pod", pod)
    return store, registry, pod


def _ray_that_exits(directory: Path) -> Path:
    """A `ray` whose `ray start` ends with exit code 1 at once, as a worker's does when its
    raylet does not register with the GCS within Ray's 30 s (a loaded machine)."""
    ray = directory / "ray-that-exits"
    ray.write_text("#!/bin/sh\nexit 1\n")
    ray.chmod(0o755)
    return ray


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
async def test_a_ray_node_that_ends_starts_again_after_a_backoff_as_a_kubelet_restarts_it(
    tmp_path: Path, policy: str
) -> None:
    store, registry, pod = _operators_head_pod(restart_policy=policy)
    events = RecordedEvents()
    ray = _ray_that_exits(tmp_path)
    async with agent_without_ray(
        tmp_path, store=store, registry=registry, events=events, ray=ray, restart_backoff=0.2
    ) as agent:
        await sync_until(agent, pod, lambda: events.reasons().count("LocalRayRestarting") >= 2)

    reasons = events.reasons()
    assert reasons[:4] == [
        "LocalRayStarted",
        "LocalRayRestarting",
        "LocalRayStarted",
        "LocalRayRestarting",
    ]
    restarts = [message for reason, message in events.recorded if reason == "LocalRayRestarting"]
    assert "exit code 1" in restarts[0]
    assert "again in 0.2s (restart 1)" in restarts[0]
    assert "again in 0.4s (restart 2)" in restarts[1]  # the backoff doubles
    assert f"restartPolicy {policy}" in restarts[0]


async def test_a_ray_node_of_a_pod_that_never_restarts_stays_ended(tmp_path: Path) -> None:
    store, registry, pod = _operators_head_pod(restart_policy="Never")
    events = RecordedEvents()
    ray = _ray_that_exits(tmp_path)
    async with agent_without_ray(
        tmp_path, store=store, registry=registry, events=events, ray=ray, restart_backoff=0.01
    ) as agent:
        await sync_until(agent, pod, lambda: "LocalRayProcessEnded" in events.reasons())
        for _ in range(10):
            await agent.sync([pod])
            await asyncio.sleep(0.05)

    assert events.reasons() == ["LocalRayStarted", "LocalRayProcessEnded"]


async def test_a_local_ray_node_ignores_the_machines_ray_token_as_a_container_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Since Ray 2.5x a local `ray.init()` writes ~/.ray/auth_token, and any later `ray start`
    without RAY_AUTH_MODE turns token auth on: the operator, holding no token for the cluster,
    then got 401 from every local dashboard. A container never sees the host's home."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("a-token-of-the-machine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    store, registry, pod = _operators_head_pod(restart_policy="Always")
    events = RecordedEvents()
    # In the checkout, telling on its output (the Pod's log): a local Pod's /tmp is its own.
    ray = Path(__file__).parent / "programs" / "ray-that-tells-its-env"
    async with agent_without_ray(
        tmp_path, store=store, registry=registry, events=events, ray=ray
    ) as agent:

        def told() -> bool:
            found = agent.container(pod["metadata"]["namespace"], pod["metadata"]["name"], None)
            return found is not None and "END-OF-ENV" in _read(found.log_path)

        await sync_until(agent, pod, told)
        container = agent.container(pod["metadata"]["namespace"], pod["metadata"]["name"], None)
        assert container is not None
        seen = _read(container.log_path)

    assert "RAY_AUTH_MODE=disabled" in seen.splitlines()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
