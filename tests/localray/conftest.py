"""Fixtures for the local Ray agent tests: `observed_client`, a client of the session's real API
server (the agent reads a RayJob's submitter Job there)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client


@pytest.fixture
async def observed_client(control_plane: LocalControlPlane) -> AsyncIterator[KubeClient]:
    api = await load_api_client(control_plane.kubeconfig)
    try:
        yield KubeClient(api, metrics=Metrics())
    finally:
        await api.close()
