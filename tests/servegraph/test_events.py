"""Specification: the RayServeGraph event endpoint refuses whoever cannot prove the object's
shared secret (401 without credentials, before any lookup; 403 with wrong ones), answers 404 for
objects it does not know, takes a bearer token, a signature over the time, the object and the
body, or a signed CloudEvent — each signature once and within five minutes (403 stale, 409
replayed; a body-only signature is refused on the refresh route) — and turns a burst of events
into one annotation patch.

The HTTP tests run the real endpoint (`ServeGraphEvents`) on loopback against the real API
server; the pure parts (credentials, CloudEvents, coalescing) are tested on their own first.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from ray_operator.app import Operator
from ray_operator.cli import _build_parser, components_for
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.runtime.errors import NotFound
from ray_operator.servegraph.event_coalescing import (
    RefreshCoalescer,
    SecretCache,
    refresh_timestamp,
)
from ray_operator.servegraph.event_requests import (
    CloudEventReference,
    Credentials,
    RefusedError,
    cloudevent_credentials,
    presents_credentials,
    read_cloudevent,
    refresh_credentials,
    refresh_secret_value,
    verify,
)
from ray_operator.servegraph.events import RefreshEndpoint, ServeGraphEvents
from ray_operator.servegraph.signatures import (
    BODY_SIGNATURE_HEADER,
    GITHUB_BODY_SIGNATURE_HEADER,
    REFRESH_SIGNATURE_HEADER,
    sign_body,
    sign_refresh,
)
from ray_operator.settings import Settings, settings_from_args
from ray_operator.spec.kinds import RAY_SERVE_GRAPH, SECRET
from ray_operator.spec.serve_graph_names import (
    REFRESH_REQUESTED_ANNOTATION,
    SECRET_GRAPHS_ANNOTATION,
)
from ray_operator.webhooks import WebhookOptions

from tests.controllers.conftest import eventually
from tests.servegraph.refresh_hooks import GRAPH, SECRET_VALUE, graph_manifest, hook_secret
from tests.webhooks.server import free_port

# --- credentials ------------------------------------------------------------------------------


def refresh_headers(
    *, namespace: str = "ns1", name: str = GRAPH, body: bytes = b"", at: int | None = None
) -> dict[str, str]:
    """A correctly signed refresh request's headers (signed now unless `at` says when)."""
    moment = int(time.time()) if at is None else at
    value = sign_refresh(SECRET_VALUE, namespace=namespace, name=name, body=body, at=moment)
    return {REFRESH_SIGNATURE_HEADER: value}


def test_no_usable_credentials_is_401() -> None:
    for headers in (
        {},
        {"Authorization": "Basic dXNlcjpwdw=="},
        {"Authorization": "Bearer "},
        {REFRESH_SIGNATURE_HEADER: "t=1,v1=not-hex"},
        {BODY_SIGNATURE_HEADER: "sha1=" + "0" * 40},
    ):
        assert not presents_credentials(headers)
        with pytest.raises(RefusedError) as refused:
            refresh_credentials(headers, namespace="ns1", name=GRAPH, body=b"")
        assert refused.value.status == 401


def test_a_bearer_token_verifies_only_against_its_secret() -> None:
    credentials = refresh_credentials(bearer(), namespace="ns1", name=GRAPH, body=b"")
    assert verify(credentials, secret=SECRET_VALUE)
    assert not verify(credentials, secret=SECRET_VALUE + b"x")
    assert SECRET_VALUE.decode() not in repr(credentials)


def test_a_refresh_signature_verifies_only_for_its_object_and_body() -> None:
    headers = refresh_headers(body=b'{"model": "v2"}')
    credentials = refresh_credentials(headers, namespace="ns1", name=GRAPH, body=b'{"model": "v2"}')
    assert verify(credentials, secret=SECRET_VALUE)
    for namespace, name, body in (("ns2", GRAPH, b'{"model": "v2"}'), ("ns1", GRAPH, b"{}")):
        moved = refresh_credentials(headers, namespace=namespace, name=name, body=body)
        assert not verify(moved, secret=SECRET_VALUE)


