"""The kubelet endpoint of the fake node: what the API server dials for `kubectl logs`, `exec`
and `port-forward` of a Pod on it, answered from the local processes of `ray-operator dev`.

A TLS server on loopback that takes one client: the API server, by its certificate (its
`--kubelet-client-certificate`, signed by the plane's CA and pinned here, for the same CA signs
users' certificates too). The API server has already authorised the user for `pods/log`,
`pods/exec` or `pods/portforward`; nobody may skip that check by dialing us. Routes, as a
kubelet's:

- `GET /containerLogs/{namespace}/{pod}/{container}` (`logs.py`);
- `/exec/{namespace}/{pod}/{container}` upgraded to SPDY/3.1 (`remotecommand.py`);
- `/portForward/{namespace}/{pod}` upgraded to SPDY/3.1 (`portforward.py`).

A Pod with no local process (a Pod the agent does not run: KWOK's fakes, a sidecar container)
gets an answer naming it. Bounds: `max_connections` at once, `max_streams` per connection, a
request head of at most 16 KiB read within 10 s, the stream-creation and idle timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ray_operator.localcluster.controlplane import KubeletCredentials
from ray_operator.localray.kubelet import logs, portforward, remotecommand
from ray_operator.localray.kubelet.http import (
    MAX_HEAD_BYTES,
    BadRequestError,
    Request,
    read_request,
    respond,
    respond_status,
    upgrade_to_spdy,
)
from ray_operator.localray.kubelet.session import SpdySession
from ray_operator.localray.views import LocalContainer, LocalPods

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KubeletEndpointOptions:
    """Where the endpoint listens and the certificates it serves and checks with."""

    credentials: KubeletCredentials
    """Its port, serving certificate and key, the plane's CA and the API server's client
    certificate (the one accepted)."""
    host: str = "127.0.0.1"
    max_connections: int = 64
    """Connections at once (a port-forward holds one for as long as it runs)."""
    max_streams: int = 64
    """Streams open at once on one connection (two per forwarded local connection)."""
    stream_creation_timeout: float = 30.0
    """Seconds for a client to open the streams a request needs (a kubelet's default)."""
    idle_timeout: float = 1800.0
    """Seconds with no frame either way after which an exec or port-forward is closed."""


def pinned_certificate(path: Path) -> bytes:
    """The DER bytes of the PEM certificate at `path` (what a peer must present exactly)."""
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def server_tls(options: KubeletEndpointOptions) -> ssl.SSLContext:
    """TLS that requires a client certificate signed by the plane's CA; HTTP/1.1 only."""
    credentials = options.credentials
    context = ssl.create_default_context(
        ssl.Purpose.CLIENT_AUTH, cafile=str(credentials.client_ca_file)
    )
    context.load_cert_chain(str(credentials.cert_file), str(credentials.key_file))
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["http/1.1"])
    return context


