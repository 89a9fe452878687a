"""The aiohttp side of the admission webhooks: one POST route per kind and verb.

    /validate-ray-io-v1-raycluster   /mutate-ray-io-v1-raycluster
    /validate-ray-io-v1-rayjob       /mutate-ray-io-v1-rayjob
    /validate-ray-io-v1-rayservice   /mutate-ray-io-v1-rayservice

(controller-runtime's path scheme, so manifests written for KubeRay's webhooks keep their paths.)
Bodies are capped at `MAX_REVIEW_BYTES` by the Application (aiohttp answers 413 above it); a body
that is not an AdmissionReview gets a 400; every review gets a 200 with an allow or a deny.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from ray_operator.builders.manifest import JSON
from ray_operator.webhooks.review import (
    ADMISSION_KINDS,
    GROUP,
    VERSION,
    AdmissionKind,
    MalformedReviewError,
    mutate_review,
    parse_review,
    validate_review,
)

# An UPDATE carries the object and the old object, each at most etcd's 1.5 MiB, plus the envelope.
MAX_REVIEW_BYTES = 4 * 1024 * 1024

Answer = Callable[[JSON, AdmissionKind], JSON]


def admission_paths(kind: AdmissionKind) -> tuple[str, str]:
    """The (validating, mutating) paths of a kind."""
    suffix = f"{GROUP.replace('.', '-')}-{VERSION}-{kind.singular}"
    return f"/validate-{suffix}", f"/mutate-{suffix}"


def admission_routes() -> list[web.RouteDef]:
    """The six POST routes."""
    routes = []
    for kind in ADMISSION_KINDS:
        validate_path, mutate_path = admission_paths(kind)
        routes.append(web.post(validate_path, _handler(kind, validate_review)))
        routes.append(web.post(mutate_path, _handler(kind, mutate_review)))
    return routes


def admission_application() -> web.Application:
    """An Application serving the admission routes, with the body cap."""
    application = web.Application(client_max_size=MAX_REVIEW_BYTES)
    application.add_routes(admission_routes())
    return application


def _handler(
    kind: AdmissionKind, answer: Answer
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()  # raises 413 beyond client_max_size
        try:
            review = parse_review(body)
        except MalformedReviewError as error:
            return web.Response(status=400, text=f"{error}\n")
        return web.json_response(answer(review, kind))

    return handle
