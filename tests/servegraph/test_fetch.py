"""`fetch_artifact` and `check_secret_opt_in` against a real aiohttp server on 127.0.0.1.

The server (tests/servegraph/artifact_server.py) speaks TLS with a certificate from
`ray_operator.pki`, checks the bearer token, answers ETags and plays the hostile modes; every
test reads what the server saw, so "refused before any request" is counted, not assumed.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import traceback
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from ray_operator import pki
from ray_operator.servegraph.fetch import Fetcher, fetch_artifact
from ray_operator.spec.fetch_types import (
    Artifact,
    ArtifactFetchError,
    ArtifactRequest,
    FetchPolicy,
    NotModified,
)
from ray_operator.spec.fetch_urls import check_secret_opt_in
from ray_operator.spec.serve_graph_names import SECRET_GRAPHS_ANNOTATION, SECRET_HOSTS_ANNOTATION

from tests.servegraph.artifact_server import ArtifactServer, StaticResolver
from tests.servegraph.raw_servers import RawServer, closed_port

TOKEN = "tok-7d3e9a1f5b2c4e6a8d0f"
DOCUMENT = b"\n\x08pipeline\x1a\x03pre"
LOOPBACK = FetchPolicy(allow_loopback=True)
_paths = iter(range(1_000_000))


@pytest.fixture(scope="module")
def server() -> Iterator[ArtifactServer]:
    with ArtifactServer.start(tls=True) as running:
        yield running


@pytest.fixture(autouse=True)
async def no_pending_tasks() -> AsyncIterator[None]:
    """A fetch leaves nothing running behind it (resolver lookups, connections)."""
    before = asyncio.all_tasks()
    yield
    for _ in range(3):
        await asyncio.sleep(0)
    leftover = {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()}
    leftover = {t for t in leftover if not t.done()}
    for task in leftover:
        task.cancel()
    assert not leftover, f"tasks left pending: {sorted(t.get_name() for t in leftover)}"


def allowing(*ports: int) -> FetchPolicy:
    """A policy whose admin allow-list names these loopback ports: failures show their cause."""
    return FetchPolicy(
        allowed_hosts=frozenset(f"127.0.0.1:{port}" for port in ports), allow_loopback=True
    )


def new_path(stem: str = "graph") -> str:
    """A path no other test used: the server's request counts are per path."""
    return f"/{stem}-{next(_paths)}.pb"


def request(server: ArtifactServer, path: str, **changes: Any) -> ArtifactRequest:
    fields: dict[str, Any] = {
        "url": server.url(path),
        "token": TOKEN,
        "ca_bundle": server.ca_pem,
        "etag": None,
        "timeout_seconds": 10.0,
        "max_bytes": 1024 * 1024,
        "allow_insecure_http": False,
    }
    fields.update(changes)
    return ArtifactRequest(**fields)


async def refusal(
    fetch_request: ArtifactRequest, *, policy: FetchPolicy = LOOPBACK, **kwargs: Any
) -> ArtifactFetchError:
    with pytest.raises(ArtifactFetchError) as caught:
        await fetch_artifact(fetch_request, policy=policy, **kwargs)
    return caught.value


def everything_shown(error: ArtifactFetchError) -> str:
    """Every text a log line, an Event or a status could take from the exception."""
    return "\n".join(
        [
            str(error),
            repr(error),
            repr(error.args),
            error.reason,
            error.message,
            *traceback.format_exception(error),
        ]
    )


# --- the happy path and conditional GETs ----------------------------------------------------


async def test_a_document_comes_with_its_sha256_digest_etag_and_size(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN, etag='"v1"')

    artifact = await fetch_artifact(request(server, path), policy=LOOPBACK)

    assert isinstance(artifact, Artifact)
    assert artifact.body == DOCUMENT
    assert artifact.digest == "sha256:" + __import__("hashlib").sha256(DOCUMENT).hexdigest()
    assert (artifact.etag, artifact.size, artifact.url) == ('"v1"', len(DOCUMENT), server.url(path))
    assert server.requests(path)[0].authorization == f"Bearer {TOKEN}"