class KubeletEndpoint:
    """Serves the fake node's kubelet API for the Pods `pods` knows."""

    def __init__(self, pods: LocalPods, options: KubeletEndpointOptions) -> None:
        self._pods = pods
        self._options = options
        self._slots = asyncio.Semaphore(options.max_connections)
        self._connections: set[asyncio.Task[Any]] = set()
        self._client_certificate = pinned_certificate(options.credentials.client_cert_file)

    async def run(self) -> NoReturn:
        """Listen until cancelled."""
        server = await asyncio.start_server(
            self._connection,
            self._options.host,
            self._options.credentials.port,
            ssl=server_tls(self._options),
            limit=MAX_HEAD_BYTES,
            ssl_handshake_timeout=10.0,
        )
        logger.info(
            "kubelet endpoint of the fake node on https://%s:%d (logs, exec, port-forward)",
            self._options.host,
            self._options.credentials.port,
        )
        try:
            async with server:
                await server.serve_forever()
        finally:
            # Connections are tasks of the server, not ours: end them (and the commands they
            # run) before the operator's loop goes.
            for task in self._connections:
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
        raise AssertionError("serve_forever returned")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        try:
            peer = writer.get_extra_info("ssl_object")
            if peer is None or peer.getpeercert(binary_form=True) != self._client_certificate:
                # Signed by the plane's CA but not the API server's: a user going around RBAC.
                await respond(writer, 403, b"only the API server may call the kubelet endpoint\n")
                return
            if self._slots.locked():
                await respond(writer, 503, b"too many connections to the kubelet endpoint\n")
                return
            async with self._slots:
                await self._serve(reader, writer)
        except (OSError, ConnectionError, asyncio.IncompleteReadError):
            pass  # the API server hung up
        finally:
            writer.close()
            # Cancelled here too at shutdown: the connection is closed either way.
            with contextlib.suppress(OSError, ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request(reader)
        except BadRequestError as error:
            await respond(writer, error.code, f"{error}\n".encode())
            return
        try:
            await self._route(request, reader, writer)
        except BadRequestError as error:
            if request.path_segments[:1] == ("containerLogs",):
                # The API server shows a log request's 400 body as the error; a 404's it drops.
                await respond(writer, 400, f"{error}\n".encode())
            else:
                # A SPDY client (the API server, or kubectl through it) shows a Status.
                await respond_status(writer, error.code, str(error))

    async def _route(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve one request (a BadRequestError raised before any answer is written)."""
        match request.path_segments:
            case ("containerLogs", namespace, pod, container):
                if request.method != "GET":
                    raise BadRequestError(f"{request.method} on containerLogs", code=405)
                found = self._container(namespace, pod, container)
                await logs.serve_logs(request, reader, writer, pods=self._pods, container=found)
                return
            case ("exec", namespace, pod, container):
                options = remotecommand.exec_options(request)
                found = self._running_container(namespace, pod, container)
                session = await self._upgrade(request, reader, writer, remotecommand.PROTOCOLS)
                await self._in_session(
                    session,
                    remotecommand.serve_exec(
                        session,
                        options=options,
                        container=found,
                        stream_creation_timeout=self._options.stream_creation_timeout,
                    ),
                )
                return
            case ("portForward", namespace, pod, *_uid) if len(_uid) <= 1:
                self._running_container(namespace, pod, None)
                session = await self._upgrade(request, reader, writer, portforward.PROTOCOLS)
                await self._in_session(
                    session,
                    portforward.serve_port_forward(
                        session,
                        pods=self._pods,
                        namespace=namespace,
                        pod=pod,
                        stream_creation_timeout=self._options.stream_creation_timeout,
                    ),
                )
                return
            case ("attach", *_):
                raise BadRequestError(
                    "kubectl attach is not supported by ray-operator dev's local Pods "
                    "(their processes read no terminal); use kubectl logs -f or exec",
                    code=400,
                )
        raise BadRequestError(
            f"no such kubelet endpoint path: {request.path_segments[:4]}", code=404
        )

    def _container(self, namespace: str, pod: str, container: str | None) -> LocalContainer:
        found = self._pods.container(namespace, pod, container)
        if found is None:
            what = f"container {container!r} of pod" if container else "pod"
            raise BadRequestError(
                f"{what} {namespace}/{pod} runs no local process under ray-operator dev: only "
                "the Ray container of the head, worker and RayJob submitter Pods the operator "
                "created and the Redis container of a redis-server Pod run on this machine "
                "(other Pods on the fake node are KWOK's)",
                code=404,
            )
        return found

    def _running_container(self, namespace: str, pod: str, container: str | None) -> LocalContainer:
        found = self._container(namespace, pod, container)
        if not found.running:
            raise BadRequestError(
                f"container {found.container!r} of pod {namespace}/{pod} is not running: its "
                "local process ended (kubectl logs shows its output)"
            )
        return found

    async def _upgrade(
        self,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        protocols: tuple[str, ...],
    ) -> SpdySession:
        if not request.wants_spdy():
            raise BadRequestError("this endpoint speaks SPDY/3.1 only (Upgrade: SPDY/3.1)")
        await upgrade_to_spdy(request, writer, protocols=protocols)
        return SpdySession(
            reader,
            writer,
            max_streams=self._options.max_streams,
            idle_timeout=self._options.idle_timeout,
        )

    async def _in_session(self, session: SpdySession, work: Coroutine[Any, Any, None]) -> None:
        """Run the session's reader beside `work`; when `work` ends, the connection does."""
        reading = asyncio.ensure_future(session.run())
        try:
            await work
        finally:
            await session.close()
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