def test_a_body_only_signature_is_refused_on_the_refresh_route_saying_why() -> None:
    # GitHub's scheme signs the body alone: a captured request would verify forever.
    body = b'{"ref": "refs/heads/main"}'
    for header in (BODY_SIGNATURE_HEADER, GITHUB_BODY_SIGNATURE_HEADER):
        headers = {header: sign_body(body, secret=SECRET_VALUE)}
        assert presents_credentials(headers)  # a credential, just not one this route takes
        with pytest.raises(RefusedError) as refused:
            refresh_credentials(headers, namespace="ns1", name=GRAPH, body=body)
        assert refused.value.status == 401
        assert REFRESH_SIGNATURE_HEADER in refused.value.text


def test_every_credential_presented_must_verify() -> None:
    headers = {"Authorization": "Bearer wrong", **refresh_headers()}
    credentials = refresh_credentials(headers, namespace="ns1", name=GRAPH, body=b"")
    assert not verify(credentials, secret=SECRET_VALUE)


def test_an_empty_secret_never_verifies() -> None:
    assert not verify(Credentials(bearer=b""), secret=b"")


def test_the_secret_must_opt_in_for_the_graph() -> None:
    def secret(annotations: dict[str, str], value: bytes = SECRET_VALUE) -> dict[str, Any]:
        return {
            "metadata": {"annotations": annotations},
            "data": {"secret": base64.b64encode(value).decode()},
        }

    opted_in = secret({SECRET_GRAPHS_ANNOTATION: f"other, {GRAPH}"})
    assert refresh_secret_value(opted_in, key="secret", graph_name=GRAPH) == SECRET_VALUE
    for unusable in (
        secret({}),
        secret({SECRET_GRAPHS_ANNOTATION: "other"}),
        secret({SECRET_GRAPHS_ANNOTATION: GRAPH}, value=b"  \n"),
    ):
        with pytest.raises(RefusedError) as refused:
            refresh_secret_value(unusable, key="secret", graph_name=GRAPH)
        assert refused.value.status == 403
    with pytest.raises(RefusedError):
        refresh_secret_value(opted_in, key="missing", graph_name=GRAPH)


def test_a_trailing_newline_of_the_secret_is_ignored() -> None:
    secret = {
        "metadata": {"annotations": {SECRET_GRAPHS_ANNOTATION: GRAPH}},
        "data": {"secret": base64.b64encode(SECRET_VALUE + b"\n").decode()},
    }
    assert refresh_secret_value(secret, key="secret", graph_name=GRAPH) == SECRET_VALUE


def test_refresh_timestamps_are_utc_with_microseconds() -> None:
    moment = datetime.datetime(2026, 11, 23, 22, 0, 0, 123456, tzinfo=datetime.UTC)
    assert refresh_timestamp(moment) == "2026-11-23T22:00:00.123456Z"


# --- CloudEvents --------------------------------------------------------------------------------


def cloudevent(
    subject: str = f"namespaces/ns1/rayservegraphs/{GRAPH}",
    *,
    at: float | None = None,
    **extra: Any,
) -> bytes:
    """A CloudEvent naming the graph, its `time` now (or `at`, Unix seconds)."""
    moment = datetime.datetime.fromtimestamp(time.time() if at is None else at, datetime.UTC)
    event = {
        "specversion": "1.0",
        "id": "e-1",
        "source": "https://ci.example.com",
        "type": "com.example.model.published",
        "subject": subject,
        "time": moment.isoformat().replace("+00:00", "Z"),
        **extra,
    }
    return json.dumps(event).encode()


def test_a_cloudevent_names_the_object_in_its_subject_and_its_time() -> None:
    event = read_cloudevent(cloudevent(data={"digest": "sha256:..."}, at=1_789_992_000))
    assert event == CloudEventReference("ns1", GRAPH, 1_789_992_000)
    assert read_cloudevent(_without_time()).signed_at is None


