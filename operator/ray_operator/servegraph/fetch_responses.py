"""Reading the answer to a RayServeGraph fetch when the server may be hostile: a fixed message
per status (`fail_status`), the content type and encoding checked (`check_content`: identity
only, so no decompression bomb), the body read to at most `max_bytes + 1` bytes
(`read_bounded`), and the ETag kept only when it is safe to show (`response_etag`).

Nothing here quotes the server: not the body, nor its reason phrase, nor a header (a hostile
server echoes the token in them); `servegraph.fetch` sends the request and calls these.
"""

from __future__ import annotations

import hashlib
from typing import NoReturn

import aiohttp
from yarl import URL

from ray_operator.spec.fetch_types import fail
from ray_operator.spec.fetch_urls import show_origin

ACCEPTED_CONTENT_TYPES = frozenset(
    {
        "application/x-protobuf",
        "application/protobuf",
        "application/vnd.google.protobuf",
        "application/octet-stream",
    }
)
# Media types named in a WrongContentType message; any other is "an unexpected media type" (the
# header is the server's text, and a hostile server could put the token there).
_NAMED_CONTENT_TYPES = frozenset(
    {
        "text/html",
        "text/plain",
        "text/xml",
        "text/yaml",
        "application/json",
        "application/problem+json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
    }
)
READ_CHUNK_BYTES = 64 * 1024
MAX_ETAG_LENGTH = 256


async def read_bounded(content: aiohttp.StreamReader, *, max_bytes: int) -> tuple[bytes, str]:
    """The body and its digest, reading at most `max_bytes + 1` bytes (one more proves too
    many). Hashed chunk by chunk so a large body never holds the event loop at once."""
    chunks: list[bytes] = []
    size = 0
    sha256 = hashlib.sha256()
    while chunk := await content.read(min(READ_CHUNK_BYTES, max_bytes + 1 - size)):
        size += len(chunk)
        if size > max_bytes:
            too_large(max_bytes)
        chunks.append(chunk)
        sha256.update(chunk)
    return b"".join(chunks), f"sha256:{sha256.hexdigest()}"


def fail_status(status: int, *, url: URL, has_token: bool) -> NoReturn:
    """A fixed message per status: the body and reason phrase are the server's (and a hostile
    server echoes the token in them)."""
    origin = show_origin(url)
    if status == 401:
        if has_token:
            fail("Unauthorized", f"{origin} refused the token (401 Unauthorized)", retryable=False)
        fail(
            "Unauthorized",
            f"{origin} asks for a token (401 Unauthorized): set spec.source.tokenSecretRef",
            retryable=False,
        )
    if status == 403:
        fail(
            "Forbidden",
            f"{origin} refused access to this document (403 Forbidden)",
            retryable=False,
        )
    if status in (404, 410):
        fail("NotFound", f"{origin} has no document at this path ({status})", retryable=False)
    if status >= 500 or status in (408, 429):
        fail("ServerError", f"server error {status} from {origin}", retryable=True)
    fail("ServerError", f"{origin} answered {status} instead of the document", retryable=False)


def check_content(response: aiohttp.ClientResponse) -> None:
    """Refuse a compressed body or a media type that is not a protobuf document."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        fail(
            "WrongContentType",
            "the server sent a compressed body although only identity was accepted",
            retryable=False,
        )
    media_type = response.content_type  # application/octet-stream when the header is missing
    if media_type not in ACCEPTED_CONTENT_TYPES:
        shown = media_type if media_type in _NAMED_CONTENT_TYPES else "an unexpected media type"
        fail(
            "WrongContentType",
            f"the server sent {shown}, not a protobuf ServeGraph (expected "
            "application/x-protobuf or application/octet-stream)",
            retryable=False,
        )


def response_etag(response: aiohttp.ClientResponse, *, token: str | None) -> str | None:
    """The ETag when short, printable and free of the token: it ends up in the status."""
    etag = response.headers.get("ETag")
    if etag is None or len(etag) > MAX_ETAG_LENGTH or not etag.isascii():
        return None
    if not etag.isprintable() or (token and token in etag):
        return None
    return etag


def too_large(max_bytes: int) -> NoReturn:
    """Refuse a document larger than `spec.source.maxBytes`."""
    fail(
        "TooLarge",
        f"the document is larger than spec.source.maxBytes ({max_bytes} bytes)",
        retryable=False,
    )
