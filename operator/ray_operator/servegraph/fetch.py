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
last resort any message containing the token is redacted. `check_secret_opt_in` is the
confused-deputy guard: a token Secret is only used for the origins (and graphs) it names, https
unless an entry says `http://` (`origins`).

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
import dataclasses
import errno
import hashlib
import logging
import ssl
from collections.abc import Mapping
from typing import Any, NoReturn

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from ray_operator.servegraph.fairshare import FairShare
from ray_operator.servegraph.resolution import GuardedResolver, LookupPool, LookupTimedOutError
from ray_operator.spec import fetch_addresses as addresses
from ray_operator.spec import fetch_origins as origins
from ray_operator.spec.fetch_origins import DEFAULT_PORTS, Origin
from ray_operator.spec.secret_values import graphs_opted_in
from ray_operator.spec.serve_graph_names import SECRET_GRAPHS_ANNOTATION, SECRET_HOSTS_ANNOTATION
from ray_operator.urls import shown_url

logger = logging.getLogger(__name__)

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
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
READ_CHUNK_BYTES = 64 * 1024
MAX_ETAG_LENGTH = 256
REDACTED = "<redacted>"
RESOLVE_TIMEOUT_SECONDS = 10.0
"""The longest wait for a name's addresses (a thread of the pool, then the answer)."""
CONNECTION_FAILED = "ConnectionFailed"


@dataclasses.dataclass(frozen=True)
class FetchPolicy:
    """Operator-wide limits on where documents may come from."""

    allowed_hosts: frozenset[str] = frozenset()
    """`[http://]host[:port]` entries (`origins`: without a scheme, https; port omitted: the
    scheme's default); empty: any host (`--serve-graph-allowed-hosts`). When set, connection
    failures are reported with their cause."""
    allow_loopback: bool = False
    """Fetch from 127.0.0.0/8 and ::1 (`--serve-graph-allow-loopback`; tests and `make run`)."""
    max_redirects: int = 5
    """Same-origin redirects followed before giving up."""
    max_concurrent_fetches: int = 8
    """Fetches under way at once across the operator (`Fetcher`); name lookups likewise."""
    max_concurrent_fetches_per_namespace: int = 2
    """Of those, how many one namespace may hold at once."""

    @property
    def shows_causes(self) -> bool:
        """Whether connection failures say what happened: only when the admin chose the hosts."""
        return bool(self.allowed_hosts)


@dataclasses.dataclass(frozen=True)
class ArtifactRequest:
    """One fetch, as the RayServeGraph's `spec.source` and its Secrets describe it."""

    url: str
    token: str | None = dataclasses.field(repr=False)
    ca_bundle: bytes | None
    """PEM; when set, the only certificates trusted (else the system's)."""
    etag: str | None
    """Sent as If-None-Match (the ETag of the document we hold)."""
    timeout_seconds: float
    """Deadline of the whole fetch: resolve, connect, TLS, redirects and body."""
    max_bytes: int
    allow_insecure_http: bool


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A downloaded document."""

    body: bytes = dataclasses.field(repr=False)
    digest: str
    """`sha256:<hex>` of the body."""
    etag: str | None
    """The server's ETag, when it sent a short, printable one (it goes into the status)."""
    size: int
    url: str
    """Where the body came from (after same-origin redirects), without userinfo, query or
    fragment: safe to show."""


@dataclasses.dataclass(frozen=True)
class NotModified:
    """The server answered 304 to our If-None-Match: the document we hold is current."""

    etag: str | None


