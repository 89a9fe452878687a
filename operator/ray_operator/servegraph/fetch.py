"""Downloading a RayServeGraph's document: one authenticated, conditional, hostile-input-safe GET.

The URL comes from a custom resource and the server may be hostile, so every step is bounded
and every refusal is an `ArtifactFetchError` with a `reason` (the `Fetched` condition's reason),
a fixed `message` a user can act on, and `retryable` (timeouts, 5xx, connection failures: yes;
401/403/404 and policy refusals: no, they need a change by a human).

    Fetcher(policy).fetch(request, namespace=...)   the operator's: a slot first (at most
      │  `max_concurrent_fetches`, `..._per_namespace` of them for one namespace, waiters
      │  served namespace by namespace), names looked up on `resolution.LookupPool`
    fetch_artifact(request, policy=...)             one fetch, no slot (tests, tools)
      ├─ URL: https (http only with allow_insecure_http), no user:password@, origin allowed by
      │  the operator (`FetchPolicy.allowed_hosts`, `origins`), an IP literal judged by
      │  `addresses`
      ├─ GET with `Authorization: Bearer`, `If-None-Match`, `Accept-Encoding: identity`;
      │  names resolved through `resolution.GuardedResolver`; TLS verified (CA bundle optional)
      ├─ redirects followed by hand, at most `max_redirects`, same scheme, host and port only:
      │  the token goes to the origin its Secret opted in for and nowhere else
      ├─ 304 → NotModified; 401/403/404/5xx → fixed messages; 200 → content type checked,
      │  body streamed and refused past `max_bytes` (never more than max_bytes + 1 bytes read)
      └─ one deadline (`timeout_seconds`) over all of it: a server dripping a byte at a time
         cannot hold a fetch longer

Messages never carry the response body, its reason phrase or headers, the URL's userinfo or
query, nor aiohttp's exception texts (they embed the URL); errors are raised `from None`. As a
last resort any message containing the token is redacted. `spec.fetch_urls.check_secret_opt_in`
is the confused-deputy guard: a token Secret is only used for the origins (and graphs) it names,
https unless an entry says `http://` (`origins`).

This module is the client: the slots, the session, TLS, redirects, the deadline and how a
failure is reported. The rest lives beside it: the values it takes and gives
(`spec.fetch_types`), the rules that need no network (`spec.fetch_urls`: the URL, a redirect's
target, an IP literal, the Secret's opt-in), reading the answer (`fetch_responses`: status,
content type, size, ETag) and name resolution (`resolution`).

No port scanner: whoever writes the URL chooses host and port, and the operator's network reach
may exceed theirs (NetworkPolicies that let the operator in). Unless the cluster admin lists the
allowed hosts (`--serve-graph-allowed-hosts`, then every host fetched is one the admin chose and
failures say what happened), a fetch that got no HTTP answer — the name did not resolve, the
connection was refused, reset or timed out, TLS broke off, the bytes were not HTTP — ends in
one `ConnectionFailed` message, the same for all of them, reported at the fetch's deadline and
not before: neither its text nor its timing tells a closed port from an open one or a name
from a missing one. The cause goes to the operator's log, for the admin.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
from collections.abc import Mapping
from typing import NoReturn

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from ray_operator.servegraph.fairshare import FairShare
from ray_operator.servegraph.fetch_responses import (
    check_content,
    fail_status,
    read_bounded,
    response_etag,
    too_large,
)
from ray_operator.servegraph.resolution import GuardedResolver, LookupPool, LookupTimedOutError
from ray_operator.spec.fetch_types import (
    Artifact,
    ArtifactFetchError,
    ArtifactRequest,
    FetchPolicy,
    NotModified,
    fail,
)
from ray_operator.spec.fetch_urls import (
    check_address,
    checked_url,
    redirect_target,
    show_origin,
    url_origin,
)
from ray_operator.urls import shown_url

logger = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
REDACTED = "<redacted>"
RESOLVE_TIMEOUT_SECONDS = 10.0
"""The longest wait for a name's addresses (a thread of the pool, then the answer)."""
CONNECTION_FAILED = "ConnectionFailed"


class Fetcher:
    """The operator's fetches (see the module docstring): a `FairShare` of
    `policy.max_concurrent_fetches` slots, and a `LookupPool` as large for their names, so a
    fetch never waits on the event loop's default executor nor holds it."""

    def __init__(self, policy: FetchPolicy) -> None:
        self._policy = policy
        self.slots = FairShare(
            policy.max_concurrent_fetches, per_tenant=policy.max_concurrent_fetches_per_namespace
        )
        self.lookups = LookupPool(
            threads=policy.max_concurrent_fetches,
            per_tenant=policy.max_concurrent_fetches_per_namespace,
            timeout=RESOLVE_TIMEOUT_SECONDS,
        )

    async def fetch(self, request: ArtifactRequest, *, namespace: str) -> Artifact | NotModified:
        """`fetch_artifact` once a slot of `namespace` is free; the slot is given back before a
        connection failure waits out its deadline (`_reported`)."""
        async with self.slots.slot(namespace):
            try:
                return await _attempt(
                    request, policy=self._policy, resolver=self.lookups.resolver(namespace)
                )
            except _Unreachable as error:
                unreachable = error
        raise await _reported(unreachable, request=request, policy=self._policy)


