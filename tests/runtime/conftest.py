"""Fixtures for the runtime's tests: no task may outlive its test, and a few helpers.

Tests here run against the real control plane (`control_plane` from tests/conftest.py) or, for
pure logic (queue, store), on a virtual clock (looptime). Fakes — the trivial controllers — live
in `tests/runtime/controllers.py`, never in the package.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client


@pytest.fixture(autouse=True)
async def no_pending_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it (and cancel them)."""
    before = asyncio.all_tasks()
    yield
    # Give tasks cancelled at the very end of the test a chance to finish.
    for _ in range(3):
        await asyncio.sleep(0)
    leftover = {
        task
        for task in asyncio.all_tasks() - before
        if task is not asyncio.current_task() and not task.done()
    }
    for task in leftover:
        task.cancel()
    if leftover:
        await asyncio.wait(leftover, timeout=5)
        names = ", ".join(sorted(task.get_name() for task in leftover))
        pytest.fail(f"the test left asyncio tasks pending: {names}")


@pytest.fixture
def metrics() -> Metrics:
    """A fresh metrics registry for one test."""
    return Metrics()


@pytest.fixture
async def api(control_plane: LocalControlPlane) -> AsyncIterator[ApiClient]:
    """kubernetes-asyncio's ApiClient for the session control plane (admin credentials)."""
    api_client = await load_api_client(control_plane.kubeconfig)
    try:
        yield api_client
    finally:
        await api_client.close()


@pytest.fixture
def client(api: ApiClient, metrics: Metrics) -> KubeClient:
    """Our API client wrapper on that connection."""
    return KubeClient(api, metrics=metrics)