async def test_the_current_etag_costs_one_304_and_gives_not_modified(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN, etag='"v1"')

    outcome = await fetch_artifact(request(server, path, etag='"v1"'), policy=LOOPBACK)

    assert outcome == NotModified(etag='"v1"')
    assert [(r.status, r.if_none_match) for r in server.requests(path)] == [(304, '"v1"')]


async def test_a_stale_etag_gets_the_new_document(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN, etag='"v2"')

    outcome = await fetch_artifact(request(server, path, etag='"v1"'), policy=LOOPBACK)

    assert isinstance(outcome, Artifact)
    assert outcome.etag == '"v2"'


async def test_without_a_token_no_authorization_header_is_sent(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT)

    await fetch_artifact(request(server, path, token=None), policy=LOOPBACK)

    assert server.requests(path)[0].authorization is None


async def test_an_etag_carrying_the_token_is_dropped(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN, etag=f'"{TOKEN}"')

    artifact = await fetch_artifact(request(server, path), policy=LOOPBACK)

    assert isinstance(artifact, Artifact)
    assert artifact.etag is None


# --- HTTP errors: fixed messages, the right reason, retryable only when it may help ----------


@pytest.mark.parametrize(
    ("mode", "reason", "retryable"),
    [
        ("401", "Unauthorized", False),
        ("403", "Forbidden", False),
        ("404", "NotFound", False),
        ("500", "ServerError", True),
        ("503", "ServerError", True),
        ("400", "ServerError", False),
    ],
)
async def test_an_error_status_gets_its_reason_and_a_fixed_message(
    server: ArtifactServer, mode: str, reason: str, retryable: bool
) -> None:
    path = new_path()
    server.serve(path, b"", token=TOKEN, mode=mode)

    error = await refusal(request(server, path))

    assert (error.reason, error.retryable) == (reason, retryable)
    assert "answering" not in everything_shown(error)  # the body is the server's text


async def test_a_wrong_token_is_unauthorized_and_says_the_token_was_refused(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token="another-token")

    error = await refusal(request(server, path))

    assert error.reason == "Unauthorized"
    assert "refused the token" in error.message


async def test_a_missing_token_is_unauthorized_and_names_the_field_to_set(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)

    error = await refusal(request(server, path, token=None))

    assert error.reason == "Unauthorized"
    assert "spec.source.tokenSecretRef" in error.message