class ArtifactFetchError(Exception):
    """A fetch that did not produce a document. `str()` is the message; no secret in it."""

    def __init__(self, reason: str, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable

    def __repr__(self) -> str:
        return (
            f"ArtifactFetchError(reason={self.reason!r}, message={self.message!r}, "
            f"retryable={self.retryable!r})"
        )


def check_secret_opt_in(secret: Mapping[str, Any], *, url: str, graph_name: str) -> None:
    """Raise `SecretNotOptedIn` unless the token Secret names the URL's origin in its hosts
    annotation (`origins`: `host[:port]` means https only, `http://host[:port]` allows clear
    text) and, when it carries the graphs annotation, the graph's name. Without this, anyone
    allowed to create a RayServeGraph could make the operator send any Secret of the namespace
    to a URL of their choosing, or over a wire anyone may read."""
    metadata = secret.get("metadata") or {}
    name = metadata.get("name") or "?"
    annotations = metadata.get("annotations") or {}
    target = _origin_of(url)
    if target is None:
        _refuse_opt_in(f"the URL has no http(s) host the token Secret {name} could opt in for")
    hosts = annotations.get(SECRET_HOSTS_ANNOTATION)
    if not isinstance(hosts, str):
        _refuse_opt_in(
            f"the token Secret {name} has no {SECRET_HOSTS_ANNOTATION} annotation: add "
            f"{origins.entry_for(target)} to it to let it be sent there"
        )
    entries = hosts.split(",")
    if not origins.origin_listed(entries, target):
        _refuse_opt_in(_not_opted_in_message(name, entries, target))
    graphs = graphs_opted_in(secret)
    if graphs is not None and graph_name not in graphs:
        _refuse_opt_in(
            f"the token Secret {name} does not opt in for RayServeGraph {graph_name}: add it to "
            f"its {SECRET_GRAPHS_ANNOTATION} annotation"
        )


def _not_opted_in_message(name: str, entries: list[str], target: Origin) -> str:
    scheme, host, port = target
    if scheme == "http" and origins.origin_listed(entries, ("https", host, port)):
        return (
            f"the token Secret {name} opts in for {origins.entry_for(('https', host, port))} "
            "over https only (an entry without a scheme means https); to send it in clear text, "
            f"add {origins.entry_for(target)} to its {SECRET_HOSTS_ANNOTATION} annotation"
        )
    return (
        f"the token Secret {name} does not opt in for {origins.entry_for(target)}: add it to "
        f"its {SECRET_HOSTS_ANNOTATION} annotation"
    )


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
    url = _checked_url(request, policy=policy)
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
            f"no document from {_show_origin(url)} within {request.timeout_seconds:g} s: no "
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
            f"no complete answer from {_show_origin(url)} within {request.timeout_seconds:g} s",
        )
    except aiohttp.ClientConnectorDNSError as error:
        if guard.refused is not None:
            host, why = guard.refused
            _fail("AddressRefused", f"{host} resolves to {why}", retryable=False)
        unreachable(CONNECTION_FAILED, _dns_message(url, error.os_error))
    except aiohttp.ClientConnectorCertificateError as error:
        # The server finished its part of a TLS handshake: as much an answer as a 404 is.
        _fail("TLSError", _tls_message(url, error), retryable=False)
    except (aiohttp.ClientSSLError, ssl.SSLError) as error:
        unreachable("TLSError", _tls_message(url, error), retryable=False)
    except aiohttp.ClientConnectorError as error:
        unreachable(CONNECTION_FAILED, _connect_message(url, error.os_error))
    except (aiohttp.ClientError, OSError):
        # Disconnects, payload errors, malformed responses: the connection, not the request.
        unreachable(
            CONNECTION_FAILED,
            f"the connection to {_show_origin(url)} failed before a complete answer",
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
    origin = _origin(url)
    current = url
    for _ in range(policy.max_redirects + 1):
        async with session.get(current, headers=headers, allow_redirects=False) as response:
            if response.status not in REDIRECT_STATUSES:
                return await _outcome(response, url=current, request=request)
            current = _redirect_target(response, current=current, origin=origin)
        _check_address(current, policy=policy)
    _fail(
        "RedirectRefused",
        f"{_show_origin(url)} redirected more than {policy.max_redirects} times",
        retryable=False,
    )


async def _outcome(
    response: aiohttp.ClientResponse, *, url: URL, request: ArtifactRequest
) -> Artifact | NotModified:
    if response.status == 304:
        return NotModified(etag=_etag(response, token=request.token) or request.etag)
    if response.status != 200:
        _fail_status(response.status, url=url, has_token=request.token is not None)
    _check_content(response)
    if response.content_length is not None and response.content_length > request.max_bytes:
        _too_large(request.max_bytes)
    body, digest = await _read_bounded(response.content, max_bytes=request.max_bytes)
    logger.debug("fetched %d bytes from %s", len(body), shown_url(url))
    return Artifact(
        body=body,
        digest=digest,
        etag=_etag(response, token=request.token),
        size=len(body),
        url=shown_url(url),
    )


async def _read_bounded(content: aiohttp.StreamReader, *, max_bytes: int) -> tuple[bytes, str]:
    """The body and its digest, reading at most `max_bytes + 1` bytes (one more proves too
    many). Hashed chunk by chunk so a large body never holds the event loop at once."""
    chunks: list[bytes] = []
    size = 0
    sha256 = hashlib.sha256()
    while chunk := await content.read(min(READ_CHUNK_BYTES, max_bytes + 1 - size)):
        size += len(chunk)
        if size > max_bytes:
            _too_large(max_bytes)
        chunks.append(chunk)
        sha256.update(chunk)
    return b"".join(chunks), f"sha256:{sha256.hexdigest()}"


def _checked_url(request: ArtifactRequest, *, policy: FetchPolicy) -> URL:
    """The URL, once the rules that need no network allow it."""
    try:
        url = URL(request.url)
    except (ValueError, TypeError):
        _fail("InsecureURL", "the URL cannot be parsed", retryable=False)
    if url.scheme not in DEFAULT_PORTS or not url.host:
        _fail("InsecureURL", "only https:// URLs with a host are fetched", retryable=False)
    if url.scheme == "http" and not request.allow_insecure_http:
        _fail(
            "InsecureURL",
            "http:// would send the token in clear text: use https, or set "
            "spec.source.allowInsecureHTTP",
            retryable=False,
        )
    if url.raw_user is not None or url.raw_password is not None:
        _fail(
            "InsecureURL",
            "the URL carries a user name or password; put the token in spec.source.tokenSecretRef",
            retryable=False,
        )
    if policy.allowed_hosts and not origins.origin_listed(policy.allowed_hosts, _origin(url)):
        _fail(
            "HostNotAllowed",
            f"{origins.entry_for(_origin(url))} is not among the hosts this operator may fetch "
            "from (--serve-graph-allowed-hosts)",
            retryable=False,
        )
    _check_address(url, policy=policy)
    return url


def _check_address(url: URL, *, policy: FetchPolicy) -> None:
    why = addresses.literal_refusal(url.host or "", allow_loopback=policy.allow_loopback)
    if why is not None:
        _fail("AddressRefused", f"{_show_origin(url)} is {why}", retryable=False)


def _redirect_target(response: aiohttp.ClientResponse, *, current: URL, origin: Origin) -> URL:
    location = response.headers.get("Location")
    if not location:
        _fail(
            "RedirectRefused", f"a redirect ({response.status}) without a Location", retryable=False
        )
    try:
        target = current.join(URL(location))
    except (ValueError, TypeError):
        _fail("RedirectRefused", "a redirect to a URL that cannot be parsed", retryable=False)
    if target.scheme not in DEFAULT_PORTS or not target.host:
        _fail("RedirectRefused", "a redirect to a URL that is not http(s)", retryable=False)
    if _origin(target) != origin:
        # Neither the location nor its host is shown: it is the server's text.
        _fail(
            "RedirectRefused",
            f"{_show_origin(current)} redirected to another "
            f"{'scheme' if target.scheme != origin[0] else 'host or port'}; the token only "
            "goes to the origin its Secret opted in for",
            retryable=False,
        )
    if target.raw_user is not None or target.raw_password is not None:
        _fail(
            "RedirectRefused", "a redirect to a URL with a user name or password", retryable=False
        )
    return target


def _fail_status(status: int, *, url: URL, has_token: bool) -> NoReturn:
    """A fixed message per status: the body and reason phrase are the server's (and a hostile
    server echoes the token in them)."""
    origin = _show_origin(url)
    if status == 401:
        if has_token:
            _fail("Unauthorized", f"{origin} refused the token (401 Unauthorized)", retryable=False)
        _fail(
            "Unauthorized",
            f"{origin} asks for a token (401 Unauthorized): set spec.source.tokenSecretRef",
            retryable=False,
        )
    if status == 403:
        _fail(
            "Forbidden",
            f"{origin} refused access to this document (403 Forbidden)",
            retryable=False,
        )
    if status in (404, 410):
        _fail("NotFound", f"{origin} has no document at this path ({status})", retryable=False)
    if status >= 500 or status in (408, 429):
        _fail("ServerError", f"server error {status} from {origin}", retryable=True)
    _fail("ServerError", f"{origin} answered {status} instead of the document", retryable=False)


def _check_content(response: aiohttp.ClientResponse) -> None:
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        _fail(
            "WrongContentType",
            "the server sent a compressed body although only identity was accepted",
            retryable=False,
        )
    media_type = response.content_type  # application/octet-stream when the header is missing
    if media_type not in ACCEPTED_CONTENT_TYPES:
        shown = media_type if media_type in _NAMED_CONTENT_TYPES else "an unexpected media type"
        _fail(
            "WrongContentType",
            f"the server sent {shown}, not a protobuf ServeGraph (expected "
            "application/x-protobuf or application/octet-stream)",
            retryable=False,
        )


def _etag(response: aiohttp.ClientResponse, *, token: str | None) -> str | None:
    """The ETag when short, printable and free of the token: it ends up in the status."""
    etag = response.headers.get("ETag")
    if etag is None or len(etag) > MAX_ETAG_LENGTH or not etag.isascii():
        return None
    if not etag.isprintable() or (token and token in etag):
        return None
    return etag


def _request_headers(request: ArtifactRequest) -> dict[str, str]:
    headers = {
        "Accept": "application/x-protobuf, application/protobuf, application/octet-stream;q=0.5",
        "Accept-Encoding": "identity",
        "User-Agent": "ray-operator (RayServeGraph)",
    }
    if request.token is not None:
        if not _is_header_safe(request.token):
            _fail(
                "Unauthorized",
                "the token is not usable as a bearer token (printable ASCII without spaces)",
                retryable=False,
            )
        headers["Authorization"] = f"Bearer {request.token}"
    if request.etag is not None and _is_header_safe(request.etag.replace(" ", "")):
        headers["If-None-Match"] = request.etag
    return headers


async def _ssl_context(ca_bundle: bytes | None) -> ssl.SSLContext:
    """A verifying client context; built in a thread (loading a CA bundle from a Secret, or the
    system's, is CPU work that scales with its size)."""
    if ca_bundle is None:
        return await asyncio.to_thread(ssl.create_default_context)
    try:
        pem = ca_bundle.decode("ascii")
        return await asyncio.to_thread(ssl.create_default_context, cadata=pem)
    except (UnicodeDecodeError, ssl.SSLError, ValueError):
        _fail("TLSError", "the CA bundle is not PEM certificates", retryable=False)


def _tls_message(url: URL, error: Exception) -> str:
    detail = ""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        verify = getattr(error.certificate_error, "verify_message", "")
        # OpenSSL's text about our verification (e.g. "unable to get local issuer
        # certificate"), not the server's: shown when it looks like that.
        if isinstance(verify, str) and verify.isascii() and verify.isprintable():
            detail = f": {verify[:120]}"
    return (
        f"TLS with {_show_origin(url)} failed{detail or ' (handshake)'}; check "
        "spec.source.caBundleSecretRef and the server's certificate"
    )


def _connect_message(url: URL, error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0)
    cause = f" ({name})" if name else ""
    return f"could not connect to {_show_origin(url)}{cause}"


def _dns_message(url: URL, error: OSError) -> str:
    if isinstance(error, LookupTimedOutError):
        return f"no answer for {url.host} from DNS within {RESOLVE_TIMEOUT_SECONDS:g} s"
    return f"could not resolve {url.host}"


def _too_large(max_bytes: int) -> NoReturn:
    _fail(
        "TooLarge",
        f"the document is larger than spec.source.maxBytes ({max_bytes} bytes)",
        retryable=False,
    )


def _fail(reason: str, message: str, *, retryable: bool) -> NoReturn:
    raise ArtifactFetchError(reason, message, retryable=retryable)


def _refuse_opt_in(message: str) -> NoReturn:
    _fail("SecretNotOptedIn", message, retryable=False)


def _origin(url: URL) -> Origin:
    return (url.scheme, origins.canonical_host(url.host or ""), _port(url))


def _origin_of(url: str) -> Origin | None:
    try:
        parsed = URL(url)
    except (ValueError, TypeError):
        return None
    if parsed.scheme not in DEFAULT_PORTS or not parsed.host:
        return None
    return _origin(parsed)


def _port(url: URL) -> int:
    return url.port or DEFAULT_PORTS[url.scheme]


def _is_header_safe(value: str) -> bool:
    return bool(value) and value.isascii() and value.isprintable() and " " not in value


def _show_origin(url: URL) -> str:
    """`host:port` of the URL (the scheme is the reader's to know)."""
    _, host, port = _origin(url)
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}"
