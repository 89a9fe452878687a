"""Running the real webhooks (and other aiohttp applications) for tests: in a thread with its own
event loop.

The tests drive kubectl synchronously; the API server then calls the webhook while the test's
thread waits. A webhook served on the test's own event loop would be blocked by that wait, so it
runs on a loop of its own, in a daemon thread, exactly as the operator runs it (`Webhooks.run`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.server import BoundedSite, ReadLimits, bounded_runner
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


class ApplicationThread:
    """An aiohttp Application (`make_application()`, built on its loop) served on 127.0.0.1 at a
    port the OS picks (`port`, once entered), over TLS with `ssl_context`; through the operator's
    `BoundedSite` and `bounded_runner` with `limits`, else aiohttp's own; on an event loop of its
    own in a daemon thread."""

    def __init__(
        self,
        make_application: Callable[[], web.Application],
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: ReadLimits | None = None,
    ) -> None:
        self.port = 0
        self._make_application = make_application
        self._ssl_context = ssl_context
        self._limits = limits
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    def __enter__(self) -> ApplicationThread:
        self._thread.start()
        assert self._started.wait(10), "the application did not start"
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        runner, site = self._runner_and_site(self._make_application())
        await runner.setup()
        await site(runner).start()
        self.port = int(runner.addresses[0][1])
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def _runner_and_site(
        self, application: web.Application
    ) -> tuple[web.AppRunner, Callable[[web.AppRunner], web.BaseSite]]:
        context, limits = self._ssl_context, self._limits
        if limits is None:
            runner = web.AppRunner(application, access_log=None)
            return runner, lambda ready: web.TCPSite(ready, "127.0.0.1", 0, ssl_context=context)
        runner = bounded_runner(application, limits)
        return runner, lambda ready: BoundedSite(
            ready, "127.0.0.1", 0, limits=limits, ssl_context=context
        )
