"""/metrics for the callers the API server vouches for (`--metrics-auth=kubernetes`).

The per-resource gauges name every watched object in their labels (as KubeRay's `kuberay_*` do),
so a plain /metrics tells whoever reaches the port from a Pod every tenant's object names
(issue 28, finding 9). As controller-runtime's `WithAuthenticationAndAuthorization` filter
(kubebuilder's `--metrics-secure`) and kube-rbac-proxy do, this listener speaks HTTPS and serves
a request only when

1. it carries `Authorization: Bearer <token>` (else 401, without asking anyone);
2. a TokenReview says whose token it is (else 401);
3. a SubjectAccessReview says that user may `get` the non-resource URL `/metrics` (else 403):
   the ClusterRole `ray-operator-metrics-reader` (config/metrics-auth) grants exactly that, and
   the cluster admin binds it to the scraper's ServiceAccount.

The operator needs `create` on tokenreviews and subjectaccessreviews: cluster-scoped APIs, so a
ClusterRole (`ray-operator-metrics-auth`), which the namespaced install cannot have.

Anyone who reaches the port may send tokens, so the reviews are bounded: decisions are cached by
the token's SHA-256 (allowed for `ALLOWED_TTL_SECONDS`, refused for `REFUSED_TTL_SECONDS`: a reader
whose binding is removed keeps reading up to a minute, as with controller-runtime's caches), at
most `MAX_CACHED_DECISIONS`; concurrent requests with one token share one review; at most
`MAX_CONCURRENT_REVIEWS` run at once, and a request that would start one more gets 429 at once.
A scraper's token is cached, so invented tokens delay its scrapes by one failed scrape at most.
The token itself is kept nowhere and never reaches a log line or an error text.

TLS: `tls.crt` and `tls.key` of `--metrics-cert-dir` (cert-manager's Secret, say), read again
every `CERT_RELOAD_SECONDS` so a renewal is served without a restart; without it, a self-signed
certificate made at start (kubebuilder's default too: the scraper skips verification, as
config/prometheus does; the token still goes only inside TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import hashlib
import logging
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from aiohttp import web

from ray_operator import pki
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import Forbidden, KubeError
from ray_operator.server import (
    BoundedSite,
    ReadLimits,
    bearer_token,
    bounded_application,
    bounded_runner,
    metrics_routes,
    start_site,
)
from ray_operator.settings import parse_address
from ray_operator.spec.kinds import SUBJECT_ACCESS_REVIEW, TOKEN_REVIEW
from ray_operator.webhooks.certificates import TLS_CERT_KEY as TLS_CERT_FILE
from ray_operator.webhooks.certificates import TLS_KEY_KEY as TLS_KEY_FILE
from ray_operator.webhooks.tls import ServingCertificate

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
ALLOWED_TTL_SECONDS = 60.0
REFUSED_TTL_SECONDS = 10.0
MAX_CACHED_DECISIONS = 1024
MAX_CONCURRENT_REVIEWS = 4
REVIEW_TIMEOUT_SECONDS = 10.0
CERT_RELOAD_SECONDS = 300.0
SELF_SIGNED_VALIDITY = datetime.timedelta(days=365)
METRICS_AUTH_ROLE = "ray-operator-metrics-auth"


class Decision(enum.Enum):
    """What the API server says of a token, for /metrics."""

    ALLOWED = "allowed"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"


class ReviewUnavailable(Exception):  # noqa: N818 (an outcome: 503)
    """The API server could not answer (or the operator may not ask it)."""


class TooManyReviews(Exception):  # noqa: N818 (an outcome: 429)
    """`MAX_CONCURRENT_REVIEWS` are already under way."""


class MetricsAccess:
    """Decides, through the API server, whether a bearer token may read /metrics."""

    def __init__(
        self,
        client: KubeClient,
        *,
        max_concurrent_reviews: int = MAX_CONCURRENT_REVIEWS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._max_concurrent = max_concurrent_reviews
        self._clock = clock
        self._decisions: dict[bytes, tuple[float, Decision]] = {}
        self._reviews: dict[bytes, asyncio.Task[Decision]] = {}
        self._warned_forbidden = False
        self.reviews_started = 0
        """How many token reviews were sent (for tests and figures)."""

    async def decide(self, token: str) -> Decision:
        """The decision for `token`; `TooManyReviews` or `ReviewUnavailable` when none can be
        had now."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        cached = self._decisions.get(digest)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        review = self._reviews.get(digest)
        if review is None:
            if len(self._reviews) >= self._max_concurrent:
                raise TooManyReviews
            review = asyncio.create_task(self._review(token), name="metrics-token-review")
            self._reviews[digest] = review
            review.add_done_callback(lambda done: self._remember(digest, done))
        # A scraper that hangs up must not cancel the review others wait for.
        return await asyncio.shield(review)

    def _remember(self, digest: bytes, review: asyncio.Task[Decision]) -> None:
        del self._reviews[digest]
        if review.cancelled() or review.exception() is not None:
            return  # an unavailable API server is asked again next time
        decision = review.result()
        ttl = ALLOWED_TTL_SECONDS if decision is Decision.ALLOWED else REFUSED_TTL_SECONDS
        now = self._clock()
        if len(self._decisions) >= MAX_CACHED_DECISIONS:
            self._forget_expired(now)
        while len(self._decisions) >= MAX_CACHED_DECISIONS:
            del self._decisions[next(iter(self._decisions))]  # the oldest decision
        self._decisions[digest] = (now + ttl, decision)

    def _forget_expired(self, now: float) -> None:
        for digest in [d for d, (expiry, _) in self._decisions.items() if expiry <= now]:
            del self._decisions[digest]

    async def _review(self, token: str) -> Decision:
        self.reviews_started += 1
        try:
            user = await self._authenticate(token)
            if user is None:
                return Decision.UNAUTHENTICATED
            return Decision.ALLOWED if await self._may_read(user) else Decision.FORBIDDEN
        except Forbidden:
            self._warn_forbidden_once()
            raise ReviewUnavailable from None
        except KubeError as error:
            logger.warning("cannot review a /metrics caller: %s", type(error).__name__)
            raise ReviewUnavailable from None

    async def _authenticate(self, token: str) -> Mapping[str, Any] | None:
        """The user the token is (TokenReview), or None."""
        review = {
            "apiVersion": TOKEN_REVIEW.api_version,
            "kind": TOKEN_REVIEW.kind,
            "spec": {"token": token},
        }
        answer = await self._client.create(
            TOKEN_REVIEW, review, request_timeout=REVIEW_TIMEOUT_SECONDS
        )
        status = answer.get("status") or {}
        user = status.get("user")
        return user if status.get("authenticated") and isinstance(user, dict) else None

    async def _may_read(self, user: Mapping[str, Any]) -> bool:
        """Whether `user` may `get` /metrics (SubjectAccessReview)."""
        review = {
            "apiVersion": SUBJECT_ACCESS_REVIEW.api_version,
            "kind": SUBJECT_ACCESS_REVIEW.kind,
            "spec": {
                "user": str(user.get("username") or ""),
                "uid": str(user.get("uid") or ""),
                "groups": list(user.get("groups") or ()),
                "extra": dict(user.get("extra") or {}),
                "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"},
            },
        }
        answer = await self._client.create(
            SUBJECT_ACCESS_REVIEW, review, request_timeout=REVIEW_TIMEOUT_SECONDS
        )
        return bool((answer.get("status") or {}).get("allowed"))

    def _warn_forbidden_once(self) -> None:
        if self._warned_forbidden:
            return
        self._warned_forbidden = True
        logger.warning(
            "/metrics answers 503: the operator may not create TokenReviews or "
            "SubjectAccessReviews; bind the ClusterRole %s to its ServiceAccount "
            "(config/metrics-auth), or run with --metrics-auth=none",
            METRICS_AUTH_ROLE,
        )

    async def close(self) -> None:
        """Cancel the reviews under way."""
        reviews = list(self._reviews.values())
        for review in reviews:
            review.cancel()
        if reviews:
            await asyncio.wait(reviews)


