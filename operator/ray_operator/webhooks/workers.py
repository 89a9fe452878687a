"""Worker processes for the large AdmissionReviews, started when one comes and let go when idle.

Parsing, validating and encoding a review is pure CPU, up to about a second for the largest body
the API server can send (issue 12: a 3.4 MB review took 2.0 s on the loop, and eight at once
pushed /healthz to 7 s). A thread would not do: pydantic-core and json hold the GIL for a whole
call, so the loop would still wait for them. `ReviewWorkers` runs that work in at most
`processes` worker processes (spawned, not forked: the parent runs threads and an event loop),
which the OS schedules beside the loop on other cores; the loop only moves bytes.

Almost every review is a few KB that is answered on the loop in well under a millisecond
(`handlers.INLINE_REVIEW_BYTES`); only the larger ones come here. So the pool costs nothing until
it is needed (each worker is an interpreter with the models loaded, ~100 MB, against an idle
budget of 50 MiB for the whole operator):

- No process exists until the first large review; that review pays for the start (~1 s of CPU:
  an interpreter importing the models). A second process is spawned only while the first is busy
  (`ProcessPoolExecutor` spawns on demand), up to `processes`.
- When no review has been in flight for `idle_seconds` (measured on the event loop's clock), the
  pool is shut down; the next large review starts a fresh one.
- A worker that dies (killed for memory, say) breaks the pool: the review it carried fails (500:
  the API server applies the webhook's failurePolicy), and a fresh pool takes the next ones.
- Workers ignore SIGINT (Ctrl-C of `make run` reaches the whole process group): the parent
  decides when they stop, by `stop()` or the idle timer.
- Workers are the first the kernel's OOM killer takes (`oom_score_adj` 1000, which any process
  may raise for itself). What a review holds in a worker grows with its shape, not only its size
  (measured: a 6.5 MiB review of 230,000 env vars took a worker from 71 to 341 MiB; a real 3.3 MB
  RayCluster to 144 MiB), and the bodies a worker may receive are bounded by the listener
  (`handlers.HELD_LARGE_REVIEW_BYTES`), not what they expand to. If a Pod's memory limit is
  reached anyway, a worker dies and fails its review (see above), before the operator's process
  with its watches, its leadership and every other admission.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ray_operator.spec.raycluster import JSON
from ray_operator.webhooks.review import AdmissionKind, MalformedReviewError, parse_review

Answer = Callable[[JSON, AdmissionKind], JSON]
# At most two, spawned on demand: a small operator Pod has two cores or more, and one large review
# should not wait behind another (eight 3.3 MB reviews at once take ~4 s of CPU in all: with one
# process the last would reach the API server's 5 s webhook timeout on a loaded node).
DEFAULT_PROCESSES = 2
# Five minutes: a burst of large reviews (an `kubectl apply` of many big objects, a controller's
# retries) reuses the warm pool; an operator that met one large review is back to its idle
# footprint soon after.
DEFAULT_IDLE_SECONDS = 300.0
# The highest: when the Pod runs out of memory, the kernel kills a worker before anything else.
OOM_SCORE_ADJ = 1000


class ReviewWorkers:
    """A lazily started pool of processes answering reviews: `await answer(body, kind, answer)`."""

    def __init__(
        self, processes: int = DEFAULT_PROCESSES, *, idle_seconds: float = DEFAULT_IDLE_SECONDS
    ) -> None:
        self.processes = processes
        self.idle_seconds = idle_seconds
        self._pool: ProcessPoolExecutor | None = None
        self._in_flight = 0
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        """Whether a pool exists (its processes may still be starting or stopping)."""
        return self._pool is not None

    async def answer(self, body: bytes, kind: AdmissionKind, answer: Answer) -> tuple[int, bytes]:
        """(HTTP status, response body) for a request body: 200 with the review's answer, or
        400 when it is not an AdmissionReview. Starts the pool if there is none."""
        loop = asyncio.get_running_loop()
        pool = self._current_pool()
        self._in_flight += 1
        self._cancel_idle_timer()
        try:
            return await loop.run_in_executor(pool, respond, body, kind, answer)
        except BrokenProcessPool:
            self._discard(pool)  # the first to notice; the next review starts a fresh pool
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._pool is not None:
                self._idle_timer = loop.call_later(self.idle_seconds, self._stop_if_idle)

    def stop(self) -> None:
        """Let the workers go (queued reviews are dropped: their connections close anyway)."""
        self._cancel_idle_timer()
        if self._pool is not None:
            self._discard(self._pool)

    def _current_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_prepare_worker,
            )
        return self._pool

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is pool:
            self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)

    def _stop_if_idle(self) -> None:
        self._idle_timer = None
        if self._in_flight == 0:
            self.stop()

    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None


def respond(body: bytes, kind: AdmissionKind, answer: Answer) -> tuple[int, bytes]:
    """Parse, answer and encode (in a worker, or inline for a small body): (status, body)."""
    try:
        review = parse_review(body)
    except MalformedReviewError as error:
        return 400, f"{error}\n".encode()
    return 200, json.dumps(answer(review, kind)).encode()


def _prepare_worker() -> None:
    """In each worker, first: ignore Ctrl-C, and offer itself to the OOM killer first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # not Linux, or /proc not mounted: nothing to offer
        Path("/proc/self/oom_score_adj").write_text(str(OOM_SCORE_ADJ))