def _without_time() -> bytes:
    event = json.loads(cloudevent())
    del event["time"]
    return json.dumps(event).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b"[" * 100_000,
        json.dumps({"specversion": "0.3", "id": "1", "source": "s", "type": "t"}).encode(),
        cloudevent(subject="rayservegraphs/pipeline"),
        cloudevent(subject="namespaces/ns1/rayservices/pipeline"),
        cloudevent(id=""),
        cloudevent(time="yesterday"),
        cloudevent(time="2026-09-21"),
    ],
)
def test_what_is_not_a_cloudevent_naming_a_rayservegraph_is_a_400(body: bytes) -> None:
    with pytest.raises(RefusedError) as refused:
        read_cloudevent(body)
    assert refused.value.status == 400


def test_a_body_signed_cloudevent_takes_its_time_from_the_event() -> None:
    body = cloudevent(at=1_789_992_000)
    for header in (BODY_SIGNATURE_HEADER, GITHUB_BODY_SIGNATURE_HEADER):
        credentials = cloudevent_credentials(
            {header: sign_body(body, secret=SECRET_VALUE)}, event=read_cloudevent(body), body=body
        )
        assert credentials.signature is not None
        assert credentials.signature.signed_at == 1_789_992_000
        assert verify(credentials, secret=SECRET_VALUE)


def test_a_body_signed_cloudevent_without_time_is_a_400() -> None:
    body = _without_time()
    headers = {BODY_SIGNATURE_HEADER: sign_body(body, secret=SECRET_VALUE)}
    with pytest.raises(RefusedError) as refused:
        cloudevent_credentials(headers, event=read_cloudevent(body), body=body)
    assert refused.value.status == 400
    assert '"time"' in refused.value.text


def test_a_cloudevent_may_carry_the_refresh_signature_of_its_subject_but_not_two() -> None:
    body = _without_time()  # the header's t= is the time then
    event = read_cloudevent(body)
    headers = refresh_headers(body=body)
    assert verify(cloudevent_credentials(headers, event=event, body=body), secret=SECRET_VALUE)
    both = {**headers, BODY_SIGNATURE_HEADER: sign_body(body, secret=SECRET_VALUE)}
    with pytest.raises(RefusedError) as refused:
        cloudevent_credentials(both, event=event, body=body)
    assert refused.value.status == 400


# --- coalescing -------------------------------------------------------------------------------


async def test_a_burst_within_the_window_is_one_patch_with_one_answer() -> None:
    patched: list[tuple[str, str, str]] = []

    async def patch(namespace: str, name: str, stamp: str) -> None:
        patched.append((namespace, name, stamp))

    coalescer = RefreshCoalescer(patch, window=0.2)
    answers = await asyncio.gather(*(coalescer.request("ns1", GRAPH) for _ in range(50)))
    assert len(patched) == 1
    assert set(answers) == {patched[0][2]}


async def test_a_request_after_the_window_closed_gets_a_patch_of_its_own() -> None:
    patched: list[str] = []
    patch_started = asyncio.Event()
    release = asyncio.Event()

    async def patch(namespace: str, name: str, stamp: str) -> None:
        patched.append(stamp)
        patch_started.set()
        await release.wait()

    coalescer = RefreshCoalescer(patch, window=0.05)
    first = asyncio.create_task(coalescer.request("ns1", GRAPH))
    await patch_started.wait()
    # The first patch is in flight: a newer event must not be folded into it.
    second = asyncio.create_task(coalescer.request("ns1", GRAPH))
    release.set()
    await asyncio.gather(first, second)
    assert len(patched) == 2


async def test_objects_are_coalesced_separately() -> None:
    patched: list[str] = []

    async def patch(namespace: str, name: str, stamp: str) -> None:
        patched.append(name)

    coalescer = RefreshCoalescer(patch, window=0.05)
    await asyncio.gather(coalescer.request("ns1", "a"), coalescer.request("ns1", "b"))
    assert sorted(patched) == ["a", "b"]


