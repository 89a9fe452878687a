"""Keeps the cache of one kind (in one namespace, or all) in step with the API server.

A `Watcher` lists, then watches from the list's resourceVersion, forever:

- every event updates the `Store` and the resulting `Change` goes to `on_change` (the dispatcher
  that turns it into queue keys);
- bookmarks (requested with `allowWatchBookmarks`) only move the resume point forward;
- when the stream ends (the server's `timeoutSeconds`, a broken connection, an API server restart)
  it resumes from the last resourceVersion seen, after a jittered backoff if it failed;
- when no byte arrives for `inactivity_timeout` the stream is deemed stalled and restarted;
- on 410 Gone (the resume point fell out of the server's window) it lists again and diffs the
  list against the cache, so objects deleted meanwhile are reported as deletions.

Owned kinds are watched with a server-side label selector, so unrelated Pods never reach us.
`synced` is set after the first successful list (readiness).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ray_operator.runtime.client import KubeClient, WatchEvent
from ray_operator.runtime.errors import Gone, KubeError, error_from_status
from ray_operator.runtime.kinds import Kind
from ray_operator.runtime.queue import Backoff
from ray_operator.runtime.store import Change, Store

if TYPE_CHECKING:
    # Annotations only: ray_operator.metrics imports runtime.kinds (a cycle at run time).
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)


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
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        inactivity_timeout: float | None = None,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
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
        self._backoff = backoff or Backoff(base=0.5, cap=30.0)
        self._rng = rng or random.Random()
        self._resource_version: str | None = None  # where to resume; None: list first
        self._progressed = False  # the current watch delivered at least one event

    @property
    def name(self) -> str:
        """`watch:<Kind>` or `watch:<Kind>:<namespace>`: the task name and log prefix."""
        return f"watch:{self.kind}" + (f":{self.namespace}" if self.namespace else "")

    async def run(self) -> NoReturn:
        """List, then watch and resume forever (until cancelled)."""
        failures = 0  # in a row, without an event in between: drives the backoff
        while True:
            try:
                if self._resource_version is None:
                    await self._relist()
                    self.synced.set()
                await self._watch()
                failures = 0
                self._restarted("closed")
            except Gone:
                logger.info(
                    "%s: resourceVersion %s expired; listing again",
                    self.name,
                    self._resource_version,
                )
                self._restarted("gone")
                self._resource_version = None
            except KubeError as error:
                failures = 1 if self._progressed else failures + 1
                reason = "inactivity" if isinstance(error.__cause__, TimeoutError) else "error"
                self._restarted(reason)
                delay = self._backoff.delay(failures - 1) * self._rng.uniform(0.5, 1.0)
                logger.warning("%s: %s; retrying in %.1fs", self.name, error, delay)
                await asyncio.sleep(delay)

    async def _relist(self) -> None:
        listed = await self._client.list(
            self.kind, namespace=self.namespace, label_selector=self.label_selector
        )
        changes = self._store.replace(self.kind, listed.items, namespace=self.namespace)
        logger.info(
            "%s: listed %d objects (%d changes) at resourceVersion %s",
            self.name,
            len(listed.items),
            len(changes),
            listed.resource_version,
        )
        for change in changes:
            self._on_change(change)
        self._count()
        self._resource_version = listed.resource_version

    async def _watch(self) -> None:
        """Apply events from the last resourceVersion seen until the stream ends."""
        assert self._resource_version is not None
        self._progressed = False
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
                self._progressed = True
                self._resource_version = self._apply(event) or self._resource_version

    def _apply(self, event: WatchEvent) -> str | None:
        self._metrics.watch_events_total.labels(self.kind.kind, event.type).inc()
        obj = event.object
        if event.type == "ERROR":
            # The object is a Status; 410 (Gone) means our resume point expired.
            raise error_from_status(int(obj.get("code") or 500), obj, what=self.name)
        resource_version = (obj.get("metadata") or {}).get("resourceVersion")
        if event.type in ("ADDED", "MODIFIED"):
            obj.setdefault("kind", self.kind.kind)
            obj.setdefault("apiVersion", self.kind.api_version)
            self._on_change(self._store.upsert(self.kind, obj))
            self._count()
        elif event.type == "DELETED":
            obj.setdefault("kind", self.kind.kind)
            self._on_change(self._store.remove(self.kind, obj))
            self._count()
        return str(resource_version) if resource_version else None

    def _jittered_timeout(self) -> int:
        # Spread the server-side ends of watches so they do not all reconnect at once.
        return int(self._timeout_seconds * self._rng.uniform(1.0, 1.2))

    def _restarted(self, reason: str) -> None:
        self._metrics.watch_restarts_total.labels(self.kind.kind, reason).inc()

    def _count(self) -> None:
        self._metrics.cache_objects.labels(self.kind.kind).set(self._store.count(self.kind))
