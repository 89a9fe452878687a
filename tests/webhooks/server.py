"""Running the real webhooks for tests: in a thread with its own event loop.

The tests drive kubectl synchronously; the API server then calls the webhook while the test's
thread waits. A webhook served on the test's own event loop would be blocked by that wait, so it
runs on a loop of its own, in a daemon thread, exactly as the operator runs it (`Webhooks.run`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.webhooks import WebhookOptions, Webhooks

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class WebhookThread:
    """`Webhooks(options).run()` on a private event loop; `start()` returns once it serves."""

    def __init__(
        self, kubeconfig: Path, options: WebhookOptions, *, limits: ClusterLimits = DEFAULT_LIMITS
    ) -> None:
        self.kubeconfig = kubeconfig
        self.options = options
        self.limits = limits  # with the operator's --feature-gates, as `webhook_component` does
        self.webhooks: Webhooks | None = None
        self.client: KubeClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="webhooks", daemon=True)

    def start(self, timeout: float = 60.0) -> WebhookThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the webhooks did not start serving")
        if self._error is not None:
            raise RuntimeError("the webhooks failed to start") from self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run a coroutine on the webhooks' loop (e.g. with their `client`) and wait for it."""
        assert self._loop is not None
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            coroutine, self._loop
        )
        return future.result(timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as error:  # reported by start()
            self._error = error
            self._ready.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        api = await load_api_client(self.kubeconfig)
        self.client = KubeClient(api, metrics=Metrics())
        self.webhooks = Webhooks(
            self.options,
            client=self.client,
            limits=self.limits,
            gates=self.limits.feature_gates,
        )
        task = asyncio.create_task(self.webhooks.run(), name="webhooks")
        started = asyncio.create_task(self.webhooks.serving_started.wait())
        try:
            await asyncio.wait([task, started], return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # raises what made it end
            self._ready.set()
            stopping = asyncio.create_task(self._stop.wait())
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
        finally:
            started.cancel()
            task.cancel()
            await asyncio.gather(task, started, return_exceptions=True)
            await api.close()