async def test_a_caller_that_goes_away_does_not_cancel_the_patch_of_the_others() -> None:
    patched: list[str] = []

    async def patch(namespace: str, name: str, stamp: str) -> None:
        patched.append(stamp)

    coalescer = RefreshCoalescer(patch, window=0.1)
    leaving = asyncio.create_task(coalescer.request("ns1", GRAPH))
    staying = asyncio.create_task(coalescer.request("ns1", GRAPH))
    await asyncio.sleep(0)
    leaving.cancel()
    assert await staying == patched[0]


async def test_a_failed_patch_is_every_waiters_error() -> None:
    async def patch(namespace: str, name: str, stamp: str) -> None:
        raise NotFound("gone", status=404, reason="NotFound")

    coalescer = RefreshCoalescer(patch, window=0.01)
    results = await asyncio.gather(
        *(coalescer.request("ns1", GRAPH) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(result, NotFound) for result in results)


async def test_a_burst_reads_the_secret_once() -> None:
    reads = 0

    async def read(namespace: str, name: str) -> dict[str, Any]:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        return {"metadata": {"name": name}}

    cache = SecretCache(read, ttl=60)
    await asyncio.gather(*(cache.get("ns1", "hook") for _ in range(20)))
    assert reads == 1


async def test_a_failed_secret_read_is_not_remembered() -> None:
    reads = 0

    async def read(namespace: str, name: str) -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads == 1:
            raise NotFound("no secret", status=404, reason="NotFound")
        return {}

    cache = SecretCache(read, ttl=60)
    with pytest.raises(NotFound):
        await cache.get("ns1", "hook")
    assert await cache.get("ns1", "hook") == {}


# --- the endpoint on the real API server ------------------------------------------------------


@dataclass
class Endpoint:
    """The running endpoint, an admin client and the test's namespace."""

    events: ServeGraphEvents
    client: KubeClient
    namespace: str
    session: aiohttp.ClientSession

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.events.port}/apis/ray-operator.io/v1alpha1"

    def refresh_url(self, name: str = GRAPH, namespace: str | None = None) -> str:
        return f"{self.base}/namespaces/{namespace or self.namespace}/rayservegraphs/{name}/refresh"

    async def post(
        self, url: str, *, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        async with self.session.post(url, data=body, headers=headers or {}) as response:
            return response.status, await response.text()

    async def annotation(self, name: str = GRAPH) -> str | None:
        graph = await self.client.get(RAY_SERVE_GRAPH, name, namespace=self.namespace)
        value: str | None = (graph["metadata"].get("annotations") or {}).get(
            REFRESH_REQUESTED_ANNOTATION
        )
        return value


def bearer(value: bytes = SECRET_VALUE) -> dict[str, str]:
    return {"Authorization": f"Bearer {value.decode()}"}


@pytest.fixture
async def endpoint(control_plane: LocalControlPlane, namespace: str) -> AsyncIterator[Endpoint]:
    """The event endpoint on loopback, a RayServeGraph `pipeline` with `spec.refresh`, and its
    opted-in Secret."""
    client = KubeClient(await load_api_client(control_plane.kubeconfig), metrics=Metrics())
    await client.create(SECRET, hook_secret(), namespace=namespace)
    await client.create(RAY_SERVE_GRAPH, graph_manifest(GRAPH), namespace=namespace)
    events = ServeGraphEvents(client=client, host="127.0.0.1", port=0, coalesce_seconds=0.5)
    task = asyncio.create_task(events.run(), name="serve-graph-events-under-test")
    await asyncio.wait_for(events.listening.wait(), timeout=10)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    try:
        yield Endpoint(events=events, client=client, namespace=namespace, session=session)
    finally:
        await session.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def test_no_credentials_is_401_whether_or_not_the_object_exists(endpoint: Endpoint) -> None:
    for url in (endpoint.refresh_url(), endpoint.refresh_url("no-such-graph")):
        async with endpoint.session.post(url) as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert await endpoint.annotation() is None


async def test_a_wrong_bearer_token_is_403_and_changes_nothing(endpoint: Endpoint) -> None:
    status, text = await endpoint.post(endpoint.refresh_url(), headers=bearer(b"guess"))
    assert (status, text) == (403, "forbidden\n")
    assert await endpoint.annotation() is None


async def test_a_forged_signature_is_403(endpoint: Endpoint) -> None:
    body = b'{"reason": "new model"}'
    now = int(time.time())
    namespace = endpoint.namespace
    for value in (
        sign_refresh(b"guess", namespace=namespace, name=GRAPH, body=body, at=now),
        sign_refresh(SECRET_VALUE, namespace=namespace, name=GRAPH, body=b"other", at=now),
        sign_refresh(SECRET_VALUE, namespace=namespace, name="other", body=body, at=now),
    ):
        status, _ = await endpoint.post(
            endpoint.refresh_url(), body=body, headers={REFRESH_SIGNATURE_HEADER: value}
        )
        assert status == 403
    assert await endpoint.annotation() is None


async def test_an_unknown_object_is_404(endpoint: Endpoint) -> None:
    for url in (
        endpoint.refresh_url("no-such-graph"),
        endpoint.refresh_url(namespace="no-such-namespace"),
        endpoint.refresh_url("Not_A_Name"),
    ):
        status, _ = await endpoint.post(url, headers=bearer())
        assert status == 404


async def test_a_graph_without_spec_refresh_is_404(endpoint: Endpoint) -> None:
    await endpoint.client.create(
        RAY_SERVE_GRAPH, graph_manifest("polled-only", refresh=False), namespace=endpoint.namespace
    )
    status, _ = await endpoint.post(endpoint.refresh_url("polled-only"), headers=bearer())
    assert status == 404


async def test_a_secret_that_did_not_opt_in_for_the_graph_is_403(endpoint: Endpoint) -> None:
    # A RayServeGraph pointing spec.refresh at some Secret of its namespace must not turn the
    # endpoint into an oracle for that Secret's value.
    other = graph_manifest("borrower")
    await endpoint.client.create(RAY_SERVE_GRAPH, other, namespace=endpoint.namespace)
    status, _ = await endpoint.post(endpoint.refresh_url("borrower"), headers=bearer())
    assert status == 403
    assert await endpoint.annotation("borrower") is None


async def test_the_right_bearer_token_requests_a_refresh(endpoint: Endpoint) -> None:
    status, text = await endpoint.post(endpoint.refresh_url(), headers=bearer())
    assert status == 202
    assert await endpoint.annotation() == json.loads(text)["refreshRequestedAt"]


async def test_a_valid_signature_requests_a_refresh(endpoint: Endpoint) -> None:
    body = b'{"model": "v2"}'
    headers = refresh_headers(namespace=endpoint.namespace, body=body)
    status, text = await endpoint.post(endpoint.refresh_url(), body=body, headers=headers)
    assert status == 202
    assert await endpoint.annotation() == json.loads(text)["refreshRequestedAt"]


async def test_a_replayed_signature_is_409_and_changes_nothing(endpoint: Endpoint) -> None:
    headers = refresh_headers(namespace=endpoint.namespace)
    status, _ = await endpoint.post(endpoint.refresh_url(), headers=headers)
    assert status == 202
    stamp = await endpoint.annotation()
    status, text = await endpoint.post(endpoint.refresh_url(), headers=headers)
    assert status == 409, text
    assert await endpoint.annotation() == stamp
    assert endpoint.events.endpoint.coalescer.patches == 1


async def test_a_signature_outside_the_window_is_403_before_any_lookup(endpoint: Endpoint) -> None:
    now = int(time.time())
    for at in (now - 301 - 5, now + 301 + 5):  # 5 s of margin for the test's own pace
        for name in (GRAPH, "no-such-graph"):  # decided before the lookup: never a 404
            headers = refresh_headers(namespace=endpoint.namespace, name=name, at=at)
            status, text = await endpoint.post(endpoint.refresh_url(name), headers=headers)
            assert status == 403, text
            assert "clock" in text
    assert await endpoint.annotation() is None


async def test_a_body_only_signature_on_the_refresh_route_is_401(endpoint: Endpoint) -> None:
    body = b'{"ref": "refs/heads/main"}'
    headers = {GITHUB_BODY_SIGNATURE_HEADER: sign_body(body, secret=SECRET_VALUE)}
    status, text = await endpoint.post(endpoint.refresh_url(), body=body, headers=headers)
    assert status == 401
    assert REFRESH_SIGNATURE_HEADER in text
    assert await endpoint.annotation() is None


async def test_a_request_that_failed_after_its_signature_was_admitted_may_be_retried(
    endpoint: Endpoint,
) -> None:
    # The graph vanishes between the lookup and the patch: 404, and the same signed request
    # may be sent again (it is no replay: nothing was recorded).
    async def stale_lookup(namespace: str, name: str) -> dict[str, Any]:
        return graph_manifest(name)

    opted_in = {"metadata": {"annotations": {SECRET_GRAPHS_ANNOTATION: f"{GRAPH},vanished"}}}
    await endpoint.client.patch(SECRET, "graph-hook", opted_in, namespace=endpoint.namespace)
    refresh = RefreshEndpoint(endpoint.client, lookup=stale_lookup, coalesce_seconds=0.01)
    credentials = refresh_credentials(
        refresh_headers(namespace=endpoint.namespace, name="vanished"),
        namespace=endpoint.namespace,
        name="vanished",
        body=b"",
    )
    try:
        for _ in range(2):
            with pytest.raises(RefusedError) as refused:
                await refresh.refresh(endpoint.namespace, "vanished", credentials=credentials)
            assert refused.value.status == 404
        assert len(refresh.replays) == 0
    finally:
        await refresh.close()


async def test_a_signed_cloudevent_naming_the_object_requests_a_refresh(endpoint: Endpoint) -> None:
    body = cloudevent(subject=f"namespaces/{endpoint.namespace}/rayservegraphs/{GRAPH}")
    headers = {
        "Content-Type": "application/cloudevents+json",
        BODY_SIGNATURE_HEADER: sign_body(body, secret=SECRET_VALUE),
    }
    status, text = await endpoint.post(f"{endpoint.base}/events", body=body, headers=headers)
    assert status == 202
    assert await endpoint.annotation() == json.loads(text)["refreshRequestedAt"]
    status, _ = await endpoint.post(f"{endpoint.base}/events", body=body, headers=headers)
    assert status == 409


async def test_a_stale_signed_cloudevent_is_403(endpoint: Endpoint) -> None:
    subject = f"namespaces/{endpoint.namespace}/rayservegraphs/{GRAPH}"
    body = cloudevent(subject=subject, at=time.time() - 3600)
    headers = {
        "Content-Type": "application/cloudevents+json",
        BODY_SIGNATURE_HEADER: sign_body(body, secret=SECRET_VALUE),
    }
    status, _ = await endpoint.post(f"{endpoint.base}/events", body=body, headers=headers)
    assert status == 403
    assert await endpoint.annotation() is None


async def test_a_cloudevent_without_credentials_is_401_before_it_is_read(
    endpoint: Endpoint,
) -> None:
    headers = {"Content-Type": "application/cloudevents+json"}
    status, _ = await endpoint.post(f"{endpoint.base}/events", body=b"garbage", headers=headers)
    assert status == 401


async def test_a_burst_of_events_is_one_patch(endpoint: Endpoint) -> None:
    answers = await asyncio.gather(
        *(endpoint.post(endpoint.refresh_url(), headers=bearer()) for _ in range(20))
    )
    assert {status for status, _ in answers} == {202}
    stamps = {json.loads(text)["refreshRequestedAt"] for _, text in answers}
    assert len(stamps) == 1
    assert endpoint.events.endpoint.coalescer.patches == 1
    assert await endpoint.annotation() == stamps.pop()


async def test_oversized_and_malformed_bodies_are_refused_and_the_server_keeps_serving(
    endpoint: Endpoint,
) -> None:
    events_url = f"{endpoint.base}/events"
    json_headers = {"Content-Type": "application/cloudevents+json", **bearer()}
    huge = b"x" * (64 * 1024 + 1)
    assert (await endpoint.post(endpoint.refresh_url(), body=huge, headers=bearer()))[0] == 413
    assert (await endpoint.post(events_url, body=huge, headers=json_headers))[0] == 413
    assert (await endpoint.post(events_url, body=b"[" * 60_000, headers=json_headers))[0] == 400
    assert (await endpoint.post(events_url, body=b"\xff\xfe", headers=json_headers))[0] == 400
    text_headers = {"Content-Type": "text/plain", **bearer()}
    assert (await endpoint.post(events_url, body=cloudevent(), headers=text_headers))[0] == 415
    status, _ = await endpoint.post(endpoint.refresh_url(), headers=bearer())
    assert status == 202


# --- wiring: flags, component, a running operator ---------------------------------------------


def run_flags(*argv: str) -> Settings:
    return settings_from_args(_build_parser().parse_args(["run", *argv]))


def test_the_endpoint_is_off_by_default_and_listens_on_loopback_when_on() -> None:
    settings = run_flags()
    assert settings.serve_graph_events_port == 0
    assert components_for(settings, WebhookOptions(enabled=False)) == []
    settings = run_flags("--serve-graph-events-port", "8090")
    assert settings.serve_graph_events_address == "127.0.0.1"
    assert len(components_for(settings, WebhookOptions(enabled=False))) == 1


def test_fetch_flags_have_env_twins_and_the_command_line_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_OPERATOR_SERVE_GRAPH_ALLOWED_HOSTS", "Registry.Example.com,ci:8443")
    monkeypatch.setenv("RAY_OPERATOR_SERVE_GRAPH_ALLOW_LOOPBACK", "true")
    settings = run_flags()
    assert settings.serve_graph_allowed_hosts == ("registry.example.com", "ci:8443")
    assert settings.serve_graph_allow_loopback is True
    settings = run_flags(
        "--serve-graph-allowed-hosts", "a.example", "--no-serve-graph-allow-loopback"
    )
    assert settings.serve_graph_allowed_hosts == ("a.example",)
    assert settings.serve_graph_allow_loopback is False


async def test_a_running_operator_serves_the_endpoint_as_a_root_task(
    control_plane: LocalControlPlane, namespace: str
) -> None:
    port = free_port()
    settings = Settings(
        kubeconfig=control_plane.kubeconfig,
        namespaces=(namespace,),
        leader_elect=False,
        health_addr="127.0.0.1:0",
        metrics_addr="127.0.0.1:0",
        serve_graph_events_port=port,
    )
    api = await load_api_client(control_plane.kubeconfig)
    replica = Operator(
        settings, api=api, components=components_for(settings, WebhookOptions(enabled=False))
    )
    [component] = replica.components
    assert isinstance(component, ServeGraphEvents)
    stop = asyncio.Event()
    task = asyncio.create_task(replica.run(stop), name="operator-with-events")
    try:
        await asyncio.wait_for(component.listening.wait(), timeout=30)
        url = (
            f"http://127.0.0.1:{port}/apis/ray-operator.io/v1alpha1/namespaces/{namespace}"
            f"/rayservegraphs/{GRAPH}/refresh"
        )
        async with aiohttp.ClientSession() as session:
            async with session.post(url) as response:
                assert response.status == 401
            async with session.post(url, headers=bearer()) as response:
                assert response.status == 404  # watched namespace, no such graph
    finally:
        stop.set()
        assert await asyncio.wait_for(task, timeout=30) == 0
        await api.close()


# --- end to end: a burst of events costs one fetch --------------------------------------------


async def test_a_burst_of_events_costs_one_fetch_at_the_registry(
    control_plane: LocalControlPlane, namespace: str
) -> None:
    # Imported here: the controller and the fetcher are other modules' work (issue 14).
    from ray_operator.controllers.rayservegraph import rayservegraph_controller
    from ray_operator.spec.fetch_types import FetchPolicy

    from tests.servegraph.artifact_server import ArtifactServer
    from tests.servegraph.graphs import document, pipeline_graph

    token = "registry-token-value"
    with ArtifactServer.start(tls=True) as registry:
        registry.serve("/graph.pb", document(pipeline_graph()), token=token)
        client = KubeClient(await load_api_client(control_plane.kubeconfig), metrics=Metrics())
        host = registry.url("/graph.pb").split("/")[2]
        await create_registry_secrets(client, namespace, host=host, token=token, ca=registry.ca_pem)
        graph = graph_manifest(GRAPH)
        graph["spec"]["source"] = {
            "url": registry.url("/graph.pb"),
            "tokenSecretRef": {"name": "registry-token", "key": "token"},
            "caBundleSecretRef": {"name": "registry-ca", "key": "ca.crt"},
        }
        await client.create(SECRET, hook_secret(), namespace=namespace)
        await client.create(RAY_SERVE_GRAPH, graph, namespace=namespace)

        settings = Settings(
            kubeconfig=control_plane.kubeconfig,
            namespaces=(namespace,),
            leader_elect=False,
            health_addr="127.0.0.1:0",
            metrics_addr="127.0.0.1:0",
            serve_graph_events_port=free_port(),
        )
        api = await load_api_client(control_plane.kubeconfig)
        replica = Operator(
            settings,
            api=api,
            controllers=[rayservegraph_controller(policy=FetchPolicy(allow_loopback=True))],
            components=components_for(settings, WebhookOptions(enabled=False)),
        )
        [events] = replica.components
        assert isinstance(events, ServeGraphEvents)
        stop = asyncio.Event()
        task = asyncio.create_task(replica.run(stop), name="operator-burst")
        try:
            await eventually(lambda: status_of(client, namespace), what="the first fetch")
            fetches_before = registry.request_count("/graph.pb")
            await asyncio.wait_for(events.listening.wait(), timeout=30)
            url = (
                f"http://127.0.0.1:{events.port}/apis/ray-operator.io/v1alpha1/namespaces/"
                f"{namespace}/rayservegraphs/{GRAPH}/refresh"
            )
            async with aiohttp.ClientSession() as session:

                async def post() -> int:
                    async with session.post(url, headers=bearer()) as response:
                        return response.status

                # Spread over half a second, as a CI's events would be: without coalescing the
                # later ones would land after the controller took the first (2-5 fetches).
                posts = []
                for _ in range(20):
                    posts.append(asyncio.create_task(post()))
                    await asyncio.sleep(0.025)
                statuses = await asyncio.gather(*posts)
            assert set(statuses) == {202}

            async def handled() -> bool:
                status = await status_of(client, namespace)
                graph_now = await client.get(RAY_SERVE_GRAPH, GRAPH, namespace=namespace)
                stamp = graph_now["metadata"]["annotations"][REFRESH_REQUESTED_ANNOTATION]
                return bool(status) and status.get("lastRefreshHandled") == stamp

            await eventually(handled, what="the refresh handled")
            assert registry.request_count("/graph.pb") == fetches_before + 1
        finally:
            stop.set()
            assert await asyncio.wait_for(task, timeout=30) == 0
            await api.close()
            await client.close()


async def create_registry_secrets(
    client: KubeClient, namespace: str, *, host: str, token: str, ca: bytes
) -> None:
    await client.create(
        SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "registry-token",
                "annotations": {"ray-operator.io/serve-graph-hosts": host},
            },
            "data": {"token": base64.b64encode(token.encode()).decode()},
        },
        namespace=namespace,
    )
    await client.create(
        SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "registry-ca"},
            "data": {"ca.crt": base64.b64encode(ca).decode()},
        },
        namespace=namespace,
    )


async def status_of(client: KubeClient, namespace: str) -> dict[str, Any]:
    """The graph's status once a document was fetched (else empty)."""
    graph = await client.get(RAY_SERVE_GRAPH, GRAPH, namespace=namespace)
    status: dict[str, Any] = graph.get("status") or {}
    return status if (status.get("artifact") or {}).get("digest") else {}
