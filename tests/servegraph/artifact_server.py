"""A registry on loopback for the RayServeGraph tests: aiohttp, bearer auth, ETag, hostile modes.

Runs its own event loop in a background thread, so sync and async tests use it alike:

    with ArtifactServer.start(tls=True) as server:
        server.serve("/graph.pb", body, token="t")         # ETag "auto": derived from the body
        url = server.url("/graph.pb")                      # https://127.0.0.1:<port>/graph.pb
        ... fetch with server.ca_pem as the CA bundle ...
        assert server.request_count("/graph.pb") == 1
        assert server.requests("/graph.pb")[0].status == 200

Per path (checked in this order): `mode="echo-<status>"` answers <status> echoing the request's
Authorization header in its body, reason phrase and headers (a hostile server); with `token`, a
request without `Authorization: Bearer <token>` gets 401; a matching `If-None-Match` gets 304;
then the mode:

    ok                 200 with the body (Content-Length, ETag unless etag=None)
    401 403 404 500 503 ...   that status (any 3-digit number), a body that says so
    chunked            200 streamed in 1 KiB chunks without Content-Length
    endless            200 without Content-Length, 64 KiB chunks until the client hangs up
    drip               200 one byte every 0.5 s (Content-Length of the whole body)
    gzip               200 with the body gzip-compressed (Content-Encoding: gzip), unasked
    hang               never answers
    redirect           302 to `location` (absolute or relative)

`requests(path)` lists a `Record(status, if_none_match, authorization)` per request;
`bytes_sent(path)` counts the body bytes the streaming modes wrote.

The TLS certificate (from `ray_operator.pki`) is for 127.0.0.1, `localhost` and
`registry.test`, so a test can reach the same server under another origin name: `localhost`
through the system resolver, `registry.test` through `StaticResolver` (below), a table-driven
resolver that `fetch_artifact(..., resolver=...)` accepts — also the way to make a name resolve
to a link-local address without touching DNS.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gzip
import hashlib
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from ray_operator import pki

DRIP_INTERVAL_SECONDS = 0.5
ENDLESS_CHUNK = b"\0" * (64 * 1024)
CERTIFICATE_NAMES = ("localhost", "registry.test")


class Record(NamedTuple):
    """One request as the server answered it."""

    status: int
    if_none_match: str | None
    authorization: str | None = None
    """The Authorization header received (tests check where the token went)."""


@dataclass
class _Route:
    body: bytes
    etag: str | None
    content_type: str
    token: str | None
    mode: str
    location: str | None


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    routes: dict[str, _Route] = field(default_factory=dict)
    records: dict[str, list[Record]] = field(default_factory=dict)
    bytes_sent: dict[str, int] = field(default_factory=dict)


class ArtifactServer:
    """See the module docstring. Create with `ArtifactServer.start(tls=...)`."""

    def __init__(self, *, tls: bool) -> None:
        self._tls = tls
        self._state = _State()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="artifact-server")
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.ca_pem = b""

    @classmethod
    @contextlib.contextmanager
    def start(cls, *, tls: bool = True) -> Iterator[ArtifactServer]:
        """A running server on 127.0.0.1 (an ephemeral port), stopped on exit."""
        server = cls(tls=tls)
        server._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(server._start(), server._loop).result(timeout=30)
            yield server
        finally:
            server._stop()

    @property
    def scheme(self) -> str:
        return "https" if self._tls else "http"

    def url(self, path: str, *, host: str = "127.0.0.1") -> str:
        """The URL of `path` on this server (under another name of it with `host`)."""
        return f"{self.scheme}://{host}:{self.port}{path}"

    def serve(
        self,
        path: str,
        body: bytes,
        *,
        etag: str | None = "auto",
        content_type: str = "application/x-protobuf",
        token: str | None = None,
        mode: str = "ok",
        location: str | None = None,
    ) -> None:
        """Serve `body` at `path` (replacing what was there; the request log stays)."""
        if etag == "auto":
            etag = f'"{hashlib.sha256(body).hexdigest()[:16]}"'
        route = _Route(body, etag, content_type, token, mode, location)
        with self._state.lock:
            self._state.routes[path] = route

    def request_count(self, path: str) -> int:
        with self._state.lock:
            return len(self._state.records.get(path, []))

    def requests(self, path: str) -> list[Record]:
        with self._state.lock:
            return list(self._state.records.get(path, []))

    def bytes_sent(self, path: str) -> int:
        """Body bytes written for `path` (streaming modes), across requests."""
        with self._state.lock:
            return self._state.bytes_sent.get(path, 0)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        # A short shutdown grace: drip and hang handlers would otherwise hold the stop.
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, "127.0.0.1", 0, ssl_context=self._server_context() if self._tls else None
        )
        await site.start()
        self.port = self._runner.addresses[0][1]

    def _server_context(self) -> ssl.SSLContext:
        ca = pki.create_ca("artifact-server-ca", valid_for=datetime.timedelta(days=1))
        served = pki.issue_certificate(
            ca,
            "artifact-server",
            valid_for=datetime.timedelta(days=1),
            ip_addresses=["127.0.0.1"],
            dns_names=list(CERTIFICATE_NAMES),
            server=True,
        )
        self.ca_pem = ca.cert_pem
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as directory:
            cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
            cert.write_bytes(served.cert_pem)
            key.write_bytes(served.key_pem)
            context.load_cert_chain(cert, key)
        return context

    def _stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        with self._state.lock:
            route = self._state.routes.get(path)
        authorization = request.headers.get("Authorization")
        if_none_match = request.headers.get("If-None-Match")
        return await self._answer(request, route, authorization, if_none_match)

    async def _answer(
        self,
        request: web.Request,
        route: _Route | None,
        authorization: str | None,
        if_none_match: str | None,
    ) -> web.StreamResponse:
        def record(status: int) -> None:
            with self._state.lock:
                log = self._state.records.setdefault(request.path, [])
                log.append(Record(status, if_none_match, authorization))

        if route is None:
            record(404)
            return web.Response(status=404, text="no such artifact")
        if route.mode.startswith("echo-"):
            return self._echo(int(route.mode.removeprefix("echo-")), authorization, record)
        if route.token is not None and authorization != f"Bearer {route.token}":
            record(401)
            return web.Response(
                status=401,
                text="a bearer token is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if route.etag is not None and if_none_match == route.etag:
            record(304)
            return web.Response(status=304, headers={"ETag": route.etag})
        if route.mode == "redirect":
            record(302)
            return web.Response(status=302, headers={"Location": route.location or "/"})
        if route.mode.isdigit():
            record(int(route.mode))
            return web.Response(status=int(route.mode), text=f"answering {route.mode}")
        record(200)
        return await self._body(request, route)

    @staticmethod
    def _echo(
        status: int, authorization: str | None, record: Callable[[int], None]
    ) -> web.Response:
        """What a careless or hostile server does: the credentials back in every place."""
        record(status)
        echoed = authorization or "(none)"
        return web.Response(
            status=status,
            reason=f"Rejected {echoed}",
            text=f"<html>the credentials {echoed} were refused</html>",
            content_type="text/html",
            headers={
                "WWW-Authenticate": f'Bearer error="invalid_token", error_description="{echoed}"',
                "X-Echo": echoed,
                "ETag": f'"{echoed}"',
            },
        )

    async def _body(self, request: web.Request, route: _Route) -> web.StreamResponse:
        headers = {"ETag": route.etag} if route.etag is not None else {}
        if route.mode == "ok":
            return web.Response(body=route.body, content_type=route.content_type, headers=headers)
        if route.mode == "gzip":
            return web.Response(
                body=gzip.compress(route.body),
                content_type=route.content_type,
                headers={**headers, "Content-Encoding": "gzip"},
            )
        if route.mode == "hang":
            await asyncio.Event().wait()
        response = web.StreamResponse(headers={"Content-Type": route.content_type, **headers})
        if route.mode == "drip":
            response.content_length = len(route.body)
        await response.prepare(request)
        for chunk in self._chunks(route):
            if request.transport is None or request.transport.is_closing():
                break  # the client hung up (an endless body's only end)
            await response.write(chunk)
            # Writes to a peer that hung up complete without blocking: yield, so the hang-up
            # (and the handler's cancellation) is noticed instead of spinning this loop.
            await asyncio.sleep(0)
            with self._state.lock:
                self._state.bytes_sent[request.path] = self._state.bytes_sent.get(
                    request.path, 0
                ) + len(chunk)
            if route.mode == "drip":
                await asyncio.sleep(DRIP_INTERVAL_SECONDS)
        await response.write_eof()
        return response

    @staticmethod
    def _chunks(route: _Route) -> Iterator[bytes]:
        if route.mode == "endless":
            while True:
                yield ENDLESS_CHUNK
        size = 1 if route.mode == "drip" else 1024
        for start in range(0, len(route.body), size):
            yield route.body[start : start + size]


class StaticResolver(AbstractResolver):
    """A resolver answering from a table (name → IP addresses): lets a test point a name at a
    link-local address, or a second name at this server, without touching DNS."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self._names = names
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        if host not in self._names:
            raise OSError(f"{host} is not in the test's table")
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in self._names[host]
        ]

    async def close(self) -> None:
        pass
