"""Keeps the cache of one kind (in one namespace, or all) in step with the API server.

A `Watcher` lists, then watches from the list's resourceVersion, forever. The list is a
*streaming list* where the API server offers one (Kubernetes' WatchList, KEP-3157; on since 1.32):
one watch request whose stream begins with the existing objects, one event each, served from
the API server's watch cache. Each object is reduced to what the cache keeps (see
projection.py) as it arrives, so a restart with thousands of Pods never holds a page of full
Pods, and no paged LIST round trips are waited for. A server that refuses it (400/422: an older
one, or the feature turned off) gets paged LISTs from then on.


- every event updates the `Store` and the resulting `Change` goes to `on_change` (the dispatcher
  that turns it into queue keys);
- bookmarks (requested with `allowWatchBookmarks`) only move the resume point forward;
- when the server ends the stream cleanly (its `timeoutSeconds`) it resumes from the last
  resourceVersion seen;
- when the stream fails (a broken connection, an API server restart, no byte for
  `inactivity_timeout`) or answers 410 Gone (the resume point fell out of the server's window), it
  lists again — after a jittered backoff if it failed — and diffs the list against the cache, so
  objects deleted meanwhile are reported as deletions.

From the moment the stream fails until that LIST is applied, the watcher's part of the cache is
marked unsynced in `store.sync`: the cache may miss objects created just before the failure (a
resumed watch would replay them, but nothing says when the replay is complete; a LIST is a
consistent read). The workers hold reconciles that read this kind until it syncs again.

Reconnect backoff (`ReconnectBackoff`): when the API server does not answer at all, attempts are
at most ~2 s apart, so a server that comes back after a long outage is seen within seconds; when it
answers with an error (429, 5xx, 403) the delay grows to 30 s. A successful LIST resets the
first; a working watch resets both.

Owned kinds are watched with a server-side label selector, so unrelated Pods never reach us.
A kind may be watched through several disjoint selectors (Services: no one label is on all of
KubeRay's), one watcher each, sharing the kind's cache: each one's relist removes only objects of
its own part, and a DELETED that only says an object left its selector (its labels now put it in
another watcher's part, whose ADDED may have come first) does not remove the newer copy.
`synced` is set after the first successful list (readiness).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from ray_operator.runtime.client import KubeClient, Object, WatchEvent
from ray_operator.runtime.errors import (
    BadRequest,
    Gone,
    Invalid,
    KubeError,
    TransportError,
    error_from_status,
)
from ray_operator.runtime.queue import Backoff
from ray_operator.runtime.store import Change, Store
from ray_operator.spec.kinds import Kind, LabelSelector

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the BOOKMARK that ends a streaming list's initial events."""


class StreamingListCutShortError(TransportError):
    """A streaming list's stream ended before the BOOKMARK that ends its initial events."""


@dataclass(frozen=True, slots=True)
class ReconnectBackoff:
    """How long a watcher waits before it lists again after failures in a row."""

    unreachable: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=2.0))
    """No answer at all (connection refused or reset, timeout). A refused connection costs the
    API server nothing, and one that comes back must be seen within seconds: with a 30 s cap a
    change made after a 33 s outage was acted on 18 s late (issue 12, finding 6)."""
    answered: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=30.0))
    """The server answered with an error (429, 5xx, 403, …): it is there but unwell or refusing;
    give it room."""

    def delay(self, error: KubeError, *, failures: int, answered_failures: int) -> float:
        """The delay (before jitter) after `error`, the last of `failures` failures in a row,
        `answered_failures` of which the server answered with an error status."""
        if isinstance(error, TransportError):
            return self.unreachable.delay(failures - 1)
        return self.answered.delay(answered_failures - 1)


