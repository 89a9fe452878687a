"""A local Ray agent for unit tests: a cache filled by hand, Events kept in a list, and a `ray`
that does not exist (so a Pod the agent decides to run shows as `LocalRayStartFailed`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient
from ray_operator.builders.pods import build_head_pod
from ray_operator.localray.agent import LocalRayAgent, LocalRayOptions, LocalRayRegistry
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.store import Store


def running_head_pod(cluster: dict[str, Any], *, uid: str = "head-uid") -> dict[str, Any]:
    """The head Pod the operator builds for `cluster`, bound to the fake node and Running."""
    pod = build_head_pod(cluster, suffix="abcde")
    pod["metadata"]["uid"] = uid
    pod["spec"]["nodeName"] = "kwok-node-0"
    pod["status"] = {"phase": "Running", "podIP": "10.244.0.9"}
    return pod


class RecordedEvents:
    """Events the agent records, kept in a list (the API server is not what this test is about)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str]] = []

    def record(self, obj: Any, *, reason: str, message: str, type: str = "Normal") -> None:
        self.recorded.append((reason, message))

    async def close(self, *, grace: float) -> None:
        """Nothing to write: every Event is in the list already."""

    def reasons(self) -> list[str]:
        return [reason for reason, _ in self.recorded]


async def sync_until(agent: LocalRayAgent, pod: dict[str, Any], done: Callable[[], bool]) -> None:
    """Let the agent see `pod` pass after pass until `done()` (15 s at most)."""
    for _ in range(300):
        await agent.sync([pod])
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the agent never got there")


@contextlib.asynccontextmanager
async def agent_without_ray(
    directory: Path,
    *,
    store: Store,
    registry: LocalRayRegistry,
    events: RecordedEvents,
    client: KubeClient | None = None,
    ray: Path | None = None,
    restart_backoff: float = 10.0,
) -> AsyncIterator[LocalRayAgent]:
    """An agent whose `ray` is missing (or `ray`), stopped afterwards; `client` defaults to one
    whose calls fail (the agent logs and goes on)."""
    unused = ApiClient()
    agent = LocalRayAgent(
        client=client or KubeClient(unused, metrics=Metrics()),
        store=store,
        events=events,  # type: ignore[arg-type]
        registry=registry,
        options=LocalRayOptions(
            directory=directory / "state",
            node_name="kwok-node-0",
            ray_executable=str(ray or directory / "no-such-ray"),
            restart_backoff=restart_backoff,
        ),
    )
    try:
        yield agent
    finally:
        await agent.stop_all()
        await unused.close()
