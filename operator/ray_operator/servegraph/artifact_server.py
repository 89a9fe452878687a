"""A tiny registry for trying RayServeGraphs locally: serves a JSON-authored graph as protobuf.

    python -m ray_operator.servegraph.artifact_server --graph graph.json --token-file token \\
        [--port 8765] [--path /graph.pb] [--tls-dir DIR]

A development tool, not part of the running operator. It listens on 127.0.0.1 only, answers
`GET <path>` with the graph (protobuf's JSON form of a `ServeGraph`, converted with
`json_format.Parse`) as `application/x-protobuf`, demands `Authorization: Bearer <token>`,
sends an ETag and answers 304 to a matching `If-None-Match`. It re-reads the JSON file when it
changes, so editing the file and sending a refresh event (or waiting for the poll) walks through
an update. With `--tls-dir` it speaks HTTPS with a certificate for 127.0.0.1 and `localhost` from
a CA it creates there once (`DIR/ca.crt`: put it in the RayServeGraph's `caBundleSecretRef`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import hmac
import logging
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web
from google.protobuf import json_format
from ray_operator_io.v1alpha1 import serve_graph_pb2

from ray_operator import pki

logger = logging.getLogger("ray_operator.servegraph.artifact_server")

LISTEN_ADDRESS = "127.0.0.1"
CERTIFICATE_VALIDITY = datetime.timedelta(days=365)


@dataclasses.dataclass
class GraphFile:
    """The JSON file and its protobuf form, converted again when the file changes."""

    path: Path
    _mtime_ns: int = -1
    _document: bytes = b""
    _etag: str = ""
    _error: str | None = None

    def current(self) -> tuple[bytes, str] | str:
        """(protobuf bytes, ETag), or why the file cannot be served."""
        try:
            mtime_ns = self.path.stat().st_mtime_ns
        except OSError as error:
            return f"cannot read {self.path}: {error.strerror}"
        if mtime_ns != self._mtime_ns:
            self._mtime_ns = mtime_ns
            self._convert()
        if self._error is not None:
            return self._error
        return self._document, self._etag

    def _convert(self) -> None:
        try:
            graph = json_format.Parse(self.path.read_text(), serve_graph_pb2.ServeGraph())
        except (OSError, UnicodeDecodeError, json_format.ParseError) as error:
            self._error = f"{self.path} is not a ServeGraph in JSON: {error}"
            logger.error("%s", self._error)
            return
        self._document = graph.SerializeToString(deterministic=True)
        self._etag = f'"{hashlib.sha256(self._document).hexdigest()[:16]}"'
        self._error = None
        logger.info("serving %s: %d bytes, ETag %s", self.path, len(self._document), self._etag)


def graph_application(graph: GraphFile, *, token: str, path: str) -> web.Application:
    """The aiohttp application answering `GET path`."""

    async def serve_graph(request: web.Request) -> web.Response:
        expected = f"Bearer {token}".encode()
        presented = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(presented, expected):
            logger.warning("GET %s: 401 (no or wrong bearer token)", request.path)
            return web.Response(status=401, headers={"WWW-Authenticate": "Bearer"})
        current = graph.current()
        if isinstance(current, str):
            logger.warning("GET %s: 500 (%s)", request.path, current)
            return web.Response(status=500, text="the graph file cannot be served; see the log")
        document, etag = current
        if request.headers.get("If-None-Match") == etag:
            logger.info("GET %s: 304 (ETag %s)", request.path, etag)
            return web.Response(status=304, headers={"ETag": etag})
        logger.info("GET %s: 200 (%d bytes, ETag %s)", request.path, len(document), etag)
        return web.Response(
            body=document, content_type="application/x-protobuf", headers={"ETag": etag}
        )

    application = web.Application()
    application.router.add_get(path, serve_graph)
    return application


def tls_context(directory: Path) -> ssl.SSLContext:
    """A server context from `directory`, creating its CA and certificate on first use."""
    ca_file, cert_file, key_file = (directory / n for n in ("ca.crt", "tls.crt", "tls.key"))
    if not (ca_file.exists() and cert_file.exists() and key_file.exists()):
        directory.mkdir(parents=True, exist_ok=True)
        ca = pki.create_ca("ray-operator-artifact-server-ca", valid_for=CERTIFICATE_VALIDITY)
        served = pki.issue_certificate(
            ca,
            "ray-operator-artifact-server",
            valid_for=CERTIFICATE_VALIDITY,
            ip_addresses=[LISTEN_ADDRESS],
            dns_names=["localhost"],
            server=True,
        )
        ca_file.write_bytes(ca.cert_pem)
        cert_file.write_bytes(served.cert_pem)
        key_file.touch(mode=0o600)
        key_file.write_bytes(served.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


def read_token(arguments: argparse.Namespace) -> str:
    token = (
        Path(arguments.token_file).read_text() if arguments.token_file else arguments.token
    ).strip()
    if not token:
        raise SystemExit("the token is empty")
    return str(token)


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ray_operator.servegraph.artifact_server",
        description="Serve a JSON-authored ServeGraph as protobuf on 127.0.0.1 (for trials).",
    )
    parser.add_argument("--graph", required=True, help="the graph, protobuf JSON of a ServeGraph")
    token = parser.add_mutually_exclusive_group(required=True)
    token.add_argument("--token-file", help="file holding the bearer token clients must send")
    token.add_argument("--token", help="the bearer token (visible in `ps`; prefer --token-file)")
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (8765)")
    parser.add_argument("--path", default="/graph.pb", help="URL path of the graph (/graph.pb)")
    parser.add_argument("--tls-dir", help="serve HTTPS with the CA and certificate kept here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = parse_arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    graph = GraphFile(Path(arguments.graph))
    if isinstance(graph.current(), str):
        raise SystemExit(1)
    context = tls_context(Path(arguments.tls_dir)) if arguments.tls_dir else None
    scheme = "https" if context else "http"
    url = f"{scheme}://{LISTEN_ADDRESS}:{arguments.port}{arguments.path}"
    print(f"serving {arguments.graph} at {url}", flush=True)
    if context is not None:
        print(f"its CA certificate: {Path(arguments.tls_dir) / 'ca.crt'}", flush=True)
    web.run_app(
        graph_application(graph, token=read_token(arguments), path=arguments.path),
        host=LISTEN_ADDRESS,
        port=arguments.port,
        ssl_context=context,
        print=None,
        access_log=None,  # our own lines above; aiohttp's would add nothing but noise
    )


if __name__ == "__main__":
    main()
