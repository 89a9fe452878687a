"""Fetch scheduling for the RayServeGraph controller: when a graph's document is fetched
again, the fetch itself (beside the workers), its backoff, and what its outcome leaves in the
graph's memory (`serve_graph_documents.GraphMemory`: `Fetched` and `Parsed`, the latest and the
last good document).

A fetch is due when the object is new to this replica (after a restart: once, without
If-None-Match, since the bytes behind the stored ETag are not in memory), when its spec
changed (a new `metadata.generation`), every `spec.source.pollInterval`, and when the
annotation `ray-operator.io/refresh-requested-at` (the event endpoint writes it) is newer than
`status.lastRefreshHandled`. Otherwise the last document, kept in memory parsed, is reused.
The Secrets a fetch sends are read at each fetch (`serve_graph_secrets`).

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
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.controllers.serve_graph_documents import (
    Document,
    FetchFailure,
    FetchOutcome,
    GraphMemory,
)
from ray_operator.controllers.serve_graph_secrets import SourceSecrets
from ray_operator.servegraph.fetch import Fetcher
from ray_operator.spec.fetch_types import Artifact, ArtifactFetchError, ArtifactRequest, NotModified
from ray_operator.spec.serve_graph_names import MAX_DOCUMENT_BYTES, REFRESH_REQUESTED_ANNOTATION
from ray_operator.status import rayservegraph as rules
from ray_operator.status.rayservegraph import ConditionState
from ray_operator.validation.rayservegraph import poll_interval_seconds

if TYPE_CHECKING:
    from ray_operator_io.v1alpha1 import serve_graph_pb2

    from ray_operator.metrics import Metrics
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.validation.serve_graph import GraphRejected

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]

RETRY_BASE_SECONDS = 1.0
PERMANENT_RETRY_BASE_SECONDS = 10.0
RETRY_CAP_SECONDS = 300.0
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


class GraphFetches:
    """Fetches the documents of one operator's RayServeGraphs when due, one fetch per graph at a
    time, each beside the workers."""

    def __init__(
        self,
        client: KubeClient,
        *,
        events: EventRecorder,
        metrics: Metrics | None,
        fetcher: Fetcher,
        clock: Callable[[], datetime.datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._events = events
        self._metrics = metrics
        self._fetcher = fetcher
        self._secrets = SourceSecrets(client)
        self._now = clock
        self._monotonic = monotonic
        self._waiting_inline: set[str] = set()
        """Namespaces whose reconcile is waiting for a fetch it started (one at a time)."""

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
            self._fetch_failed(rsg, memory, failure)
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
        self._new_document(rsg, memory, document, stored=stored)

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
        token = await self._secrets.token(rsg, source)
        ca_bundle = await self._secrets.ca_bundle(rsg, source)
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

    def _fetch_failed(self, rsg: Object, memory: GraphMemory, failure: FetchFailure) -> None:
        memory.failures += 1
        delay = retry_delay(memory.failures, retryable=failure.retryable, poll=poll_seconds(rsg))
        memory.retry_at = self._monotonic() + delay
        logger.info(
            "fetch failed (%d in a row), next attempt in %.0fs: %s: %s",
            memory.failures,
            delay,
            failure.reason,
            failure.message,
        )
        self._events.record(
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

    def _new_document(
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
            self._events.record(
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
            self._events.record(rsg, reason="Fetched", message=f"fetched revision {revision}")
        from ray_operator.validation.serve_graph import graph_summary

        summary = graph_summary(document.graph)
        memory.parsed = ConditionState(
            "True",
            rules.PARSED_REASON,
            f"a graph of {len(summary['deployments'])} deployments, ingress {summary['ingress']!r}",
        )

    def due_in(self, rsg: Object, memory: GraphMemory, stored: Object) -> list[float]:
        """Seconds until each fetch that will be due (a retry, a waiting refresh or a poll), and
        until the pending fetch is looked at again."""
        now = self._monotonic()
        due: list[float] = []
        if memory.pending is not None:
            due.append(PENDING_FETCH_RECHECK_SECONDS)
        if memory.retry_at is not None:
            due.append(memory.retry_at - now)
        else:
            if refresh_request(rsg, stored, memory) is not None:
                due.append(refresh_allowed_at(memory) - now)
            poll = poll_seconds(rsg)
            if poll and memory.last_success is not None:
                due.append(memory.last_success + poll - now)
        return due


# --- pure helpers ------------------------------------------------------------------------------


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
    poll = poll_seconds(rsg)
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


def poll_seconds(rsg: Object) -> float | None:
    """`spec.source.pollInterval` in seconds; None when it is zero (no polling)."""
    source = (rsg.get("spec") or {}).get("source") or {}
    seconds = poll_interval_seconds(source.get("pollInterval", "0s"))
    return seconds if seconds else None


def _timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