@pytest.mark.parametrize("status", [401, 403, 404, 500])
async def test_a_token_echoed_by_the_server_appears_in_no_error_and_no_log(
    server: ArtifactServer, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    path = new_path()
    server.serve(path, b"", mode=f"echo-{status}")
    caplog.set_level(logging.DEBUG)

    error = await refusal(request(server, path))

    assert server.requests(path)[0].authorization == f"Bearer {TOKEN}"  # it was echoed
    assert TOKEN not in everything_shown(error)
    assert TOKEN not in caplog.text
    assert all(TOKEN not in str(record.args) for record in caplog.records)


async def test_the_url_query_and_userinfo_never_reach_a_message(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, b"", token=TOKEN, mode="404")

    error = await refusal(request(server, path, url=server.url(path) + "?sig=query-secret-1"))

    assert error.reason == "NotFound"
    assert "query-secret-1" not in everything_shown(error)


async def test_a_url_with_a_password_is_refused_without_showing_it(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT)
    url = server.url(path).replace("https://", "https://user:pass-word-1@")

    error = await refusal(request(server, path, url=url))

    assert error.reason == "InsecureURL"
    assert "pass-word-1" not in everything_shown(error)
    assert server.request_count(path) == 0


# --- time and size ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["drip", "hang"])
async def test_a_slow_server_is_cut_off_at_the_total_timeout(
    server: ArtifactServer, mode: str
) -> None:
    path = new_path()
    server.serve(path, b"x" * 100, token=TOKEN, mode=mode)  # drip: 1 byte per 0.5 s = 50 s

    started = time.monotonic()
    error = await refusal(request(server, path, timeout_seconds=1.5), policy=allowing(server.port))

    assert (error.reason, error.retryable) == ("Timeout", True)
    assert 1.4 <= time.monotonic() - started < 5.0


@pytest.mark.parametrize("mode", ["ok", "chunked"])  # with and without Content-Length
async def test_a_body_over_max_bytes_is_refused(server: ArtifactServer, mode: str) -> None:
    path = new_path()
    server.serve(path, b"x" * 4097, token=TOKEN, mode=mode)

    error = await refusal(request(server, path, max_bytes=4096))

    assert (error.reason, error.retryable) == ("TooLarge", False)
    assert "4096" in error.message


@pytest.mark.parametrize("mode", ["ok", "chunked"])
async def test_a_body_of_exactly_max_bytes_is_accepted(server: ArtifactServer, mode: str) -> None:
    path = new_path()
    server.serve(path, b"x" * 4096, token=TOKEN, mode=mode)

    artifact = await fetch_artifact(request(server, path, max_bytes=4096), policy=LOOPBACK)

    assert isinstance(artifact, Artifact)
    assert artifact.size == 4096


async def test_an_endless_body_is_refused_while_streaming_in_bounded_memory(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, b"", token=TOKEN, mode="endless")
    max_bytes = 256 * 1024

    tracemalloc.start()
    try:
        error = await refusal(request(server, path, max_bytes=max_bytes))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert error.reason == "TooLarge"
    # The body kept is at most max_bytes + 1; the rest is aiohttp's bounded read buffer (and the
    # server thread's writes, traced too). An unbounded read of an endless body never ends.
    assert peak < 8 * 1024 * 1024


async def test_html_is_the_wrong_content_type(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, b"<html>sign in</html>", token=TOKEN, content_type="text/html")

    error = await refusal(request(server, path))

    assert (error.reason, error.retryable) == ("WrongContentType", False)
    assert "text/html" in error.message


async def test_a_compressed_body_is_refused_rather_than_inflated(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, bytes(10 * 1024 * 1024), token=TOKEN, mode="gzip")  # 10 KiB on the wire

    error = await refusal(request(server, path, max_bytes=1024 * 1024))

    assert (error.reason, error.retryable) == ("WrongContentType", False)


async def test_an_octet_stream_document_is_accepted(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN, content_type="application/octet-stream")

    assert isinstance(await fetch_artifact(request(server, path), policy=LOOPBACK), Artifact)


# --- redirects -------------------------------------------------------------------------------


async def test_a_redirect_to_the_metadata_address_is_refused(server: ArtifactServer) -> None:
    path = new_path()
    location = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
    server.serve(path, b"", token=TOKEN, mode="redirect", location=location)

    started = time.monotonic()
    error = await refusal(request(server, path, timeout_seconds=30))

    assert error.reason in ("RedirectRefused", "AddressRefused")
    assert "169.254" not in error.message or error.reason == "AddressRefused"
    # Refused from the Location alone: a connection attempt there would end in a timeout or
    # ConnectionFailed here, not in a refusal within moments.
    assert time.monotonic() - started < 4


@pytest.mark.parametrize(
    "target",
    [
        "{http}/target",  # another scheme, same host and port
        "{https_by_name}/target",  # another host name of the same server
        "https://127.0.0.1:1/target",  # another port
    ],
)
async def test_a_redirect_to_another_origin_is_refused_and_the_token_never_goes_there(
    server: ArtifactServer, target: str
) -> None:
    path, target_path = new_path(), "/target"
    location = target.format(
        http=f"http://127.0.0.1:{server.port}",
        https_by_name=f"https://localhost:{server.port}",
    )
    server.serve(path, b"", token=TOKEN, mode="redirect", location=location)
    before = server.request_count(target_path)

    error = await refusal(request(server, path))

    assert (error.reason, error.retryable) == ("RedirectRefused", False)
    assert server.request_count(target_path) == before


async def test_same_origin_redirects_are_followed_with_the_token(server: ArtifactServer) -> None:
    first, second, final = new_path(), new_path(), new_path()
    server.serve(first, b"", token=TOKEN, mode="redirect", location=second)  # relative
    server.serve(second, b"", token=TOKEN, mode="redirect", location=server.url(final))
    server.serve(final, DOCUMENT, token=TOKEN)

    artifact = await fetch_artifact(request(server, first), policy=LOOPBACK)

    assert isinstance(artifact, Artifact)
    assert artifact.url == server.url(final)
    assert server.requests(final)[0].authorization == f"Bearer {TOKEN}"


async def test_more_than_max_redirects_are_refused(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, b"", token=TOKEN, mode="redirect", location=path)  # a loop

    error = await refusal(
        request(server, path), policy=FetchPolicy(allow_loopback=True, max_redirects=3)
    )

    assert (error.reason, error.retryable) == ("RedirectRefused", False)
    assert server.request_count(path) == 4  # the request and its 3 allowed redirects


# --- addresses and hosts ---------------------------------------------------------------------


async def test_a_name_resolving_to_a_link_local_address_is_refused(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    resolver = StaticResolver({"registry.test": ["169.254.10.1"]})

    error = await refusal(
        request(server, path, url=server.url(path, host="registry.test")), resolver=resolver
    )

    assert (error.reason, error.retryable) == ("AddressRefused", False)
    assert "registry.test" in error.message
    assert "link-local" in error.message
    assert resolver.lookups == ["registry.test"]


async def test_a_name_with_one_metadata_address_among_good_ones_is_refused(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    resolver = StaticResolver({"registry.test": ["127.0.0.1", "fd00:ec2::254"]})

    error = await refusal(
        request(server, path, url=server.url(path, host="registry.test")), resolver=resolver
    )

    assert error.reason == "AddressRefused"
    assert server.request_count(path) == 0


async def test_a_name_resolving_to_loopback_is_fetched_only_when_loopback_is_allowed(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    resolver = StaticResolver({"registry.test": ["127.0.0.1"]})
    by_name = request(server, path, url=server.url(path, host="registry.test"))

    error = await refusal(by_name, policy=FetchPolicy(), resolver=resolver)
    artifact = await fetch_artifact(by_name, policy=LOOPBACK, resolver=resolver)

    assert error.reason == "AddressRefused"
    assert isinstance(artifact, Artifact)
    assert server.request_count(path) == 1


async def test_a_loopback_address_is_refused_unless_allowed(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)

    error = await refusal(request(server, path), policy=FetchPolicy())

    assert (error.reason, error.retryable) == ("AddressRefused", False)
    assert server.request_count(path) == 0


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",
        "https://[::ffff:169.254.169.254]/x",
        "https://[fd00:ec2::254]/x",
        "https://[fe80::1]/x",
        "https://0.0.0.0/x",
        "https://2130706433/x",
    ],
)
async def test_a_forbidden_ip_literal_is_refused_before_connecting(url: str) -> None:
    fetch_request = ArtifactRequest(
        url=url,
        token=TOKEN,
        ca_bundle=None,
        etag=None,
        timeout_seconds=30,
        max_bytes=1024,
        allow_insecure_http=False,
    )

    started = time.monotonic()
    error = await refusal(fetch_request)

    assert (error.reason, error.retryable) == ("AddressRefused", False)
    assert time.monotonic() - started < 4


async def test_a_host_outside_the_allowed_hosts_is_refused_with_no_request(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    policy = FetchPolicy(allowed_hosts=frozenset({"registry.example.com"}), allow_loopback=True)

    error = await refusal(request(server, path), policy=policy)

    assert (error.reason, error.retryable) == ("HostNotAllowed", False)
    assert server.request_count(path) == 0


async def test_a_host_among_the_allowed_hosts_is_fetched(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    allowed = frozenset({"registry.example.com", f"127.0.0.1:{server.port}"})

    artifact = await fetch_artifact(
        request(server, path), policy=FetchPolicy(allowed_hosts=allowed, allow_loopback=True)
    )

    assert isinstance(artifact, Artifact)


async def test_an_allowed_host_without_port_means_the_default_port(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    policy = FetchPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_loopback=True)

    error = await refusal(request(server, path), policy=policy)  # the server is not on 443

    assert error.reason == "HostNotAllowed"


def to_port(port: int, *, host: str = "127.0.0.1", timeout: float = 1.0) -> ArtifactRequest:
    return ArtifactRequest(
        url=f"https://{host}:{port}/g.pb",
        token=TOKEN,
        ca_bundle=None,
        etag=None,
        timeout_seconds=timeout,
        max_bytes=1024,
        allow_insecure_http=False,
    )


async def test_a_refused_connection_is_retryable_and_says_so_for_an_allowed_host() -> None:
    port = closed_port()

    error = await refusal(to_port(port), policy=allowing(port))

    assert (error.reason, error.retryable) == ("ConnectionFailed", True)
    assert "ECONNREFUSED" in error.message


# --- no port scanner: what a fetch without an HTTP answer tells ------------------------------


def uniform(error: ArtifactFetchError, port: int, host: str = "127.0.0.1") -> tuple[str, str]:
    """The reason and message with the origin the graph named taken out."""
    return error.reason, error.message.replace(f"{host}:{port}", "<origin>")


async def test_closed_open_silent_and_unresolvable_targets_read_alike_without_an_allow_list() -> (
    None
):
    """The four answers a port scan needs to tell apart, told apart by nothing."""
    with RawServer.start("banner") as banner, RawServer.start("silent") as silent:
        closed = closed_port()
        unresolvable = StaticResolver({})  # every name is unknown
        errors = await asyncio.gather(
            refusal(to_port(closed)),
            refusal(to_port(banner.port)),
            refusal(to_port(silent.port)),
            refusal(to_port(443, host="nowhere.test"), resolver=unresolvable),
        )

    shown = {
        uniform(errors[0], closed),
        uniform(errors[1], banner.port),
        uniform(errors[2], silent.port),
        uniform(errors[3], 443, host="nowhere.test"),
    }
    assert len(shown) == 1, shown
    ((reason, message),) = shown
    assert reason == "ConnectionFailed"
    assert all(error.retryable for error in errors)
    for word in ("ECONNREFUSED", "refused", "reset", "TLS", "resolve", "handshake"):
        assert word not in message


async def test_an_unanswered_fetch_is_reported_at_its_deadline_not_before() -> None:
    """A refused connection fails in microseconds; reported at once, its timing would tell a
    closed port from a silent one."""
    started = time.monotonic()
    await refusal(to_port(closed_port(), timeout=1.0))

    assert time.monotonic() - started >= 0.95


@pytest.mark.parametrize(
    ("mode", "reason", "detail"),
    [("banner", "TLSError", "TLS with"), ("silent", "Timeout", "no complete answer")],
)
async def test_an_allowed_host_gets_the_cause_of_its_failure(
    mode: str, reason: str, detail: str
) -> None:
    with RawServer.start(mode) as target:
        error = await refusal(to_port(target.port), policy=allowing(target.port))

    assert (error.reason, error.retryable) == (reason, reason != "TLSError")
    assert detail in error.message


async def test_an_unanswered_fetch_logs_its_cause_for_the_admin(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)

    await refusal(to_port(closed_port(), timeout=0.2))

    assert "ECONNREFUSED" in caplog.text
    assert TOKEN not in caplog.text


# --- the operator's fetcher: bounded, fair ---------------------------------------------------


async def test_the_fetcher_gives_its_slot_back_before_a_failure_waits_out_its_deadline(
    server: ArtifactServer,
) -> None:
    """A refused connection is reported at its deadline (no timing oracle), but the slot it
    held is free at once: waiting out the deadline costs nobody else anything."""
    fetcher = Fetcher(FetchPolicy(allow_loopback=True, max_concurrent_fetches=1))
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    failing = asyncio.create_task(fetcher.fetch(to_port(closed_port(), timeout=3), namespace="a"))
    await asyncio.sleep(0.3)

    started = time.monotonic()
    artifact = await fetcher.fetch(request(server, path), namespace="b")

    assert isinstance(artifact, Artifact)
    assert time.monotonic() - started < 2
    assert not failing.done()
    with pytest.raises(ArtifactFetchError):
        await failing


async def test_the_fetcher_never_runs_more_fetches_than_its_caps(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, b"", token=TOKEN, mode="hang")
    fetcher = Fetcher(
        FetchPolicy(
            allow_loopback=True, max_concurrent_fetches=3, max_concurrent_fetches_per_namespace=2
        )
    )
    fetches = [
        asyncio.create_task(
            fetcher.fetch(request(server, path, timeout_seconds=1.0), namespace=namespace)
        )
        for namespace in ("a", "a", "a", "b", "b", "c")
    ]
    await asyncio.sleep(0.5)

    assert (fetcher.slots.in_use, server.request_count(path)) == (3, 3)
    assert fetcher.slots.held_by("a") <= 2
    await asyncio.gather(*fetches, return_exceptions=True)
    assert server.request_count(path) == 6


# --- http and TLS ----------------------------------------------------------------------------


async def test_http_is_refused_unless_insecure_http_is_allowed() -> None:
    with ArtifactServer.start(tls=False) as plain:
        path = new_path()
        plain.serve(path, DOCUMENT, token=TOKEN)

        error = await refusal(request(plain, path, ca_bundle=None))
        artifact = await fetch_artifact(
            request(plain, path, ca_bundle=None, allow_insecure_http=True), policy=LOOPBACK
        )

    assert (error.reason, error.retryable) == ("InsecureURL", False)
    assert isinstance(artifact, Artifact)
    assert plain.request_count(path) == 1


async def test_a_server_signed_by_an_unknown_ca_is_a_tls_error(server: ArtifactServer) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)
    other_ca = pki.create_ca("someone-else", valid_for=datetime.timedelta(hours=1))

    with_system_store = await refusal(request(server, path, ca_bundle=None))
    with_another_ca = await refusal(request(server, path, ca_bundle=other_ca.cert_pem))

    assert (with_system_store.reason, with_another_ca.reason) == ("TLSError", "TLSError")
    assert server.request_count(path) == 0  # the token was never sent


async def test_a_ca_bundle_that_is_not_pem_is_a_tls_error(server: ArtifactServer) -> None:
    error = await refusal(request(server, new_path(), ca_bundle=b"\xffnot a certificate"))

    assert (error.reason, error.retryable) == ("TLSError", False)


async def test_a_token_that_cannot_be_a_header_is_refused_before_any_request(
    server: ArtifactServer,
) -> None:
    path = new_path()
    server.serve(path, DOCUMENT, token=TOKEN)

    error = await refusal(request(server, path, token=f"{TOKEN}\r\nX-Injected: 1"))

    assert error.reason == "Unauthorized"
    assert TOKEN not in everything_shown(error)
    assert server.request_count(path) == 0


# --- the Secret's opt-in ---------------------------------------------------------------------


def secret(annotations: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "registry-token"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "data": {"token": "dG9rLTdkM2U5YTFm"}}


@pytest.mark.parametrize(
    ("hosts", "url"),
    [
        ("registry.example.com", "https://registry.example.com/g.pb"),
        ("registry.example.com:443", "https://registry.example.com/g.pb"),
        ("registry.example.com", "https://registry.example.com:443/g.pb"),
        ("ci.example.com:8443, registry.example.com", "https://registry.example.com/g.pb"),
        ("REGISTRY.example.com.", "https://registry.example.com/g.pb"),
        ("ci.example.com:8443", "https://ci.example.com:8443/g.pb?x=1"),
        ("https://registry.example.com", "https://registry.example.com/g.pb"),
        ("HTTPS://registry.example.com:443/", "https://registry.example.com/g.pb"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765/graph.pb"),
        ("http://registry.example.com", "http://registry.example.com:80/g.pb"),
        ("[::1]:8443", "https://[::1]:8443/g.pb"),
        ("[fd00::1]", "https://[fd00:0::1]/g.pb"),
        ("http://[fd00::1]:8080", "http://[fd00::1]:8080/g.pb"),
    ],
)
def test_a_secret_opted_in_for_the_urls_host_and_port_may_be_used(hosts: str, url: str) -> None:
    check_secret_opt_in(secret({SECRET_HOSTS_ANNOTATION: hosts}), url=url, graph_name="pipeline")


@pytest.mark.parametrize(
    ("annotations", "url"),
    [
        (None, "https://registry.example.com/g.pb"),
        ({}, "https://registry.example.com/g.pb"),
        ({SECRET_HOSTS_ANNOTATION: ""}, "https://registry.example.com/g.pb"),
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com"}, "https://attacker.example/g.pb"),
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com"}, "https://registry.example.com:8443/"),
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com:8443"}, "https://registry.example.com/"),
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com"}, "https://registry.example.com.evil/"),
        ({SECRET_HOSTS_ANNOTATION: "example.com"}, "https://registry.example.com/g.pb"),
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com"}, "ftp://registry.example.com/g.pb"),
        # Without a scheme an entry means https: never clear text, on any port.
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com"}, "http://registry.example.com/g.pb"),
        ({SECRET_HOSTS_ANNOTATION: "127.0.0.1:8765"}, "http://127.0.0.1:8765/graph.pb"),
        ({SECRET_HOSTS_ANNOTATION: "https://127.0.0.1:8765"}, "http://127.0.0.1:8765/g.pb"),
        ({SECRET_HOSTS_ANNOTATION: "http://127.0.0.1:8765"}, "https://127.0.0.1:8765/g.pb"),
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com:80"}, "http://registry.example.com/"),
        ({SECRET_HOSTS_ANNOTATION: "ftp://registry.example.com"}, "https://registry.example.com"),
        ({SECRET_HOSTS_ANNOTATION: "registry.example.com/g.pb"}, "https://registry.example.com/"),
    ],
)
def test_a_secret_not_opted_in_for_the_host_is_refused(
    annotations: dict[str, str] | None, url: str
) -> None:
    with pytest.raises(ArtifactFetchError) as caught:
        check_secret_opt_in(secret(annotations), url=url, graph_name="pipeline")

    assert (caught.value.reason, caught.value.retryable) == ("SecretNotOptedIn", False)
    assert "registry-token" in caught.value.message


def test_a_secret_opted_in_for_https_only_says_how_to_allow_clear_text() -> None:
    with pytest.raises(ArtifactFetchError) as caught:
        check_secret_opt_in(
            secret({SECRET_HOSTS_ANNOTATION: "127.0.0.1:8765"}),
            url="http://127.0.0.1:8765/graph.pb",
            graph_name="pipeline",
        )

    assert "https only" in caught.value.message
    assert f"add http://127.0.0.1:8765 to its {SECRET_HOSTS_ANNOTATION}" in caught.value.message


def test_a_secret_listing_graphs_serves_only_those_graphs() -> None:
    annotations = {
        SECRET_HOSTS_ANNOTATION: "registry.example.com",
        SECRET_GRAPHS_ANNOTATION: "pipeline, other",
    }
    url = "https://registry.example.com/g.pb"

    check_secret_opt_in(secret(annotations), url=url, graph_name="pipeline")
    with pytest.raises(ArtifactFetchError) as caught:
        check_secret_opt_in(secret(annotations), url=url, graph_name="intruder")

    assert caught.value.reason == "SecretNotOptedIn"
    assert "intruder" in caught.value.message
    assert SECRET_GRAPHS_ANNOTATION in caught.value.message


def test_an_opt_in_refusal_never_shows_the_urls_userinfo_or_query() -> None:
    with pytest.raises(ArtifactFetchError) as caught:
        check_secret_opt_in(
            secret({SECRET_HOSTS_ANNOTATION: "registry.example.com"}),
            url="https://user:pw-secret@attacker.example/g.pb?sig=q-secret",
            graph_name="pipeline",
        )

    shown = everything_shown(caught.value)
    assert "pw-secret" not in shown
    assert "q-secret" not in shown
    assert "attacker.example:443" in caught.value.message
