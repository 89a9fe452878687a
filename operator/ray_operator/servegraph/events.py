"""The RayServeGraph event endpoint: "the document changed, fetch it now", over HTTP.

Off by default; `--serve-graph-events-port` turns it on (`--serve-graph-events-address`,
default 127.0.0.1). Its own aiohttp listener, built with `server.bounded_application` and served
by a `server.BoundedSite`: request headers within 10 s, the body within 10 s and at most 64 KiB
(408/413 otherwise), at most 1 MiB of bodies held at once (429) and 32 connections.

    POST /apis/ray-operator.io/v1alpha1/namespaces/{namespace}/rayservegraphs/{name}/refresh
    POST /apis/ray-operator.io/v1alpha1/events
         a CloudEvent 1.0 in structured mode (`Content-Type: application/cloudevents+json`)
         whose `subject` is `namespaces/<namespace>/rayservegraphs/<name>`

Authentication, per object, against the Secret named by its `spec.refresh.secretRef` (the
Secret must opt in: its `ray-operator.io/serve-graphs` annotation lists the graph's name, or a
RayServeGraph could turn any Secret of its namespace into a password-guessing oracle), compared
in constant time; every credential presented must verify:

- `Authorization: Bearer <secret>`: the secret itself. Whoever captured one such request holds
  the secret and can make any request, so remembering requests would protect nothing: a bearer
  token is for TLS only (a TLS-terminating Ingress in front of this plain-HTTP listener), and
  what it can cost is bounded by the coalescing below and the controller's refresh floor.
- `Ray-Operator-Signature: t=<unix seconds>,v1=<hex>` (both routes): an HMAC over the time, the
  object and the body (`signatures.py` spells the bytes). Accepted within 5 minutes of the
  operator's clock, either way, and once: a replay is refused.
- `X-Signature-256: sha256=<hex>` (GitHub's format, also under GitHub's `X-Hub-Signature-256`):
  an HMAC of the body alone, accepted for CloudEvents only, whose body carries the time (`time`,
  then required) and the object (`subject`); within the window and once, as above. On the
  refresh route a body-only signature proves nothing of when or what: refused with 401.

Answers, in the order they are decided:

    401  no usable credentials          decided before any lookup: a caller without credentials
                                        learns nothing, not even whether the object exists
    400  not a CloudEvent naming a RayServeGraph, a body-signed one without `time`, or two
         signatures on one request (events route only)
    403  a signature whose time is more than 5 minutes from the operator's clock (before any
         lookup: a stale capture costs nothing)
    404  no such RayServeGraph, or one without `spec.refresh` (the endpoint is off for it)
    403  the credentials do not verify (or its Secret is missing, empty or did not opt in)
    409  this signature was already accepted for this object (a replay)
    429  the replay memory's share of the namespace (or all of it) is full: Retry-After
    503  the Secret could not be read (RBAC: docs/features/rayservegraph.md, "Security model")
         or the annotation could not be written
    202  accepted: `{"refreshRequestedAt": "<RFC 3339>"}`

The order leaks one bit to a caller who presents *some* credential: 404 and 403 tell an unknown
name from a known one. Verifying first would need a Secret for an object that does not exist;
answering 403 for unknown objects would break "unknown object → 404", which callers need to tell
a typo from a wrong secret. Names of RayServeGraphs are not secrets (they sit in the callers'
URLs); Secret values never influence anything but the 403/202 answer.

The effect is a merge patch of the annotation `ray-operator.io/refresh-requested-at` (RFC 3339, µs,
UTC) on the object, through the API server, so any replica may take the event and the leader's
controller, level-triggered, fetches once per annotation value newer than
`status.lastRefreshHandled`. A burst must cost one fetch, so requests are coalesced per object:
the first one opens a window of `coalesce_seconds` (1 s), every request in it waits for the one
patch written at its end, and all get the same answer. Without it, N patches straddling one
reconcile would cost two fetches (the reconcile that handled the first value finds a newer one).
A request arriving after a window closed opens the next one: it may announce a newer document,
so it is never dropped. (Each replica coalesces its own requests: R replicas behind a Service
cost at most R fetches per burst.)

This module decides the order of the answers and serves them (`RefreshEndpoint`, the aiohttp
application, the component). What a request presents and names is read without I/O in
`event_requests`; the coalescing and the Secret cache are `event_coalescing`; the signature
schemes, the time window and the replay memory are `signatures`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from aiohttp import web

from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import Forbidden, KubeError, NotFound
from ray_operator.runtime.store import StoreView
from ray_operator.servegraph.event_coalescing import (
    DEFAULT_COALESCE_SECONDS,
    SECRET_CACHE_SECONDS,
    RefreshCoalescer,
    SecretCache,
)
from ray_operator.servegraph.event_requests import (
    CREDENTIALS_REQUIRED,
    STALE_SIGNATURE,
    Credentials,
    RefusedError,
    cannot_name_an_object,
    cloudevent_credentials,
    presents_credentials,
    read_cloudevent,
    refresh_credentials,
    refresh_secret_ref,
    refresh_secret_value,
    verify,
)
from ray_operator.servegraph.signatures import (
    Replayed,
    ReplayMemory,
    ReplayMemoryFull,
    Signature,
    within_window,
)
from ray_operator.server import (
    BoundedSite,
    ReadLimits,
    bounded_application,
    bounded_runner,
    start_site,
)
from ray_operator.spec.kinds import RAY_SERVE_GRAPH, SECRET, WATCHED_KINDS
from ray_operator.spec.serve_graph_names import (
    REFRESH_REQUESTED_ANNOTATION,
    SECRET_GRAPHS_ANNOTATION,
    SERVE_GRAPH_GROUP,
    SERVE_GRAPH_VERSION,
)

if TYPE_CHECKING:
    from ray_operator.components import ComponentContext

logger = logging.getLogger(__name__)

API_ROOT = f"/apis/{SERVE_GRAPH_GROUP}/{SERVE_GRAPH_VERSION}"
REFRESH_ROUTE = API_ROOT + "/namespaces/{namespace}/rayservegraphs/{name}/refresh"
EVENTS_ROUTE = API_ROOT + "/events"
CLOUDEVENTS_CONTENT_TYPES = ("application/cloudevents+json", "application/json")
EVENT_READ_LIMITS = ReadLimits(max_body_bytes=64 * 1024)
"""An event is a few hundred bytes; 64 KiB leaves room for a CloudEvent's `data`."""
_MAX_WARNINGS = 1024


GraphLookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
"""(namespace, name) → the RayServeGraph, or None when it does not exist (for this operator)."""


class RefreshEndpoint:
    """Authenticates refresh requests and turns them into coalesced annotation patches."""

    def __init__(
        self,
        client: KubeClient,
        *,
        lookup: GraphLookup | None = None,
        coalesce_seconds: float = DEFAULT_COALESCE_SECONDS,
        secret_ttl: float = SECRET_CACHE_SECONDS,
        replays: ReplayMemory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._lookup = lookup or self._get_from_api
        self._clock = clock
        self.secrets = SecretCache(self._read_secret, ttl=secret_ttl)
        self.coalescer = RefreshCoalescer(self._patch_annotation, window=coalesce_seconds)
        self.replays = replays if replays is not None else ReplayMemory(clock=clock)
        self._warned: set[tuple[str, str, str]] = set()

    async def refresh(self, namespace: str, name: str, *, credentials: Credentials) -> str:
        """Authenticate a request for the object and wait for its coalesced patch."""
        signature = credentials.signature
        if signature is not None and not within_window(signature.signed_at, now=self._clock()):
            raise RefusedError(403, STALE_SIGNATURE)
        if cannot_name_an_object(namespace, name):
            raise RefusedError(404, "no such RayServeGraph\n")
        graph = await self._look_up(namespace, name)
        reference = refresh_secret_ref(graph) if graph is not None else None
        if reference is None:
            raise RefusedError(404, "no such RayServeGraph with spec.refresh\n")
        secret = await self._refresh_secret(namespace, name, reference)
        if not verify(credentials, secret=secret):
            raise RefusedError(403, "forbidden\n")
        if signature is None:
            return await self._patch_coalesced(namespace, name)
        self._admit_once(namespace, name, signature)
        try:
            return await self._patch_coalesced(namespace, name)
        except RefusedError:
            # Nothing was recorded: the sender's retry of this very request is no replay.
            self.replays.release(namespace, name, signature)
            raise

    def _admit_once(self, namespace: str, name: str, signature: Signature) -> None:
        try:
            self.replays.admit(namespace, name, signature)
        except Replayed as replayed:
            raise RefusedError(409, f"{replayed}: sign each request anew\n") from None
        except ReplayMemoryFull as full:
            raise RefusedError(
                429, f"{full}; retry later\n", retry_after=full.retry_after
            ) from None

    async def _look_up(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await self._lookup(namespace, name)
        except Forbidden:
            return None  # a namespace this operator may not read: not one it manages
        except KubeError as error:
            logger.warning("looking up RayServeGraph %s/%s failed: %s", namespace, name, error)
            raise RefusedError(503, "the RayServeGraph cannot be looked up right now\n") from None

    async def _refresh_secret(self, namespace: str, name: str, reference: tuple[str, str]) -> bytes:
        secret_name, key = reference
        try:
            secret = await self.secrets.get(namespace, secret_name)
        except NotFound:
            self._warn_once(namespace, name, f"its refresh Secret {secret_name} does not exist")
            raise RefusedError(403, "forbidden\n") from None
        except Forbidden:
            self._warn_once(
                namespace,
                name,
                f"the operator may not read Secret {secret_name}: bind the ClusterRole "
                f"ray-operator-serve-graph-secrets in namespace {namespace} "
                '(see "Security model" in docs/features/rayservegraph.md)',
            )
            raise RefusedError(503, "the refresh secret cannot be read by the operator\n") from None
        except KubeError as error:
            logger.warning("reading the refresh Secret of %s/%s failed: %s", namespace, name, error)
            raise RefusedError(503, "the refresh secret cannot be read right now\n") from None
        try:
            return refresh_secret_value(secret, key=key, graph_name=name)
        except RefusedError:
            self._warn_once(
                namespace,
                name,
                f"its refresh Secret {secret_name} has no usable key {key!r} or does not list "
                f"it in its {SECRET_GRAPHS_ANNOTATION} annotation",
            )
            raise

    async def _patch_coalesced(self, namespace: str, name: str) -> str:
        try:
            return await self.coalescer.request(namespace, name)
        except NotFound:
            raise RefusedError(404, "no such RayServeGraph\n") from None
        except KubeError as error:
            logger.warning("requesting a refresh of %s/%s failed: %s", namespace, name, error)
            raise RefusedError(503, "the refresh could not be recorded; retry\n") from None

    async def _get_from_api(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await self._client.get(RAY_SERVE_GRAPH, name, namespace=namespace)
        except NotFound:
            return None

    async def _read_secret(self, namespace: str, name: str) -> Mapping[str, Any]:
        return await self._client.get(SECRET, name, namespace=namespace, request_timeout=10.0)

    async def _patch_annotation(self, namespace: str, name: str, stamp: str) -> None:
        patch = {"metadata": {"annotations": {REFRESH_REQUESTED_ANNOTATION: stamp}}}
        await self._client.patch(RAY_SERVE_GRAPH, name, patch, namespace=namespace)
        logger.info("refresh of RayServeGraph %s/%s requested (%s)", namespace, name, stamp)

    def _warn_once(self, namespace: str, name: str, problem: str) -> None:
        # Anyone with a bogus credential can trigger these: one line per object and problem.
        key = (namespace, name, problem)
        if key in self._warned or len(self._warned) >= _MAX_WARNINGS:
            return
        self._warned.add(key)
        logger.warning(
            "refresh requests for RayServeGraph %s/%s are refused: %s", namespace, name, problem
        )

    async def close(self) -> None:
        """Cancel pending windows and Secret reads."""
        await self.coalescer.close()
        self.secrets.close()


def events_application(
    endpoint: RefreshEndpoint, *, limits: ReadLimits = EVENT_READ_LIMITS
) -> web.Application:
    """The aiohttp Application of the two routes, with bounded reads."""

    async def refresh(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        body = await request.read()  # already read, bounded, by the middleware
        try:
            credentials = refresh_credentials(
                request.headers, namespace=namespace, name=name, body=body
            )
        except RefusedError as refusal:
            return _refused(refusal)
        return await _answer(endpoint.refresh(namespace, name, credentials=credentials))

    async def cloudevent(request: web.Request) -> web.Response:
        if not presents_credentials(request.headers):
            return _refused(RefusedError(401, CREDENTIALS_REQUIRED))
        if request.content_type not in CLOUDEVENTS_CONTENT_TYPES:
            return _refused(RefusedError(415, "expected application/cloudevents+json\n"))
        body = await request.read()
        try:
            event = read_cloudevent(body)
            credentials = cloudevent_credentials(request.headers, event=event, body=body)
        except RefusedError as refusal:
            return _refused(refusal)
        return await _answer(endpoint.refresh(event.namespace, event.name, credentials=credentials))

    application = bounded_application(limits)
    application.add_routes([web.post(REFRESH_ROUTE, refresh), web.post(EVENTS_ROUTE, cloudevent)])

    async def close(_: web.Application) -> None:
        await endpoint.close()

    application.on_cleanup.append(close)
    return application


async def _answer(refresh: Awaitable[str]) -> web.Response:
    try:
        stamp = await refresh
    except RefusedError as refusal:
        return _refused(refusal)
    return web.json_response({"refreshRequestedAt": stamp}, status=202)


def _refused(refusal: RefusedError) -> web.Response:
    response = web.Response(status=refusal.status, text=refusal.text)
    if refusal.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="ray-operator"'
    if refusal.retry_after is not None:
        response.headers["Retry-After"] = str(refusal.retry_after)
    return response


# --- the component --------------------------------------------------------------------------


def store_lookup(
    store: StoreView,
    client: KubeClient,
    *,
    namespaces: tuple[str, ...] = (),
    cached: bool = RAY_SERVE_GRAPH in WATCHED_KINDS,
) -> GraphLookup:
    """Look a graph up in the watch cache (`cached`: the operator watches the kind); ask the API
    server where the cache is not complete (a watch gap) or not kept. Outside the watched
    `namespaces` (empty: all) nothing exists."""

    async def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        if namespaces and namespace not in namespaces:
            return None
        if cached and store.synced(RAY_SERVE_GRAPH, namespace):
            return store.get(RAY_SERVE_GRAPH, namespace, name)
        try:
            return await client.get(RAY_SERVE_GRAPH, name, namespace=namespace)
        except NotFound:
            return None

    return lookup


class ServeGraphEvents:
    """The event endpoint as a root task of every replica (`--serve-graph-events-port`)."""

    def __init__(
        self,
        *,
        client: KubeClient,
        host: str,
        port: int,
        lookup: GraphLookup | None = None,
        coalesce_seconds: float = DEFAULT_COALESCE_SECONDS,
        limits: ReadLimits = EVENT_READ_LIMITS,
    ) -> None:
        self.endpoint = RefreshEndpoint(client, lookup=lookup, coalesce_seconds=coalesce_seconds)
        self.host = host
        self.port = port
        self.limits = limits
        self.listening = asyncio.Event()
        """Set once the listener accepts connections (`port` then holds the bound port)."""

    async def run(self) -> NoReturn:
        """Serve until cancelled."""
        runner = bounded_runner(events_application(self.endpoint, limits=self.limits), self.limits)
        await runner.setup()
        try:
            await start_site(
                BoundedSite(runner, self.host, self.port, limits=self.limits),
                host=self.host,
                port=self.port,
                flags=("--serve-graph-events-port",),
            )
            self.port = int(runner.addresses[0][1])  # the real one when asked for port 0
            logger.info("serving RayServeGraph events on %s:%d", self.host, self.port)
            self.listening.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        finally:
            with contextlib.suppress(Exception):
                await runner.cleanup()


def serve_graph_events_component(
    *, host: str, port: int
) -> Callable[[ComponentContext], ServeGraphEvents]:
    """The component factory `app.run(..., components=[...])` takes."""

    def build(context: ComponentContext) -> ServeGraphEvents:
        lookup = store_lookup(context.store, context.client, namespaces=context.settings.namespaces)
        return ServeGraphEvents(client=context.client, host=host, port=port, lookup=lookup)

    return build


__all__ = [
    "EVENTS_ROUTE",
    "REFRESH_ROUTE",
    "GraphLookup",
    "RefreshEndpoint",
    "ServeGraphEvents",
    "events_application",
    "serve_graph_events_component",
    "store_lookup",
]