def access_guard(access: MetricsAccess) -> Callable[[web.Request], Any]:
    """The `metrics_routes` guard: None to serve, else the refusal."""

    async def guard(request: web.Request) -> web.Response | None:
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            return _refusal(401, "a bearer token is required\n")
        try:
            decision = await access.decide(token)
        except TooManyReviews:
            return _refusal(429, "too many callers being checked; retry\n", retry_after=1)
        except ReviewUnavailable:
            return _refusal(503, "callers cannot be checked right now\n")
        if decision is Decision.UNAUTHENTICATED:
            return _refusal(401, "the token is not valid\n")
        if decision is Decision.FORBIDDEN:
            return _refusal(403, f"forbidden: get on {METRICS_PATH} is not allowed\n")
        return None

    return guard


def _refusal(status: int, text: str, *, retry_after: int | None = None) -> web.Response:
    response = web.Response(status=status, text=text)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="ray-operator metrics"'
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


class SecureMetricsServer:
    """/metrics over HTTPS for authorized callers: a root task of every replica."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        client: KubeClient,
        address: str,
        cert_dir: Path | None = None,
        limits: ReadLimits | None = None,
    ) -> None:
        self.metrics = metrics
        self.access = MetricsAccess(client)
        self.host, self.port = parse_address(address)
        self.cert_dir = cert_dir
        self.limits = limits or ReadLimits()
        self.serving = ServingCertificate()
        self.listening = asyncio.Event()
        """Set once the listener accepts connections (`port` then holds the bound port)."""

    async def run(self) -> NoReturn:
        """Serve until cancelled."""
        self._load_certificate()
        application = bounded_application(self.limits)
        application.add_routes(metrics_routes(self.metrics, guard=access_guard(self.access)))
        runner = bounded_runner(application, self.limits)
        await runner.setup()
        try:
            site = BoundedSite(
                runner,
                self.host,
                self.port,
                limits=self.limits,
                ssl_context=self.serving.context,
            )
            await start_site(site, host=self.host, port=self.port, flags=("--metrics-addr",))
            self.port = int(runner.addresses[0][1])  # the real one when asked for port 0
            logger.info("serving /metrics over HTTPS to authorized callers on %s", self.port)
            self.listening.set()
            if self.cert_dir is not None:
                await self.run_reloads()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        finally:
            await self.access.close()
            with contextlib.suppress(Exception):
                await runner.cleanup()

    async def run_reloads(self) -> None:
        """Read `--metrics-cert-dir` again every `CERT_RELOAD_SECONDS` (a renewal is served
        without a restart; a failed read keeps the certificate being served)."""
        while True:
            await asyncio.sleep(CERT_RELOAD_SECONDS)
            try:
                self._load_certificate()
            except (OSError, ssl.SSLError) as error:
                logger.warning("keeping the metrics certificate: reading the new one: %s", error)

    def _load_certificate(self) -> None:
        if self.cert_dir is None:
            self.serving.load(self_signed_certificate(self.host))
            return
        # Two small local files: read on the loop, as the webhooks' certificate directory is.
        cert_path, key_path = self.cert_dir / TLS_CERT_FILE, self.cert_dir / TLS_KEY_FILE
        if cert_path.read_bytes() != self.serving.cert_pem:
            self.serving.load_files(cert_path, key_path)


def self_signed_certificate(host: str) -> pki.KeyPair:
    """A serving certificate from a throw-away CA, for this host's names and loopback."""
    ca = pki.create_ca("ray-operator-metrics-ca", valid_for=SELF_SIGNED_VALIDITY)
    names = sorted({"localhost", socket.gethostname()})
    addresses = ["127.0.0.1", "::1"] + ([host] if _is_ip(host) and host != "0.0.0.0" else [])
    return pki.issue_certificate(
        ca,
        "ray-operator-metrics",
        valid_for=SELF_SIGNED_VALIDITY,
        dns_names=names,
        ip_addresses=sorted(set(addresses)),
        server=True,
    )


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True


__all__ = [
    "Decision",
    "MetricsAccess",
    "ReviewUnavailable",
    "SecureMetricsServer",
    "TooManyReviews",
    "access_guard",
    "self_signed_certificate",
]