async def fetch_artifact(
    request: ArtifactRequest,
    *,
    policy: FetchPolicy,
    resolver: AbstractResolver | None = None,
) -> Artifact | NotModified:
    """GET the document (see the module docstring); raise `ArtifactFetchError` for any failure.

    `resolver` (the caller keeps it open) replaces aiohttp's default name resolution; the
    address policy applies to its answers as to any other. The operator fetches through a
    `Fetcher` instead: bounded, fair, and on its own lookup threads.
    """
    try:
        return await _attempt(request, policy=policy, resolver=resolver)
    except _Unreachable as error:
        raise await _reported(error, request=request, policy=policy) from None


class _Unreachable(Exception):  # noqa: N818 (an outcome, never leaves this module)
    """No HTTP answer: what happened (`reason`, `message`, `retryable`, for the log or an
    admin-allowed host), the message every such failure shows otherwise (`uniform`, always
    retryable: the backoff would tell them apart too), and the deadline before which it is not
    reported (`deadline`, loop time)."""

    def __init__(
        self, reason: str, message: str, *, retryable: bool, uniform: str, deadline: float
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable
        self.uniform = uniform
        self.deadline = deadline


async def _attempt(
    request: ArtifactRequest, *, policy: FetchPolicy, resolver: AbstractResolver | None
) -> Artifact | NotModified:
    """The fetch; `ArtifactFetchError` for an answer or a refusal, `_Unreachable` for none."""
    try:
        return await _fetch(request, policy=policy, resolver=resolver)
    except ArtifactFetchError as error:
        token = request.token
        if token and (token in error.message or token in error.reason):
            # Last resort: no message above quotes the server, but never trust that blindly.
            raise ArtifactFetchError(
                _redact(error.reason, token),
                _redact(error.message, token),
                retryable=error.retryable,
            ) from None
        raise


async def _reported(
    error: _Unreachable, *, request: ArtifactRequest, policy: FetchPolicy
) -> ArtifactFetchError:
    """What a fetch without an HTTP answer reports: its cause when the admin chose the hosts;
    otherwise the one uniform message, not before the fetch's deadline (see the module
    docstring), the cause going to the log only."""
    token = request.token or REDACTED
    message = _redact(error.message, token)
    if policy.shows_causes:
        return ArtifactFetchError(error.reason, message, retryable=error.retryable)
    logger.info("fetch failed (reported as %s): %s: %s", CONNECTION_FAILED, error.reason, message)
    await asyncio.sleep(max(0.0, error.deadline - asyncio.get_running_loop().time()))
    return ArtifactFetchError(CONNECTION_FAILED, _redact(error.uniform, token), retryable=True)


def _redact(text: str, token: str) -> str:
    return text.replace(token, REDACTED)


async def _fetch(
    request: ArtifactRequest, *, policy: FetchPolicy, resolver: AbstractResolver | None
) -> Artifact | NotModified:
    deadline = asyncio.get_running_loop().time() + request.timeout_seconds
    url = checked_url(request, policy=policy)
    headers = _request_headers(request)
    ssl_context = await _ssl_context(request.ca_bundle) if url.scheme == "https" else False
    guard = GuardedResolver(
        resolver or aiohttp.ThreadedResolver(),
        allow_loopback=policy.allow_loopback,
        owns_inner=resolver is None,
    )
    logger.debug("fetching the ServeGraph document from %s", shown_url(url))

    def unreachable(reason: str, message: str, *, retryable: bool = True) -> NoReturn:
        uniform = (
            f"no document from {show_origin(url)} within {request.timeout_seconds:g} s: no "
            "connection, or no complete answer (the cause is shown only for hosts in the "
            "operator's --serve-graph-allowed-hosts)"
        )
        raise _Unreachable(reason, message, retryable=retryable, uniform=uniform, deadline=deadline)

    try:
        async with asyncio.timeout(request.timeout_seconds):
            async with _session(guard, ssl_context, request.timeout_seconds) as session:
                return await _follow(session, url, headers=headers, request=request, policy=policy)
    except ArtifactFetchError:
        raise
    except TimeoutError:
        unreachable(
            "Timeout",
            f"no complete answer from {show_origin(url)} within {request.timeout_seconds:g} s",
        )
    except aiohttp.ClientConnectorDNSError as error:
        if guard.refused is not None:
            host, why = guard.refused
            fail("AddressRefused", f"{host} resolves to {why}", retryable=False)
        unreachable(CONNECTION_FAILED, _dns_message(url, error.os_error))
    except aiohttp.ClientConnectorCertificateError as error:
        # The server finished its part of a TLS handshake: as much an answer as a 404 is.
        fail("TLSError", _tls_message(url, error), retryable=False)
    except (aiohttp.ClientSSLError, ssl.SSLError) as error:
        unreachable("TLSError", _tls_message(url, error), retryable=False)
    except aiohttp.ClientConnectorError as error:
        unreachable(CONNECTION_FAILED, _connect_message(url, error.os_error))
    except (aiohttp.ClientError, OSError):
        # Disconnects, payload errors, malformed responses: the connection, not the request.
        unreachable(
            CONNECTION_FAILED,
            f"the connection to {show_origin(url)} failed before a complete answer",
        )
    finally:
        await guard.close()


def _session(
    resolver: AbstractResolver, ssl_context: ssl.SSLContext | bool, timeout: float
) -> aiohttp.ClientSession:
    # One connector per fetch (fetches are rare): no DNS cache or pooled connection shared
    # between RayServeGraphs, so one object's answers never serve another's request.
    connector = aiohttp.TCPConnector(resolver=resolver, ssl=ssl_context, limit=1)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout),
        auto_decompress=False,  # we count the bytes on the wire; no decompression bombs
        trust_env=False,  # a proxy from the environment would bypass the address policy
        cookie_jar=aiohttp.DummyCookieJar(),
    )


