"""TCP servers on loopback that are not registries: what a port scan through the operator meets.

    closed_port()            a port nothing listens on (connection refused)
    with RawServer.start(mode) as server:   on 127.0.0.1:server.port, a thread of its own
        "banner"   writes an SSH banner and keeps the connection open: an open port that
                   does not speak HTTP (nor TLS)
        "silent"   reads the request and never answers, until the client hangs up

Every connection is recorded: `server.connections` (its request line when one came: the path
tells which graph it is), `server.open_now()`, and `server.max_open(prefix)` — the most
connections open at once whose request path starts with `prefix` (all with ""). That is how a
test counts concurrent fetches from outside the operator.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

BANNER = b"SSH-2.0-OpenSSH_9.6\r\n"
MAX_HEAD_BYTES = 8192


def closed_port() -> int:
    """A loopback port nothing listens on (bound for a moment, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Connection:
    opened: float
    path: str = ""
    closed: float | None = None


@dataclass
class _State:
    mode: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    connections: list[Connection] = field(default_factory=list)
    sockets: set[socket.socket] = field(default_factory=set)


class RawServer:
    """See the module docstring. Create with `RawServer.start(mode)`."""

    def __init__(self, mode: str) -> None:
        if mode not in ("banner", "silent"):
            raise ValueError(f"unknown mode {mode!r}")
        self._state = _State(mode)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self._state
        self.port = int(self._server.server_address[1])

    @classmethod
    @contextlib.contextmanager
    def start(cls, mode: str) -> Iterator[RawServer]:
        server = cls(mode)
        thread = threading.Thread(target=server._server.serve_forever, name=f"raw-{mode}")
        thread.start()
        try:
            yield server
        finally:
            server._server.shutdown()
            server._server.server_close()
            with server._state.lock:
                for connection in server._state.sockets:  # wakes handlers blocked in recv
                    with contextlib.suppress(OSError):
                        connection.shutdown(socket.SHUT_RDWR)
            thread.join(timeout=30)

    @property
    def connections(self) -> list[Connection]:
        with self._state.lock:
            return list(self._state.connections)

    def open_now(self, prefix: str = "") -> int:
        with self._state.lock:
            return sum(
                1 for c in self._state.connections if c.closed is None and c.path.startswith(prefix)
            )

    def max_open(self, prefix: str = "") -> int:
        """The most connections (with a request path under `prefix`) open at one moment."""
        with self._state.lock:
            chosen = [c for c in self._state.connections if c.path.startswith(prefix)]
            edges = [(c.opened, 1) for c in chosen]
            edges += [(c.closed, -1) for c in chosen if c.closed is not None]
        most = current = 0
        for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
            current += step
            most = max(most, current)
        return most


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: _State


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, _Server)
        state = self.server.state
        connection = Connection(opened=time.monotonic())
        with state.lock:
            state.connections.append(connection)
            state.sockets.add(self.request)
        try:
            if state.mode == "banner":
                self.request.sendall(BANNER)
            else:
                head = self.request.recv(MAX_HEAD_BYTES)
                with state.lock:
                    connection.path = _request_path(head)
            while self.request.recv(65536):
                pass  # never answer; wait for the client to hang up
        except OSError:
            pass
        finally:
            with state.lock:
                connection.closed = time.monotonic()
                state.sockets.discard(self.request)


def _request_path(head: bytes) -> str:
    """The path of `GET /path HTTP/1.1`, or "" for anything else (a TLS ClientHello, say)."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    return parts[1] if len(parts) == 3 and parts[1].startswith("/") else ""
