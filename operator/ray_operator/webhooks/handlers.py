"""The aiohttp side of the admission webhooks: one POST route per kind and verb.

    /validate-ray-io-v1-raycluster   /mutate-ray-io-v1-raycluster
    /validate-ray-io-v1-rayjob       /mutate-ray-io-v1-rayjob
    /validate-ray-io-v1-rayservice   /mutate-ray-io-v1-rayservice
    /validate-ray-operator-io-v1alpha1-rayservegraph
    /mutate-ray-operator-io-v1alpha1-rayservegraph

(controller-runtime's path scheme, so manifests written for KubeRay's webhooks keep their paths.)
Requests are read within `REVIEW_READ_LIMITS` (`server.bounded_reads`: the body in 10 s and at most
`MAX_REVIEW_BYTES`, else 408/413); a body that is not an AdmissionReview gets a 400; every review
gets a 200 with an allow or a deny. Before a body is read, room for it is reserved: reviews above
`INLINE_REVIEW_BYTES` share `HELD_LARGE_REVIEW_BYTES` until answered, smaller ones their own
`HELD_INLINE_REVIEW_BYTES`; a review that does not fit gets 429 with `Retry-After: 1`, unread
(issue 28: fifty 7 MiB bodies from anyone who could reach the port were all held at once).

A review of at most `INLINE_REVIEW_BYTES` is parsed, validated and encoded on the event loop
(well under a millisecond for a real object, ~20 ms for the most hostile one). A larger one goes
to worker processes owned by the Application (`workers.ReviewWorkers`, started by the first large
review and stopped when idle): a multi-megabyte review costs up to a second of CPU, which on the
loop stalled /healthz, watches and every reconcile (issue 12).

With the operator's `Metrics`, each answer is counted (`ray_operator_admission_reviews_total`, by
webhook, kind and result: allowed, denied, malformed) and timed
(`ray_operator_admission_review_duration_seconds`), from the body read to the answer encoded.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from ray_operator.features import FeatureGates
from ray_operator.server import BodyLane, ReadLimits, bounded_application
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.webhooks.review import (
    ADMISSION_KINDS,
    AdmissionKind,
    mutate_review,
    refuse_gated_review,
    validate_review,
)
from ray_operator.webhooks.workers import Answer, ReviewWorkers, respond

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics

DEFAULT_GATES = FeatureGates()

# The API server refuses request bodies above 3 MiB. A review carries the object as the API
# server re-encodes it (the request's at most 3 MiB, plus defaults and managedFields) and, on an
# UPDATE, the old object (stored, so within etcd's 1.5 MiB, re-encoded as JSON): 2 x 3 MiB for
# both, plus 1 MiB for the envelope and the growth.
MAX_REVIEW_BYTES = 7 * 1024 * 1024
# Reviews up to this size are answered on the event loop; larger ones in a worker process. Work is
# about linear in the body, so the bound is set by the most expensive bytes. Measured (CPU time of
# parse + answer + encode, the worse of validate and mutate, 2-core test machine): 64 KiB of
# hostile but schema-valid padding costs at most 12-19 ms (394 one-container worker groups, or
# 1432 one-letter head containers; 2054 env vars 5 ms, 4697 rayStartParams 5 ms, a deny with
# every group invalid 12 ms), while every real object we know is a few KB (the samples: 0.7-4.3
# KB; an UPDATE carries two, with managedFields) and costs well under a millisecond. At 256 KiB
# the worst was 80 ms, enough for a handful of concurrent reviews to hold /healthz near a second.
INLINE_REVIEW_BYTES = 64 * 1024
# Large reviews held at once, from their first byte read to their answer (queued for a worker or
# in one): 32 MiB. Eight 3.3 MB reviews at once (a burst the API server really sends, issue 12)
# fit; four of the largest (7 MiB) do. What this admits is at most ~5 s of CPU for the two
# workers (about 0.5 s per 3.3 MB): within the API server's 5 s per call. The loop holds a body
# at most about twice while reading it and handing it to a worker (aiohttp's buffer, then the
# bytes and their pickle).
HELD_LARGE_REVIEW_BYTES = 32 * 1024 * 1024
# Small reviews (the everyday ones: a few KB) draw on their own 8 MiB: 128 of the largest inline
# ones at once, thousands of real ones, and never a byte of the large reviews' room.
HELD_INLINE_REVIEW_BYTES = 8 * 1024 * 1024
REVIEW_READ_LIMITS = ReadLimits(
    max_body_bytes=MAX_REVIEW_BYTES,
    held_body_bytes=HELD_LARGE_REVIEW_BYTES,
    small_bodies=BodyLane(max_body_bytes=INLINE_REVIEW_BYTES, held_bytes=HELD_INLINE_REVIEW_BYTES),
    # An API server opens one connection per call in flight (HTTP/1.1), and admitting Ray
    # objects keeps a handful in flight. Each connection can cost ~1 MiB (measured: TLS and
    # read buffers filled by a body that is then refused), so 64 bound that to ~64 MiB.
    max_connections=64,
)


def admission_paths(kind: AdmissionKind) -> tuple[str, str]:
    """The (validating, mutating) paths of a kind."""
    suffix = f"{kind.group.replace('.', '-')}-{kind.version}-{kind.singular}"
    return f"/validate-{suffix}", f"/mutate-{suffix}"


def admission_routes(
    workers: ReviewWorkers,
    *,
    limits: ClusterLimits = DEFAULT_LIMITS,
    gates: FeatureGates = DEFAULT_GATES,
    metrics: Metrics | None = None,
) -> list[web.RouteDef]:
    """The POST routes (validate and mutate, per kind), answered by `workers`; a kind whose
    feature gate is off is refused by name."""
    validate = functools.partial(validate_review, limits=limits)
    routes = []
    for kind in ADMISSION_KINDS:
        validate_path, mutate_path = admission_paths(kind)
        gated_off = kind.gate is not None and not gates.enabled(kind.gate)
        answer = refuse_gated_review if gated_off else validate
        validating = _Observed("validate", kind.kind, metrics)
        mutating = _Observed("mutate", kind.kind, metrics)
        routes.append(web.post(validate_path, _handler(kind, answer, workers, validating)))
        routes.append(web.post(mutate_path, _handler(kind, mutate_review, workers, mutating)))
    return routes


def admission_application(
    *,
    limits: ClusterLimits = DEFAULT_LIMITS,
    gates: FeatureGates = DEFAULT_GATES,
    read_limits: ReadLimits = REVIEW_READ_LIMITS,
    metrics: Metrics | None = None,
) -> web.Application:
    """An Application serving the admission routes, with bounded reads and its worker processes
    for large reviews (none until the first; all stopped by the runner's `cleanup()`)."""
    application = bounded_application(read_limits)
    workers = ReviewWorkers()
    application.add_routes(admission_routes(workers, limits=limits, gates=gates, metrics=metrics))

    async def stop_workers(_: web.Application) -> None:
        workers.stop()

    application.on_cleanup.append(stop_workers)
    return application


class _Observed:
    """Counts and times the answers of one webhook (validate or mutate) of one kind."""

    def __init__(self, webhook: str, kind: str, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self._labels = (webhook, kind)

    def record(self, status: int, payload: bytes, seconds: float) -> None:
        if self._metrics is None:
            return
        self._metrics.admission_duration_seconds.labels(*self._labels).observe(seconds)
        result = "malformed" if status != 200 else _verdict(payload)
        self._metrics.admission_reviews_total.labels(*self._labels, result).inc()


def _verdict(review: bytes) -> str:
    """`denied` or `allowed`, read from an encoded answer without decoding it again: the key
    only appears unescaped as a key (in strings json.dumps escapes every quote), so a message
    quoting it cannot be mistaken for it."""
    return "denied" if b'"allowed": false' in review else "allowed"


def _handler(
    kind: AdmissionKind, answer: Answer, workers: ReviewWorkers, observed: _Observed
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()  # already read by `bounded_reads`, in time and size
        started = time.perf_counter()
        if len(body) <= INLINE_REVIEW_BYTES:
            status, payload = respond(body, kind, answer)
        else:
            status, payload = await workers.answer(body, kind, answer)
        observed.record(status, payload, time.perf_counter() - started)
        content_type = "application/json" if status == 200 else "text/plain"
        return web.Response(status=status, body=payload, content_type=content_type)

    return handle
