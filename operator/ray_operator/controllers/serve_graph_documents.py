"""What the RayServeGraph controller remembers of each graph between reconciles (`GraphMemory`),
in memory, per replica: the documents its fetches brought back, their outcome, and what was
compiled and built from them. Shared by the fetch scheduling (`serve_graph_fetch`) and the
controller (`rayservegraph`)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from ray_operator.spec.fetch_types import Artifact, NotModified
from ray_operator.status.rayservegraph import ConditionState

if TYPE_CHECKING:
    from ray_operator_io.v1alpha1 import serve_graph_pb2

    from ray_operator.validation.serve_graph import GraphRejected

JSON = dict[str, Any]

FetchOutcome = Artifact | NotModified


class FetchFailure(Exception):  # noqa: N818 (an outcome, raised only by the fetch path)
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
    cluster_part: tuple[tuple[str, int], JSON, str] | None = None
    """((uid, generation), the RayService's cluster fields as we build them, their hash)."""
    pending: asyncio.Task[FetchOutcome] | None = None
    """The fetch under way, if any: it runs beside the workers, so a slow server holds none."""

    def forget(self) -> None:
        """The object is gone or going: stop its fetch."""
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None