class Watcher:
    """List+watch of one kind into the store, with resumption, relist and reconnect."""

    def __init__(
        self,
        client: KubeClient,
        store: Store,
        kind: Kind,
        *,
        on_change: Callable[[Change], None],
        metrics: Metrics,
        namespace: str | None = None,
        label_selector: str | LabelSelector | None = None,
        timeout_seconds: int = 300,
        inactivity_timeout: float | None = None,
        backoff: ReconnectBackoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.label_selector = None if label_selector is None else str(label_selector)
        # A structured selector: this watcher is one of several of its kind (its part).
        self._part = label_selector if isinstance(label_selector, LabelSelector) else None
        self._sync_part = str(self._part) if self._part is not None else ""
        self.synced = asyncio.Event()
        self._client = client
        self._store = store
        self._on_change = on_change
        self._metrics = metrics
        self._timeout_seconds = timeout_seconds
        # Longer than the longest server-side timeout (see _jittered_timeout): a quiet but healthy
        # watch ends from the server's side first; only a stalled one reaches this.
        self._inactivity_timeout = (
            inactivity_timeout if inactivity_timeout is not None else timeout_seconds * 1.2 + 30
        )
        self._backoff = backoff or ReconnectBackoff()
        self._rng = rng or random.Random()
        self._resource_version: str | None = None  # where to resume; None: list first
        self._streaming_lists = True  # until the server refuses one
        # Failures in a row (they drive the backoff): all of them, reset by a successful LIST;
        # those the server answered with an error, reset only once a watch works too — or a
        # LIST that works before a watch that is refused (RBAC) would retry every 0.5 s.
        self._failures = 0
        self._answered_failures = 0
        store.sync.mark_unsynced(kind, namespace, self._sync_part)  # until the first LIST

    @property
    def name(self) -> str:
        """`watch:<Kind>` or `watch:<Kind>:<namespace>` (with `[<selector>]` after the kind when
        it is one of several of its kind): the task name and log prefix."""
        part = f"[{self.label_selector}]" if self._part is not None else ""
        return f"watch:{self.kind}{part}" + (f":{self.namespace}" if self.namespace else "")

    async def run(self) -> NoReturn:
        """List, then watch and resume forever (until cancelled)."""
        while True:
            try:
                if self._resource_version is not None:
                    await self._watch()
                elif self._streaming_lists:
                    await self._stream_list_then_watch()
                else:
                    await self._relist()
                    await self._watch()
                self._answered_failures = 0  # a clean end: the server's own timeout
                self._restarted("closed")
            except Gone:
                logger.info(
                    "%s: resourceVersion %s expired; listing again",
                    self.name,
                    self._resource_version,
                )
                self._restarted("gone")
                self._lost_track()
            except KubeError as error:
                reason = "inactivity" if isinstance(error.__cause__, TimeoutError) else "error"
                self._restarted(reason)
                self._lost_track()
                delay = self._next_delay(error)
                logger.warning("%s: %s; listing again in %.1fs", self.name, error, delay)
                await asyncio.sleep(delay)

    def _lost_track(self) -> None:
        """The stream broke: until a LIST is applied, the cache may miss recent objects."""
        self._resource_version = None
        self._store.sync.mark_unsynced(self.kind, self.namespace, self._sync_part)

    def _next_delay(self, error: KubeError) -> float:
        self._failures += 1
        if not isinstance(error, TransportError):
            self._answered_failures += 1
        delay = self._backoff.delay(
            error, failures=self._failures, answered_failures=self._answered_failures
        )
        return delay * self._rng.uniform(0.5, 1.0)

    async def _relist(self) -> None:
        listed = await self._client.list(
            self.kind,
            namespace=self.namespace,
            label_selector=self.label_selector,
            keep=functools.partial(self._store.keep, self.kind),
        )
        self._apply_list(listed.items, listed.resource_version)

    async def _stream_list_then_watch(self) -> None:
        """A streaming list, applied as one list at its end bookmark; then the same stream is
        watched on until it ends. Refused (400/422): paged LISTs from now on."""
        try:
            await self._consume_streaming_list()
        except StreamingListCutShortError as error:
            # Seen on restarts right after many deletions: the API server ends the stream before
            # its end bookmark, again and again while its watch cache catches up. A paged LIST is
            # read from etcd and does not wait for that cache: this time, list in pages at once
            # rather than back off and retry the stream (which cost seconds of readiness).
            logger.info("%s: %s; listing in pages this time", self.name, error)
            await self._relist()
            await self._watch()
        except (BadRequest, Invalid) as error:
            if self._resource_version is not None:
                raise  # refused after the list: a watch failure like any other
            logger.info("%s: no streaming list (%s); listing in pages", self.name, error)
            self._streaming_lists = False
            await self._relist()
            await self._watch()

    async def _consume_streaming_list(self) -> None:
        stream = self._client.watch(
            self.kind,
            namespace=self.namespace,
            resource_version=None,
            label_selector=self.label_selector,
            timeout_seconds=self._jittered_timeout(),
            inactivity_timeout=self._inactivity_timeout,
            send_initial_events=True,
        )
        listed: list[Object] | None = []
        async with contextlib.aclosing(stream):
            async for event in stream:
                self._answered_failures = 0
                if listed is None:
                    self._resource_version = self._apply(event) or self._resource_version
                elif event.type == "ADDED":
                    self._metrics.watch_events_total.labels(self.kind.key_kind, event.type).inc()
                    obj = self.kind.with_type_meta(event.object)
                    listed.append(self._store.keep(self.kind, obj))
                elif event.type == "BOOKMARK" and _ends_initial_events(event.object):
                    version = str(event.object["metadata"].get("resourceVersion", ""))
                    self._apply_list(listed, version)
                    listed = None
                else:
                    self._apply(event)  # an ERROR raises; nothing else comes before the end
        if listed is not None:
            raise StreamingListCutShortError("the streaming list ended before its end bookmark")

    def _apply_list(self, items: list[Object], resource_version: str) -> None:
        """Make the cache equal a complete list (of kept objects), and resume from its version."""
        changes = self._store.replace(
            self.kind, items, namespace=self.namespace, part=self._owns, kept=True
        )
        logger.info(
            "%s: listed %d objects (%d changes) at resourceVersion %s",
            self.name,
            len(items),
            len(changes),
            resource_version,
        )
        self._failures = 0  # the API server answers again
        self._resource_version = resource_version
        # Synced before the changes are dispatched: the keys they enqueue may run at once.
        self._store.sync.mark_synced(self.kind, self.namespace, self._sync_part)
        self.synced.set()
        for change in changes:
            self._on_change(change)
        self._count()

    async def _watch(self) -> None:
        """Apply events from the last resourceVersion seen until the stream ends."""
        assert self._resource_version is not None
        stream = self._client.watch(
            self.kind,
            namespace=self.namespace,
            resource_version=self._resource_version,
            label_selector=self.label_selector,
            timeout_seconds=self._jittered_timeout(),
            inactivity_timeout=self._inactivity_timeout,
        )
        # aclosing: when an event raises (410 Gone), the stream's connection is released now,
        # not whenever the abandoned generator happens to be collected.
        async with contextlib.aclosing(stream):
            async for event in stream:
                self._answered_failures = 0  # listing and watching both work
                self._resource_version = self._apply(event) or self._resource_version

    def _apply(self, event: WatchEvent) -> str | None:
        self._metrics.watch_events_total.labels(self.kind.key_kind, event.type).inc()
        obj = event.object
        if event.type == "ERROR":
            # The object is a Status; 410 (Gone) means our resume point expired.
            raise error_from_status(int(obj.get("code") or 500), obj, what=self.name)
        resource_version = (obj.get("metadata") or {}).get("resourceVersion")
        if event.type in ("ADDED", "MODIFIED"):
            self._on_change(self._store.upsert(self.kind, self.kind.with_type_meta(obj)))
            self._count()
        elif event.type == "DELETED" and self._holds(obj):
            self._on_change(self._store.remove(self.kind, self.kind.with_type_meta(obj)))
            self._count()
        return str(resource_version) if resource_version else None

    def _owns(self, cached: Mapping[str, Any]) -> bool:
        """Whether a cached object is in this watcher's part of its kind's cache."""
        return self._part is None or self._part.matches(cached["metadata"].get("labels"))

    def _holds(self, deleted: Mapping[str, Any]) -> bool:
        """Whether the cached copy of `deleted` is this watcher's to remove: not when the copy
        came from the watcher of another part (the object moved there, not gone)."""
        metadata = deleted.get("metadata") or {}
        cached = self._store.get(self.kind, metadata.get("namespace", ""), metadata.get("name", ""))
        return cached is None or self._owns(cached)

    def _jittered_timeout(self) -> int:
        # Spread the server-side ends of watches so they do not all reconnect at once.
        return int(self._timeout_seconds * self._rng.uniform(1.0, 1.2))

    def _restarted(self, reason: str) -> None:
        self._metrics.watch_restarts_total.labels(self.kind.key_kind, reason).inc()

    def _count(self) -> None:
        self._metrics.cache_objects.labels(self.kind.key_kind).set(self._store.count(self.kind))


def _ends_initial_events(bookmark: Mapping[str, Any]) -> bool:
    annotations = (bookmark.get("metadata") or {}).get("annotations") or {}
    return annotations.get(INITIAL_EVENTS_END) == "true"
