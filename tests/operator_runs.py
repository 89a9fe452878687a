"""An Operator run in the test's event loop as `ray-operator run` runs it, and stopped as SIGTERM
stops it: the run must then end with exit code 0 within 30 s (in-flight work finished, nothing
left hanging). Fixtures and tests build the Operator they need and run it here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kubernetes_asyncio.client import ApiClient
from ray_operator.app import Operator


@contextlib.asynccontextmanager
async def operator_running(
    replica: Operator, *, name: str, api: ApiClient | None = None
) -> AsyncIterator[Operator]:
    """`replica` running as the task `name` inside the block; stopped after it, then `api` (the
    client it was built with) closed if given."""
    stop = asyncio.Event()
    task = asyncio.create_task(replica.run(stop), name=name)
    try:
        yield replica
    finally:
        stop.set()
        assert await asyncio.wait_for(task, timeout=30) == 0
        if api is not None:
            await api.close()
