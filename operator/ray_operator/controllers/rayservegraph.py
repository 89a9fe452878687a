"""The RayServeGraph controller: a Serve DAG described in a protobuf document behind an
authenticated URL, fetched, parsed, compiled and kept deployed as a RayService.

`reconcile` reads as a table of contents: the finalizer `ray-operator.io/serve-graph-cleanup`
(deletion removes the RayService and the builder ConfigMap explicitly: the local control plane
has no garbage collector), the spec's rules (the webhook's, again; an invalid spec fetches and
deploys nothing), the fetch when one is due, parse, compile, the builder ConfigMap (trusted only
when it holds exactly the module, immutable: `serve_graph_builder`), the RayService (created or
patched only then), the builder ConfigMaps of other module versions retired, then the status
(`status/rayservegraph`), written only when it changed.

A fetch is due when the object is new to this replica (after a restart: once, without
If-None-Match, since the bytes behind the stored ETag are not in memory), when its spec
changed (a new `metadata.generation`), every `spec.source.pollInterval`, and when the
annotation `ray-operator.io/refresh-requested-at` (the event endpoint writes it) is newer than
`status.lastRefreshHandled`. Otherwise the last document, kept in memory parsed, is reused.
The token Secret is read by name (`get`, never list/watch) at each fetch, and only sent if it
opted in for the URL's host (`servegraph.fetch.check_secret_opt_in`): no confused deputy.

What each outcome changes:
- an unchanged document (304, or the same digest) computes the same status: nothing is written;
- a failed fetch or a rejected document changes nothing deployed: `Fetched`/`Parsed` turn False
  with the reason and, for a document, the field path; the last good document keeps serving;
- a new good document is compiled (deterministic text) and, when the text differs from the
  RayService's `serveConfigV2`, that one field is patched (the RayService controller updates Serve
  in place). `rayClusterConfig`, `upgradeStrategy` and `rayClusterDeletionDelaySeconds` are
  patched when the hash of what we built from `spec.rayClusterSpec` differs from the one we
  stamped on the RayService (`SPEC_HASH_ANNOTATION`; the API server defaults fields inside it,
  so the object itself is not comparable with what we built). Never deleted and recreated.

Fetch failures back off per object, in memory, not through the work queue: the reconcile must
keep mirroring the RayService's readiness (`Deployed`) while the document cannot be fetched, and
our own status writes re-enqueue the key. A retryable failure (timeout, 5xx, connection) is
retried after 1, 2, 4 … s, a permanent one (401/403/404, a Secret not opted in, a host not
allowed, a document refused) after 10, 20, 40 … s — Secrets are not watched, so a fixed one is
noticed that way —, both at most 5 minutes, and no later than the poll interval. A new spec
fetches at once. A refresh request fetches at once too, unless a fetch started less than
`REFRESH_FLOOR_SECONDS` ago or a failure's backoff runs: then it waits for that moment, and is
served then, never dropped (the annotation stays newer than `lastRefreshHandled` until a fetch
takes it). So whoever can request refreshes — the event endpoint's callers, anyone who may patch
the annotation — cannot make the operator fetch faster than the floor, nor through a backoff
(issue 28, finding 8). Other objects are unaffected: each has its own schedule.

A fetch runs beside the workers, bounded by `spec.source.timeoutSeconds` (≤ 300 s); a reconcile
waits for the fetch it started a short while (`FETCH_INLINE_WAIT_SECONDS`), one such wait per
namespace at a time, so a tenant with many graphs whose servers never answer holds one worker
for moments, not all of them. Fetches go through one `servegraph.fetch.Fetcher` per operator: at
most `--serve-graph-max-concurrent-fetches` at once, `--serve-graph-max-concurrent-fetches-per-
namespace` of them for one namespace, waiting ones served namespace by namespace; their names
are looked up on its own threads, never on the default executor that `compile` and `_parse`
run on. Nothing here scales with the document on the event loop beyond
`parse_graph`'s bounds (256 KiB, 64 deployments); Secrets' values never reach a log line, an
Event, the status or an exception message.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.controllers import status_writer
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.runtime.client import PatchType
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    names_owner,
    owner_keys,
)
from ray_operator.runtime.errors import (
    AlreadyExists,
    BadRequest,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
)
from ray_operator.servegraph.fetch import (
    Artifact,
    ArtifactFetchError,
    ArtifactRequest,
    Fetcher,
    FetchPolicy,
    NotModified,
    check_secret_opt_in,
)
from ray_operator.spec.kinds import (
    CONFIG_MAP,
    RAY_CLUSTER,
    RAY_SERVE_GRAPH,
    RAY_SERVICE,
    SECRET,
    Kind,
    ObjectKey,
)
from ray_operator.spec.serve_graph_names import (
    MAX_DOCUMENT_BYTES,
    REFRESH_REQUESTED_ANNOTATION,
    SERVE_GRAPH_GROUP,
)
from ray_operator.status import rayservegraph as rules
from ray_operator.status.rayservegraph import ConditionState
from ray_operator.validation.errors import summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayservegraph import poll_interval_seconds, validate_rayservegraph

if TYPE_CHECKING:
    from ray_io.v1_views import RayService
    from ray_operator_io.v1alpha1 import serve_graph_pb2

    from ray_operator.controllers.serve_graph_builder import BuilderConfigMaps
    from ray_operator.validation.serve_graph import GraphRejected

# The graph's protobuf parser and the Serve config compiler (with protobuf, ~2 MiB) are imported
# by the first RayServeGraph that needs them, not at start: most operators never see one.

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

FINALIZER = f"{SERVE_GRAPH_GROUP}/serve-graph-cleanup"
SPEC_HASH_ANNOTATION = f"{SERVE_GRAPH_GROUP}/serve-graph-cluster-hash"
"""On the RayService: sha256 of the cluster part we last wrote (`rayClusterConfig`,
`upgradeStrategy`, `rayClusterDeletionDelaySeconds`)."""
CLUSTER_FIELDS = ("rayClusterConfig", "upgradeStrategy", "rayClusterDeletionDelaySeconds")

RETRY_BASE_SECONDS = 1.0
PERMANENT_RETRY_BASE_SECONDS = 10.0
RETRY_CAP_SECONDS = 300.0
CONFLICT_RECHECK_SECONDS = 30.0
"""A RayService or builder ConfigMap of the wanted name that is not ours: looked at again this
often (its deletion does not map back to the graph: it has no ownerReference to it). So is a
builder ConfigMap of another module version still mounted (a RayCluster's deletion does not map
back either)."""
DEFAULT_TIMEOUT_SECONDS = 30
DEFAULT_MAX_BYTES = MAX_DOCUMENT_BYTES
MAX_REFRESH_VALUE_LENGTH = 64
"""A refresh annotation longer than this is no timestamp the endpoint wrote: ignored (it would
be copied into the status)."""
FETCH_INLINE_WAIT_SECONDS = 2.0
"""How long a reconcile waits for the fetch it started: a healthy server answers within it, so
the document is deployed in the same reconcile; a slow or hostile one (up to `timeoutSeconds`,
300 s at most) then finishes in the background while the worker serves other objects."""
PENDING_FETCH_RECHECK_SECONDS = 1.0
REFRESH_FLOOR_SECONDS = 5.0
"""A refresh request starts a fetch no sooner than this after the previous fetch started: a flood
of refreshes costs at most one fetch per 5 s (and none during a failure's backoff)."""
_DUE_SLACK_SECONDS = 0.05  # timers fire a hair early; a due time this close counts as reached

FetchOutcome = Artifact | NotModified


class FetchFailure(Exception):  # noqa: N818 (an outcome, raised only inside this module)
    """Why no document came back: a `Fetched` reason, a message safe to show (never a Secret's
    value), and whether a retry soon may help."""

    def __init__(self, reason: str, message: str, *, retryable: bool) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.retryable = retryable


@dataclasses.dataclass(frozen=True, slots=True)
class Document:
    """One fetched document: what the status reports of it and, parsed, the graph or why not."""

    digest: str
    etag: str | None
    size: int
    url: str
    """The URL without userinfo, query or fragment (as the status shows it)."""
    fetched_at: str
    graph: serve_graph_pb2.ServeGraph | None
    rejection: GraphRejected | None


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    inputs: tuple[str, str, str]
    """(document digest, graph name, serveHttpOptions as JSON): what the text depends on."""
    text: str
    digest: str


@dataclasses.dataclass(slots=True)
class GraphMemory:
    """What this replica remembers of one RayServeGraph between reconciles."""

    latest: Document | None = None
    """The last document fetched (perhaps rejected): its ETag goes into If-None-Match."""
    good: Document | None = None
    """The last document that parsed: what is (or is being) deployed."""
    attempted_generation: int | None = None
    """The spec generation of the last fetch attempt."""
    last_success: float | None = None
    """Monotonic time of the last fetch that worked (the poll interval counts from it)."""
    last_attempt: float | None = None
    """Monotonic time the last fetch started (the refresh floor counts from it)."""
    failures: int = 0
    """Fetch failures in a row."""
    retry_at: float | None = None
    """Monotonic time of the next attempt after a failure."""
    refresh_handled: str | None = None
    """The refresh annotation value last acted on (also in the status, once written)."""
    fetched: ConditionState | None = None
    """`Fetched` as the last fetch left it (kept here: a status write that failed, say on a
    Conflict, is computed again from memory, not lost until the next fetch)."""
    parsed: ConditionState | None = None
    """`Parsed` as the last new document left it."""
    compiled: Compiled | None = None
    spec_check: tuple[tuple[str, str], str | None] | None = None
    """((uid, generation, annotations digest), the spec's problem or None)."""
    cluster_part: tuple[tuple[str, int], JSON, str] | None = None
    """((uid, generation), the RayService's cluster fields as we build them, their hash)."""
    pending: asyncio.Task[FetchOutcome] | None = None
    """The fetch under way, if any: it runs beside the workers, so a slow server holds none."""

    def forget(self) -> None:
        """The object is gone or going: stop its fetch."""
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None


@dataclasses.dataclass(frozen=True, slots=True)
class RayServiceState:
    """The RayService after `ensure_rayservice`: the freshest copy we know, whether it is ours,
    and whether it now carries the compiled config."""

    name: str
    obj: RayService | None
    owned: bool
    carries_config: bool = False
    refused: ConditionState | None = None
    """Why the API server refused our create or patch (then `Deployed` says so)."""


class RayServeGraphController:
    """Reconciles RayServeGraphs; their RayService and builder ConfigMap map back by owner."""

    kind = RAY_SERVE_GRAPH
    reads = (RAY_SERVE_GRAPH, RAY_SERVICE, CONFIG_MAP, RAY_CLUSTER)

    def __init__(
        self,
        context: ControllerContext,
        *,
        policy: FetchPolicy,
        limits: ClusterLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime.datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._metrics = context.metrics
        self._fetcher = Fetcher(policy)
        self._limits = limits
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._monotonic = monotonic
        self._memory: dict[ObjectKey, GraphMemory] = {}
        self._waiting_inline: set[str] = set()
        """Namespaces whose reconcile is waiting for a fetch it started (one at a time)."""
        self._builder_configmaps: BuilderConfigMaps | None = None

    def keys_for(self, kind: Kind, obj: Object) -> Iterable[ObjectKey]:
        if kind == RAY_SERVE_GRAPH:
            return [ObjectKey.of(obj)]
        if kind in (RAY_SERVICE, CONFIG_MAP):
            return owner_keys(obj, owner=RAY_SERVE_GRAPH)
        return []

    async def reconcile(self, key: ObjectKey) -> Result:
        rsg = self._store.get(RAY_SERVE_GRAPH, key.namespace, key.name)
        if rsg is None:
            forgotten = self._memory.pop(key, None)
            if forgotten is not None:
                forgotten.forget()
            return Result()
        if rsg["metadata"].get("deletionTimestamp"):
            return await self.finalize(rsg)
        if await add_finalizer(self._client, RAY_SERVE_GRAPH, rsg, FINALIZER):
            return Result(requeue_after=1.0)  # the watch brings it back with the finalizer
        memory = self._memory.setdefault(key, GraphMemory())
        stored: JSON = dict(rsg.get("status") or {})
        generation = int(rsg["metadata"].get("generation") or 0)
        problem = self.spec_problem(rsg, memory)
        if problem is not None:
            return await self.report_invalid_spec(rsg, stored, problem)
        await self.fetch_if_due(rsg, memory, stored)
        # Tens of milliseconds for a graph at the parser's bounds: off the event loop.
        compiled = await asyncio.to_thread(self.compile, rsg, memory)
        conflict = await self.builder_configmaps.ensure(rsg) if compiled is not None else None
        stale_builders_mounted = False
        if conflict is None:
            rayservice = await self.ensure_rayservice(rsg, memory, compiled)
            if compiled is not None:
                stale_builders_mounted = await self.builder_configmaps.retire_stale(rsg)
        else:
            rayservice = self._rayservice_left_alone(rsg, conflict)
        observed = rules.Observed(
            generation=generation,
            fetched=memory.fetched,
            parsed=memory.parsed,
            deployed=rayservice.refused
            or rules.deployed_condition(
                rayservice.obj, name=rayservice.name, owned=rayservice.owned
            ),
            deployment=self._deployment(memory, compiled, stored)
            if rayservice.carries_config
            else None,
            rayservice_name=rayservice.name,
            last_refresh_handled=memory.refresh_handled,
        )
        await self.write_status(
            rsg, stored, rules.compute_status(stored, observed, now=self._now())
        )
        # A conflicting RayService or ConfigMap, or the RayCluster mounting an old builder, is
        # not ours to watch: look again later.
        look_again = not rayservice.owned or conflict is not None or stale_builders_mounted
        return Result(requeue_after=self.next_look(rsg, memory, stored, conflict=look_again))

    @property
    def builder_configmaps(self) -> BuilderConfigMaps:
        """The builder ConfigMap step (imported with the Serve compiler, on first use)."""
        if self._builder_configmaps is None:
            from ray_operator.controllers.serve_graph_builder import BuilderConfigMaps

            self._builder_configmaps = BuilderConfigMaps(self._store, self._client, self._events)
        return self._builder_configmaps

    # --- the spec ------------------------------------------------------------------------------

    def spec_problem(self, rsg: Object, memory: GraphMemory) -> str | None:
        """The webhook's rules, again (an object may predate the webhook or bypass it); checked
        once per version of the object (its resourceVersion), as RayCluster validation is."""
        metadata = rsg["metadata"]
        check = (str(metadata.get("uid", "")), str(metadata.get("resourceVersion", "")))
        if memory.spec_check is not None and memory.spec_check[0] == check:
            return memory.spec_check[1]
        problems = validate_rayservegraph(rsg, limits=self._limits)
        problem = summarize(problems) or None
        memory.spec_check = (check, problem)
        return problem

    async def report_invalid_spec(self, rsg: Object, stored: JSON, problem: str) -> Result:
        """Ready False `InvalidSpec` and a Warning: nothing fetched, nothing deployed, no retry
        (a spec change brings the object back)."""
        await self._events.record(rsg, reason="InvalidSpec", message=problem, type="Warning")
        observed = rules.Observed(
            generation=int(rsg["metadata"].get("generation") or 0), spec_problem=problem
        )
        await self.write_status(
            rsg, stored, rules.compute_status(stored, observed, now=self._now())
        )
        return Result()

    # --- fetching ------------------------------------------------------------------------------

    async def fetch_if_due(self, rsg: Object, memory: GraphMemory, stored: Object) -> None:
        """Fetch and parse the document when a fetch is due; the outcome goes into `memory`.

        The fetch runs as a task of its own: the reconcile waits for it a short while and
        otherwise leaves it to finish while the worker serves other objects (a later reconcile
        takes its outcome), so slow servers cannot starve the pool every controller shares.
        """
        generation = int(rsg["metadata"].get("generation") or 0)
        if memory.pending is not None and generation != memory.attempted_generation:
            memory.forget()  # it fetches for a spec that is no more
        if memory.pending is None:
            refresh = refresh_request(rsg, stored, memory)
            now = self._monotonic() + _DUE_SLACK_SECONDS
            why = fetch_reason(rsg, memory, refresh=refresh, now=now)
            if why is None:
                return
            logger.info("fetching the graph document (%s)", why)
            if generation != memory.attempted_generation:
                memory.failures = 0  # a new spec starts a new backoff
            memory.attempted_generation = generation
            memory.last_attempt = self._monotonic()
            if refresh is not None:
                memory.refresh_handled = refresh  # whatever the reason, this fetch serves it
            memory.pending = asyncio.create_task(self._fetch(rsg, memory))
            # Its failure is taken by a later reconcile, or by nobody when the operator stops
            # first: either way not a "Task exception was never retrieved" at exit.
            memory.pending.add_done_callback(_mark_retrieved)
            await self._wait_inline(rsg["metadata"]["namespace"], memory.pending)
        if not memory.pending.done():
            return
        pending, memory.pending = memory.pending, None
        try:
            outcome = pending.result()
        except FetchFailure as failure:
            await self._fetch_failed(rsg, memory, failure)
            return
        memory.failures, memory.retry_at = 0, None
        memory.last_success = self._monotonic()
        if isinstance(outcome, NotModified) or (
            memory.latest is not None and outcome.digest == memory.latest.digest
        ):
            self._unchanged(memory, outcome)
            return
        document = await asyncio.to_thread(self._parse, outcome)
        memory.latest = document
        await self._new_document(rsg, memory, document, stored=stored)

    async def _wait_inline(self, namespace: str, fetch: asyncio.Task[FetchOutcome]) -> None:
        """Give a fetch just started a moment to finish, so a healthy server's document is
        deployed in this reconcile; not when another graph of the namespace is already waiting
        so (its servers may be hanging: they would hold one worker each)."""
        if namespace in self._waiting_inline:
            return
        self._waiting_inline.add(namespace)
        try:
            await asyncio.wait((fetch,), timeout=FETCH_INLINE_WAIT_SECONDS)
        finally:
            self._waiting_inline.discard(namespace)

    async def _fetch(self, rsg: Object, memory: GraphMemory) -> FetchOutcome:
        """One fetch, counted by result (`ray_operator_servegraph_fetches_total`)."""
        try:
            outcome = await self._fetch_document(rsg, memory)
        except FetchFailure as failure:
            self._count_fetch(failure.reason)
            raise
        self._count_fetch("NotModified" if isinstance(outcome, NotModified) else "Fetched")
        return outcome

    def _count_fetch(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.servegraph_fetches_total.labels(result).inc()

    async def _fetch_document(self, rsg: Object, memory: GraphMemory) -> FetchOutcome:
        """One fetch: the Secrets (by name, opt-in checked), then the GET; raises FetchFailure."""
        source = (rsg.get("spec") or {}).get("source") or {}
        token = await self._token(rsg, source)
        ca_bundle = await self._ca_bundle(rsg, source)
        request = ArtifactRequest(
            url=str(source.get("url") or ""),
            token=token,
            ca_bundle=ca_bundle,
            # Only with the bytes in memory: a 304 must leave us something to deploy.
            etag=memory.latest.etag if memory.latest is not None else None,
            timeout_seconds=float(source.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS),
            max_bytes=int(source.get("maxBytes") or DEFAULT_MAX_BYTES),
            allow_insecure_http=bool(source.get("allowInsecureHTTP")),
        )
        try:
            outcome = await self._fetcher.fetch(request, namespace=rsg["metadata"]["namespace"])
        except ArtifactFetchError as error:
            raise FetchFailure(error.reason, error.message, retryable=error.retryable) from None
        if isinstance(outcome, NotModified) and memory.latest is None:
            raise FetchFailure(
                "ServerError",
                "the server answered 304 Not Modified to a request without If-None-Match",
                retryable=True,
            )
        return outcome

    async def _token(self, rsg: Object, source: Object) -> str | None:
        """The bearer token, if the spec names one and its Secret opted in for this URL."""
        reference = source.get("tokenSecretRef")
        if not reference:
            return None
        secret = await self._read_secret(rsg, reference, field="spec.source.tokenSecretRef")
        try:
            check_secret_opt_in(secret, url=str(source.get("url") or ""), graph_name=_name(rsg))
        except ArtifactFetchError as error:
            raise FetchFailure(error.reason, error.message, retryable=error.retryable) from None
        raw = _secret_value(secret, reference, field="spec.source.tokenSecretRef")
        try:
            # Surrounding whitespace is a `echo` artefact, never part of a token (and a newline
            # is not allowed in a header).
            return raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise FetchFailure(
                "SecretNotFound",
                f"key {reference.get('key')!r} of Secret {reference.get('name')} "
                "(spec.source.tokenSecretRef) is not UTF-8 text",
                retryable=False,
            ) from None

    async def _ca_bundle(self, rsg: Object, source: Object) -> bytes | None:
        reference = source.get("caBundleSecretRef")
        if not reference:
            return None
        secret = await self._read_secret(rsg, reference, field="spec.source.caBundleSecretRef")
        return _secret_value(secret, reference, field="spec.source.caBundleSecretRef")

    async def _read_secret(self, rsg: Object, reference: Object, *, field: str) -> Object:
        """`get` on the Secret by name: no list or watch of Secrets (least privilege)."""
        namespace, name = rsg["metadata"]["namespace"], str(reference.get("name") or "")
        try:
            return await self._client.get(SECRET, name, namespace=namespace)
        except NotFound:
            raise FetchFailure(
                "SecretNotFound",
                f"Secret {namespace}/{name} named by {field} does not exist",
                retryable=False,
            ) from None
        except Forbidden:
            raise FetchFailure(
                "SecretForbidden",
                f"the operator may not read Secret {namespace}/{name} ({field}): bind the "
                f"ClusterRole ray-operator-serve-graph-secrets in namespace {namespace}, e.g. "
                f"kubectl create rolebinding ray-operator-serve-graph-secrets -n {namespace} "
                "--clusterrole=ray-operator-serve-graph-secrets "
                "--serviceaccount=<operator namespace>:ray-operator",
                retryable=False,
            ) from None

    async def _fetch_failed(self, rsg: Object, memory: GraphMemory, failure: FetchFailure) -> None:
        memory.failures += 1
        delay = retry_delay(memory.failures, retryable=failure.retryable, poll=_poll_seconds(rsg))
        memory.retry_at = self._monotonic() + delay
        logger.info(
            "fetch failed (%d in a row), next attempt in %.0fs: %s: %s",
            memory.failures,
            delay,
            failure.reason,
            failure.message,
        )
        await self._events.record(
            rsg,
            reason="FetchFailed",
            message=f"{failure.reason}: {failure.message}",
            type="Warning",
        )
        memory.fetched = ConditionState("False", failure.reason, failure.message)

    def _unchanged(self, memory: GraphMemory, outcome: FetchOutcome) -> None:
        latest = memory.latest
        assert latest is not None  # a 304 without a document in memory was a failure
        if outcome.etag is not None and outcome.etag != latest.etag:
            # The same bytes under a new ETag: send the new one next time.
            memory.latest = dataclasses.replace(latest, etag=outcome.etag)
            if memory.good is not None and memory.good.digest == latest.digest:
                memory.good = memory.latest
        logger.debug("the document is unchanged (%s)", rules.revision(latest.digest))
        message = f"the document is unchanged (revision {rules.revision(latest.digest)})"
        memory.fetched = ConditionState("True", rules.NOT_MODIFIED, message)

    def _parse(self, artifact: Artifact) -> Document:
        from ray_operator.validation.serve_graph import GraphRejected, parse_graph

        graph: serve_graph_pb2.ServeGraph | None = None
        rejection: GraphRejected | None = None
        try:
            graph = parse_graph(artifact.body)
        except GraphRejected as error:
            rejection = error
        return Document(
            digest=artifact.digest,
            etag=artifact.etag,
            size=artifact.size,
            url=artifact.url,  # already without userinfo, query and fragment
            fetched_at=_timestamp(self._now()),
            graph=graph,
            rejection=rejection,
        )

    async def _new_document(
        self, rsg: Object, memory: GraphMemory, document: Document, *, stored: Object
    ) -> None:
        revision = rules.revision(document.digest)
        memory.fetched = ConditionState(
            "True",
            rules.FETCHED_REASON,
            f"fetched revision {revision} ({document.size} bytes) from {document.url}",
        )
        if document.rejection is not None:
            error = document.rejection
            kept = (
                f"revision {rules.revision(memory.good.digest)} keeps serving"
                if memory.good is not None
                else "nothing deployed was changed"
            )
            logger.info("revision %s refused: %s", revision, error)
            await self._events.record(
                rsg, reason="GraphRejected", message=f"revision {revision}: {error}", type="Warning"
            )
            memory.parsed = ConditionState(
                "False", error.reason, f"{error} (document revision {revision}; {kept})"
            )
            return
        memory.good = document
        assert document.graph is not None
        logger.info("fetched revision %s (%d bytes)", revision, document.size)
        if (stored.get("artifact") or {}).get("digest") != document.digest:
            # Not for the deployed document found again (after a restart): nothing happened.
            await self._events.record(rsg, reason="Fetched", message=f"fetched revision {revision}")
        from ray_operator.validation.serve_graph import graph_summary

        summary = graph_summary(document.graph)
        memory.parsed = ConditionState(
            "True",
            rules.PARSED_REASON,
            f"a graph of {len(summary['deployments'])} deployments, ingress {summary['ingress']!r}",
        )

    # --- compiling and deploying ---------------------------------------------------------------

    def compile(self, rsg: Object, memory: GraphMemory) -> Compiled | None:
        """The `serveConfigV2` of the last good document (None: there is none in memory);
        compiled once per document, name and `serveHttpOptions`."""
        good = memory.good
        if good is None or good.graph is None:
            return None
        http_options = (rsg.get("spec") or {}).get("serveHttpOptions")
        inputs = (good.digest, _name(rsg), json.dumps(http_options, sort_keys=True))
        if memory.compiled is not None and memory.compiled.inputs == inputs:
            return memory.compiled
        from ray_operator.builders.serve_graph import compile_serve_config, digest

        text = compile_serve_config(
            good.graph, default_application_name=_name(rsg), http_options=http_options
        )
        memory.compiled = Compiled(inputs=inputs, text=text, digest=digest(text))
        return memory.compiled

    def _rayservice_left_alone(self, rsg: Object, conflict: ConditionState) -> RayServiceState:
        name = service_name(rsg)
        existing = self._store.get(RAY_SERVICE, rsg["metadata"]["namespace"], name)
        owned = existing is None or names_owner(existing, rsg["metadata"]["uid"])
        return RayServiceState(name, existing, owned=owned, refused=conflict)

    async def ensure_rayservice(
        self, rsg: Object, memory: GraphMemory, compiled: Compiled | None
    ) -> RayServiceState:
        """Create the RayService once there is a config; afterwards patch only what differs."""
        namespace = rsg["metadata"]["namespace"]
        name = service_name(rsg)
        await self.delete_renamed_rayservices(rsg, keep=name)
        existing = self._store.get(RAY_SERVICE, namespace, name)
        if existing is not None and not names_owner(existing, rsg["metadata"]["uid"]):
            return RayServiceState(name, existing, owned=False)
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            return RayServiceState(name, existing, owned=True)
        cluster_part, cluster_hash = self._cluster_part(rsg, memory)
        if existing is None:
            if compiled is None:
                return RayServiceState(name, None, owned=True)
            try:
                created = await self._create_rayservice(rsg, compiled, cluster_hash)
            except (Invalid, BadRequest) as error:
                return await self._refused(rsg, name, None, error)
            return RayServiceState(name, created, owned=True, carries_config=created is not None)
        operations: list[JSON] = []
        if compiled is not None and existing.get("spec", {}).get("serveConfigV2") != compiled.text:
            operations.append({"op": "add", "path": "/spec/serveConfigV2", "value": compiled.text})
        stamped = (existing["metadata"].get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        if stamped != cluster_hash:
            operations += _cluster_operations(existing, cluster_part, cluster_hash)
        if not operations:
            return RayServiceState(name, existing, owned=True, carries_config=compiled is not None)
        try:
            updated = await self._client.patch(
                RAY_SERVICE, name, operations, namespace=namespace, patch_type=PatchType.JSON
            )
        except (Invalid, BadRequest) as error:
            return await self._refused(rsg, name, existing, error)
        await self._report_rayservice_update(rsg, name, operations, compiled)
        return RayServiceState(name, updated, owned=True, carries_config=compiled is not None)

    async def _refused(
        self, rsg: Object, name: str, existing: RayService | None, error: KubeError
    ) -> RayServiceState:
        """The API server refused the RayService we built (say, a field its schema does not
        allow): said in `Deployed` and a Warning, not retried in a loop — a new spec or
        document tries again. What runs keeps running."""
        message = f"the API server refused RayService {name}: {error}"
        logger.info("%s", message)
        await self._events.record(rsg, reason="RayServiceRefused", message=message, type="Warning")
        return RayServiceState(
            name,
            existing,
            owned=True,
            refused=ConditionState("False", "RayServiceRefused", message),
        )

    async def _create_rayservice(
        self, rsg: Object, compiled: Compiled, cluster_hash: str
    ) -> RayService | None:
        from ray_operator.builders.serve_graph import build_rayservice

        body = build_rayservice(rsg, serve_config=compiled.text)
        body["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = cluster_hash
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            created = await self._client.create(RAY_SERVICE, body, namespace=namespace)
        except AlreadyExists:
            return None  # the cache is behind: the next reconcile sees it
        logger.info("created RayService %s", name)
        await self._events.record(
            rsg,
            reason="RayServiceCreated",
            message=f"created RayService {namespace}/{name} serving revision "
            f"{rules.revision(compiled.inputs[0])}",
        )
        return created

    async def _report_rayservice_update(
        self, rsg: Object, name: str, operations: list[JSON], compiled: Compiled | None
    ) -> None:
        paths = {operation["path"] for operation in operations}
        if "/spec/serveConfigV2" in paths and compiled is not None:
            revision = rules.revision(compiled.inputs[0])
            logger.info("updated serveConfigV2 of RayService %s to revision %s", name, revision)
            await self._events.record(
                rsg,
                reason="ServeConfigUpdated",
                message=f"updated serveConfigV2 of RayService {name} to revision {revision}",
            )
        if "/spec/rayClusterConfig" in paths:
            logger.info("updated the cluster spec of RayService %s", name)
            await self._events.record(
                rsg,
                reason="RayClusterSpecUpdated",
                message=f"updated rayClusterConfig of RayService {name}",
            )

    def _cluster_part(self, rsg: Object, memory: GraphMemory) -> tuple[JSON, str]:
        """The RayService's cluster fields as built from the spec, and their hash; built once
        per generation (the copy and the injection are O(spec))."""
        metadata = rsg["metadata"]
        version = (str(metadata.get("uid", "")), int(metadata.get("generation") or 0))
        if memory.cluster_part is not None and memory.cluster_part[0] == version:
            return memory.cluster_part[1], memory.cluster_part[2]
        from ray_operator.builders.serve_graph import build_rayservice

        spec = build_rayservice(rsg, serve_config="")["spec"]
        part = {key: spec[key] for key in CLUSTER_FIELDS if key in spec}
        text = json.dumps(part, sort_keys=True, separators=(",", ":"))
        part_hash = hashlib.sha256(text.encode()).hexdigest()
        memory.cluster_part = (version, part, part_hash)
        return part, part_hash

    async def delete_renamed_rayservices(self, rsg: Object, *, keep: str) -> None:
        """After a change of `spec.serviceName`, the RayService of the old name goes."""
        for rayservice in self._store.list_owned_by(RAY_SERVICE, rsg["metadata"]["uid"]):
            metadata = rayservice["metadata"]
            if metadata["name"] == keep or metadata.get("deletionTimestamp"):
                continue
            await self._client.delete_seen(RAY_SERVICE, rayservice)
            await self._events.record(
                rsg,
                reason="DeletedRayService",
                message=f"deleted RayService {metadata['name']}: spec.serviceName is now {keep}",
            )

    def _deployment(
        self, memory: GraphMemory, compiled: Compiled | None, stored: Object
    ) -> rules.Deployment | None:
        good = memory.good
        if good is None or compiled is None:
            return None
        previous = stored.get("artifact") or {}
        artifact: JSON = {
            "url": good.url,
            "digest": good.digest,
            # The same document found again after a restart keeps its time: nothing to write.
            "fetchedAt": previous.get("fetchedAt")
            if previous.get("digest") == good.digest and previous.get("fetchedAt")
            else good.fetched_at,
            "sizeBytes": good.size,
        }
        if good.etag is not None:
            artifact["etag"] = good.etag
        from ray_operator.validation.serve_graph import graph_summary

        graph = graph_summary(good.graph) if good.graph is not None else {}
        return rules.Deployment(artifact=artifact, graph=graph, serve_config_digest=compiled.digest)

    # --- status and scheduling -----------------------------------------------------------------

    async def write_status(self, rsg: Object, old: JSON, new: JSON) -> None:
        if not rules.status_changed(old, new):
            return
        # A Conflict (a stale cache) is retried from fresh data.
        await status_writer.write_status(self._client, RAY_SERVE_GRAPH, rsg, old, new)

    def next_look(
        self, rsg: Object, memory: GraphMemory, stored: Object, *, conflict: bool
    ) -> float | None:
        """Seconds until a fetch is due again (a retry, a waiting refresh or a poll), if any."""
        now = self._monotonic()
        due: list[float] = []
        if memory.pending is not None:
            due.append(PENDING_FETCH_RECHECK_SECONDS)
        if memory.retry_at is not None:
            due.append(memory.retry_at - now)
        else:
            if refresh_request(rsg, stored, memory) is not None:
                due.append(refresh_allowed_at(memory) - now)
            poll = _poll_seconds(rsg)
            if poll and memory.last_success is not None:
                due.append(memory.last_success + poll - now)
        if conflict:
            due.append(CONFLICT_RECHECK_SECONDS)
        return max(0.0, min(due)) if due else None

    # --- deletion ------------------------------------------------------------------------------

    async def finalize(self, rsg: Object) -> Result:
        """Being deleted: delete what it owns (no garbage collector does it here), then let go."""
        forgotten = self._memory.pop(ObjectKey.of(rsg), None)
        if forgotten is not None:
            forgotten.forget()
        if not has_finalizer(rsg, FINALIZER):
            return Result()
        uid = rsg["metadata"]["uid"]
        for kind in (RAY_SERVICE, CONFIG_MAP):
            for owned in self._store.list_owned_by(kind, uid):
                if owned["metadata"].get("deletionTimestamp"):
                    continue
                await self._client.delete_seen(kind, owned)
                logger.info("deleted %s %s", kind, owned["metadata"]["name"])
                if kind == RAY_SERVICE:
                    await self._events.record(
                        rsg,
                        reason="DeletedRayService",
                        message=f"deleted RayService {owned['metadata']['name']}",
                    )
        await remove_finalizer(self._client, RAY_SERVE_GRAPH, rsg, FINALIZER)
        return Result()


# --- pure helpers ------------------------------------------------------------------------------


def service_name(rsg: Object) -> str:
    """The RayService's name: `spec.serviceName`, else the graph's own."""
    return str((rsg.get("spec") or {}).get("serviceName") or rsg["metadata"]["name"])


def _mark_retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def retry_delay(failures: int, *, retryable: bool, poll: float | None) -> float:
    """Seconds before the next attempt after `failures` failures in a row (≥ 1)."""
    base = RETRY_BASE_SECONDS if retryable else PERMANENT_RETRY_BASE_SECONDS
    delay = min(RETRY_CAP_SECONDS, base * 2.0 ** min(max(failures - 1, 0), 32))
    return min(delay, poll) if poll else delay


def fetch_reason(
    rsg: Object, memory: GraphMemory, *, refresh: str | None, now: float
) -> str | None:
    """Why a fetch is due at monotonic time `now`, or None (`refresh`: a refresh request's value
    not yet handled)."""
    if memory.attempted_generation is None:
        return "first look at this object"
    if int(rsg["metadata"].get("generation") or 0) != memory.attempted_generation:
        return "the spec changed"
    if memory.retry_at is not None:
        # A refresh waits for the backoff's end too; the retry then serves it.
        return "retrying after a failure" if now >= memory.retry_at else None
    if refresh is not None and now >= refresh_allowed_at(memory):
        return f"refresh requested at {refresh}"
    poll = _poll_seconds(rsg)
    if poll and memory.last_success is not None and now >= memory.last_success + poll:
        return "poll interval elapsed"
    return None


def refresh_allowed_at(memory: GraphMemory) -> float:
    """The monotonic time from which a refresh request may start a fetch (the floor)."""
    if memory.last_attempt is None:
        return float("-inf")
    return memory.last_attempt + REFRESH_FLOOR_SECONDS


def refresh_request(rsg: Object, stored: Object, memory: GraphMemory) -> str | None:
    """The refresh annotation's value when it asks for a fetch not yet made: newer than the
    last one handled (by the status, or by this replica before its status write landed)."""
    value = ((rsg["metadata"].get("annotations") or {}).get(REFRESH_REQUESTED_ANNOTATION)) or ""
    if not isinstance(value, str) or not value or len(value) > MAX_REFRESH_VALUE_LENGTH:
        return None
    for handled in (stored.get("lastRefreshHandled"), memory.refresh_handled):
        if isinstance(handled, str) and not _newer(value, than=handled):
            return None
    return value


def _newer(value: str, *, than: str) -> bool:
    """Whether timestamp `value` is later than `than`; a value that is no timestamp counts as
    newer when it differs (so it is acted on once)."""
    mine, theirs = _parse_time(value), _parse_time(than)
    if mine is None or theirs is None:
        return value != than
    return mine > theirs


def _parse_time(value: str) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def _poll_seconds(rsg: Object) -> float | None:
    source = (rsg.get("spec") or {}).get("source") or {}
    seconds = poll_interval_seconds(source.get("pollInterval", "0s"))
    return seconds if seconds else None


def _cluster_operations(existing: Object, part: JSON, part_hash: str) -> list[JSON]:
    """JSON patch operations setting the cluster fields exactly (a merge patch would keep keys
    we dropped) and stamping their hash."""
    spec = existing.get("spec") or {}
    operations: list[JSON] = []
    for key in CLUSTER_FIELDS:
        if key in part:
            operations.append({"op": "add", "path": f"/spec/{key}", "value": part[key]})
        elif key in spec:
            operations.append({"op": "remove", "path": f"/spec/{key}"})
    if existing["metadata"].get("annotations"):
        path = "/metadata/annotations/" + _pointer(SPEC_HASH_ANNOTATION)
        operations.append({"op": "add", "path": path, "value": part_hash})
    else:
        operations.append(
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {SPEC_HASH_ANNOTATION: part_hash},
            }
        )
    return operations


def _pointer(key: str) -> str:
    """A JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _secret_value(secret: Object, reference: Object, *, field: str) -> bytes:
    """The decoded value of the referenced key; its absence is an error naming the key only."""
    key = str(reference.get("key") or "")
    name = (secret.get("metadata") or {}).get("name", "")
    encoded = (secret.get("data") or {}).get(key)
    if not encoded:
        raise FetchFailure(
            "SecretNotFound", f"Secret {name} ({field}) has no key {key!r}", retryable=False
        )
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise FetchFailure(
            "SecretNotFound",
            f"key {key!r} of Secret {name} ({field}) is not valid base64",
            retryable=False,
        ) from None


def _name(rsg: Object) -> str:
    return str(rsg["metadata"]["name"])


def _timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rayservegraph_controller(
    *, policy: FetchPolicy, limits: ClusterLimits = DEFAULT_LIMITS
) -> ControllerFactory:
    """The factory `app.run(..., controllers=[...])` takes, with the operator's fetch policy
    (`--serve-graph-allowed-hosts`, `--serve-graph-allow-loopback`)."""

    def factory(context: ControllerContext) -> RayServeGraphController:
        return RayServeGraphController(context, policy=policy, limits=limits)

    return factory


__all__ = [
    "FINALIZER",
    "SPEC_HASH_ANNOTATION",
    "RayServeGraphController",
    "fetch_reason",
    "rayservegraph_controller",
    "refresh_allowed_at",
    "refresh_request",
    "retry_delay",
    "service_name",
]
