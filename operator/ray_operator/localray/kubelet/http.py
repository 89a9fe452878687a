"""The little HTTP/1.1 a kubelet endpoint needs: read one request head (bounded), answer with a
status and a body, a Kubernetes `Status` object, or `101 Switching Protocols` to SPDY/3.1.

Only the API server talks to the endpoint (client-certificate TLS), one request per connection:
each answer closes the connection.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

MAX_HEAD_BYTES = 16 << 10
"""Request line and headers together (the API server sends well under 2 KiB)."""
HEAD_TIMEOUT_SECONDS = 10.0
REASONS = {
    101: "Switching Protocols",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 503: "ServiceUnavailable"}


class BadRequestError(ValueError):
    """The request cannot be served as asked; the message is for the user."""

    def __init__(self, message: str, *, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path_segments: tuple[str, ...]
    query: dict[str, list[str]]
    headers: dict[str, list[str]]
    """Names lower-case; a header given twice (or comma-separated) has each value."""

    def flag(self, name: str) -> bool:
        """A boolean query parameter ("1" or "true", as the API server and kubectl write)."""
        return self.query.get(name, [""])[-1].lower() in ("1", "true")

    def wants_spdy(self) -> bool:
        upgrade = [value.lower() for value in self.headers.get("upgrade", [])]
        return "spdy/3.1" in upgrade


async def read_request(reader: asyncio.StreamReader) -> Request:
    """One request head; BadRequestError when it is malformed, too large or too slow."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
    except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError) as error:
        raise BadRequestError(f"no complete request head within bounds ({error!r})") from error
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ")
    except ValueError as error:
        raise BadRequestError(f"malformed request line {lines[0][:100]!r}") from error
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, separator, value = line.partition(":")
        if not separator:
            raise BadRequestError(f"malformed header line {line[:100]!r}")
        values = [part.strip() for part in value.split(",")]
        headers.setdefault(name.strip().lower(), []).extend(v for v in values if v)
    url = urlsplit(target)
    segments = tuple(unquote(part) for part in url.path.split("/") if part)
    return Request(method, segments, parse_qs(url.query), headers)


async def respond(
    writer: asyncio.StreamWriter,
    code: int,
    body: bytes = b"",
    *,
    content_type: str = "text/plain; charset=utf-8",
    length: bool = True,
) -> None:
    """Status line and headers, then `body`; without `length` the body runs until close."""
    lines = [
        f"HTTP/1.1 {code} {REASONS.get(code, 'Error')}",
        f"Content-Type: {content_type}",
        "Connection: close",
    ]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()


async def respond_status(writer: asyncio.StreamWriter, code: int, message: str) -> None:
    """A Kubernetes `Status` (what a SPDY client shows when the upgrade is refused)."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": STATUS_REASONS.get(code, "InternalError"),
        "code": code,
    }
    await respond(writer, code, json.dumps(status).encode(), content_type="application/json")


async def upgrade_to_spdy(
    request: Request, writer: asyncio.StreamWriter, *, protocols: tuple[str, ...]
) -> str:
    """Switch to SPDY/3.1 with the first of our `protocols` the client offers; that one."""
    offered = request.headers.get("x-stream-protocol-version", [])
    chosen = next((protocol for protocol in protocols if protocol in offered), None)
    if chosen is None:
        raise BadRequestError(
            f"unable to upgrade: none of the offered stream protocols {offered[:8]} is one of "
            f"{list(protocols)}",
            code=403,
        )
    head = (
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Connection: Upgrade\r\n"
        "Upgrade: SPDY/3.1\r\n"
        f"X-Stream-Protocol-Version: {chosen}\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    return chosen
