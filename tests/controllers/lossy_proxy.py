"""A reverse proxy in front of the real API server that can lose answers (a test helper).

The operator under test talks plain HTTP to this proxy on 127.0.0.1; the proxy forwards every
request to the real kube-apiserver with the admin client certificate. On request it

- forwards a Pod create and then drops the connection instead of answering: the Pod exists,
  the operator saw a reset connection (what an API-server crash after the write looks like);
- holds back the watch events of a resource (`pods`, `rayclusters`) until released, at once or
  right after the event that mentions a given name: a cache that lags (a watch that has not
  reconnected yet);
- holds Event writes (creates and patches of core/v1 Events) unanswered until released: an API
  server slow to take Events.

Nothing is faked: every object is written by the real API server.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web
from ray_operator.app import Operator
from ray_operator.controllers.raycluster import RayClusterController
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.client import load_api_client

from tests.controllers.conftest import Harness, operator_settings
from tests.operator_runs import operator_running

FORWARDED_HEADERS = ("accept", "content-type")


class LossyProxy:
    """A plain-HTTP reverse proxy to the API server at `upstream` (admin credentials in `pki`)."""

    def __init__(self, upstream: str, pki: Path) -> None:
        self._upstream = upstream
        self._ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self._ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.answers_to_lose = 0
        """How many of the next successful Pod creates lose their answer."""
        self.lost: list[str] = []
        """Names of the Pods whose create answer was lost."""
        self._gates: dict[str, asyncio.Event] = {}
        self._streams: set[asyncio.Task[object]] = set()  # watch handlers, ended on close
        self._hold_after: dict[str, bytes] = {}
        self._event_writes = asyncio.Event()
        self._event_writes.set()
        self.held_event_writes = 0
        """Event writes waiting for `release_event_writes` right now."""

    def hold_watch_events(self, resource: str) -> None:
        """Deliver no more watch events of `resource` (e.g. `pods`) until released."""
        self._gate(resource).clear()

    def hold_watch_events_after(self, resource: str, marker: str) -> None:
        """Deliver the next watch data of `resource` that contains `marker`, then hold."""
        self._hold_after[resource] = marker.encode()

    def release_watch_events(self, resource: str) -> None:
        self._hold_after.pop(resource, None)
        self._gate(resource).set()

    def hold_event_writes(self) -> None:
        """Forward no Event create or patch (and answer none) until released."""
        self._event_writes.clear()

    def release_event_writes(self) -> None:
        self._event_writes.set()

    def _gate(self, resource: str) -> asyncio.Event:
        if resource not in self._gates:
            self._gates[resource] = asyncio.Event()
            self._gates[resource].set()
        return self._gates[resource]

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        self._event_writes.set()
        for gate in self._gates.values():
            gate.set()
        # A watch handler only notices its client left when the upstream watch ends: end it.
        for stream in list(self._streams):
            stream.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that reaches the API server through this proxy (no credentials needed)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "anyone", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "anyone"}}],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        if request.method in ("POST", "PATCH") and "/events" in request.path:
            self.held_event_writes += 1
            try:
                await self._event_writes.wait()
            finally:
                self.held_event_writes -= 1
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        watching = request.query.get("watch") in ("1", "true")
        async with self._session.request(
            request.method,
            self._upstream + request.path_qs,
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None),
        ) as upstream:
            if watching:
                return await self._stream(request, upstream)
            data = await upstream.read()
            if self._loses(request, upstream.status):
                self.answers_to_lose -= 1
                self.lost.append(json.loads(data)["metadata"]["name"])
                assert request.transport is not None
                request.transport.close()  # the Pod exists; its creator hears a reset
            content_type = upstream.headers.get("Content-Type", "application/json")
            return web.Response(
                status=upstream.status, body=data, headers={"Content-Type": content_type}
            )

    def _loses(self, request: web.Request, status: int) -> bool:
        return (
            self.answers_to_lose > 0
            and request.method == "POST"
            and request.path.endswith("/pods")
            and status == 201
        )

    async def _stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status)
        response.content_type = upstream.content_type
        await response.prepare(request)
        resource = request.path.rsplit("/", 1)[-1]
        gate = self._gate(resource)
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            async for chunk in upstream.content.iter_any():
                await gate.wait()
                await response.write(chunk)
                marker = self._hold_after.get(resource)
                if marker is not None and marker in chunk:
                    del self._hold_after[resource]
                    gate.clear()
        finally:
            self._streams.discard(task)
        return response


@pytest.fixture
async def proxy(control_plane: LocalControlPlane) -> AsyncIterator[LossyProxy]:
    lossy = LossyProxy(control_plane.server, control_plane.directory / "pki")
    await lossy.start()
    try:
        yield lossy
    finally:
        await lossy.close()


@pytest.fixture
async def operator_behind_proxy(
    proxy: LossyProxy, namespace: str, harness: Harness, tmp_path: Path
) -> AsyncIterator[Operator]:
    kubeconfig = proxy.write_kubeconfig(tmp_path / "kubeconfig")
    replica = Operator(
        operator_settings(kubeconfig, namespace),
        api=await load_api_client(kubeconfig),
        controllers=[RayClusterController],
    )
    async with operator_running(replica, name="operator-behind-proxy"):
        yield replica


async def caches_synced(harness: Harness, operator: Operator) -> None:
    """Wait until the operator behind the proxy has listed every kind it watches."""

    async def synced() -> bool:
        return not operator.not_synced()

    await harness.eventually(synced, what="operator caches synced")