async def _follow(
    session: aiohttp.ClientSession,
    url: URL,
    *,
    headers: Mapping[str, str],
    request: ArtifactRequest,
    policy: FetchPolicy,
) -> Artifact | NotModified:
    """The GET and its same-origin redirects, at most `policy.max_redirects` of them."""
    origin = url_origin(url)
    current = url
    for _ in range(policy.max_redirects + 1):
        async with session.get(current, headers=headers, allow_redirects=False) as response:
            if response.status not in REDIRECT_STATUSES:
                return await _outcome(response, url=current, request=request)
            current = redirect_target(
                response.headers.get("Location"),
                status=response.status,
                current=current,
                origin=origin,
            )
        check_address(current, policy=policy)
    fail(
        "RedirectRefused",
        f"{show_origin(url)} redirected more than {policy.max_redirects} times",
        retryable=False,
    )


async def _outcome(
    response: aiohttp.ClientResponse, *, url: URL, request: ArtifactRequest
) -> Artifact | NotModified:
    if response.status == 304:
        return NotModified(etag=response_etag(response, token=request.token) or request.etag)
    if response.status != 200:
        fail_status(response.status, url=url, has_token=request.token is not None)
    check_content(response)
    if response.content_length is not None and response.content_length > request.max_bytes:
        too_large(request.max_bytes)
    body, digest = await read_bounded(response.content, max_bytes=request.max_bytes)
    logger.debug("fetched %d bytes from %s", len(body), shown_url(url))
    return Artifact(
        body=body,
        digest=digest,
        etag=response_etag(response, token=request.token),
        size=len(body),
        url=shown_url(url),
    )


def _request_headers(request: ArtifactRequest) -> dict[str, str]:
    headers = {
        "Accept": "application/x-protobuf, application/protobuf, application/octet-stream;q=0.5",
        "Accept-Encoding": "identity",
        "User-Agent": "ray-operator (RayServeGraph)",
    }
    if request.token is not None:
        if not _is_header_safe(request.token):
            fail(
                "Unauthorized",
                "the token is not usable as a bearer token (printable ASCII without spaces)",
                retryable=False,
            )
        headers["Authorization"] = f"Bearer {request.token}"
    if request.etag is not None and _is_header_safe(request.etag.replace(" ", "")):
        headers["If-None-Match"] = request.etag
    return headers


def _is_header_safe(value: str) -> bool:
    return bool(value) and value.isascii() and value.isprintable() and " " not in value


async def _ssl_context(ca_bundle: bytes | None) -> ssl.SSLContext:
    """A verifying client context; built in a thread (loading a CA bundle from a Secret, or the
    system's, is CPU work that scales with its size)."""
    if ca_bundle is None:
        return await asyncio.to_thread(ssl.create_default_context)
    try:
        pem = ca_bundle.decode("ascii")
        return await asyncio.to_thread(ssl.create_default_context, cadata=pem)
    except (UnicodeDecodeError, ssl.SSLError, ValueError):
        fail("TLSError", "the CA bundle is not PEM certificates", retryable=False)


def _tls_message(url: URL, error: Exception) -> str:
    detail = ""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        verify = getattr(error.certificate_error, "verify_message", "")
        # OpenSSL's text about our verification (e.g. "unable to get local issuer
        # certificate"), not the server's: shown when it looks like that.
        if isinstance(verify, str) and verify.isascii() and verify.isprintable():
            detail = f": {verify[:120]}"
    return (
        f"TLS with {show_origin(url)} failed{detail or ' (handshake)'}; check "
        "spec.source.caBundleSecretRef and the server's certificate"
    )


def _connect_message(url: URL, error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0)
    cause = f" ({name})" if name else ""
    return f"could not connect to {show_origin(url)}{cause}"


def _dns_message(url: URL, error: OSError) -> str:
    if isinstance(error, LookupTimedOutError):
        return f"no answer for {url.host} from DNS within {RESOLVE_TIMEOUT_SECONDS:g} s"
    return f"could not resolve {url.host}"
