"""How the RayJob and RayService controllers reach a cluster's Ray dashboard.

`DashboardAccess.open(cluster)` resolves the dashboard URL (a `DashboardResolver`, given the
cluster's own head Pod from the cache: the in-cluster address is that Pod's IP, never a name a
tenant's Service could alias elsewhere, see `dashboard/resolver.py`), reads the
cluster's Ray auth token from its Secret when `authOptions.mode` is `token` (KubeRay's
`GetRayDashboardClientFunc`: Secret `authOptions.secretName`, else the cluster's name, key
`auth_token`) and hands out a `DashboardClient` for one reconcile.

A dashboard that failed to answer is not asked again for a while (1s, doubling up to 30s, per
cluster): a reconcile that would only wait for the same timeout again fails at once and requeues,
so a dead dashboard costs the shared reconcile workers almost nothing and never delays other
objects. The token is read per reconcile, kept only in the client, and never logged.

`report_reachability` tells the user when a dashboard cannot be reached, and why: the
`DashboardReachable` condition (`status/dashboard_reachability.py`), plus a Warning Event and a
WARNING log line only when the cause changes (DEBUG while it stays), and a Normal Event once it
answers again.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_operator.dashboard.client import (
    DashboardClient,
    DashboardEndpoint,
    DashboardOptions,
    check_serve_proxy,
)
from ray_operator.dashboard.resolver import (
    DashboardResolver,
    InClusterResolver,
    head_pod_to_address,
)
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import NotFound
from ray_operator.runtime.events import EventRecorder
from ray_operator.runtime.store import StoreView
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.dashboard_errors import (
    NO_ADDRESS,
    UNAUTHORIZED,
    DashboardCoolingDown,
    DashboardError,
    DashboardUnavailable,
)
from ray_operator.spec.kinds import POD, SECRET
from ray_operator.spec.object_names import check_name
from ray_operator.spec.secret_values import MissingSecretKeyError, secret_text
from ray_operator.status.dashboard_reachability import (
    Reachability,
    cause_changed,
    with_reachability,
)
from ray_operator.urls import shown_url

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster


logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

INITIAL_COOLDOWN = 1.0
MAX_COOLDOWN = 30.0


@dataclass
class _Failures:
    count: int
    until: float


class DashboardAccess:
    """Dashboard clients for RayClusters, with per-cluster cool-down after failures."""

    def __init__(
        self,
        client: KubeClient,
        *,
        store: StoreView | None = None,
        resolver: DashboardResolver | None = None,
        options: DashboardOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        # Where the head Pods are found; without it no in-cluster address is known.
        self._store = store
        self.resolver: DashboardResolver = resolver or InClusterResolver()
        self.options = options or DashboardOptions()
        self._clock = clock
        self._failures: dict[str, _Failures] = {}
        # `<namespace>/<name>` of a RayJob or RayService -> the cause last told (None: answered).
        self._told: dict[str, str | None] = {}

    @contextlib.asynccontextmanager
    async def open(self, cluster: RayCluster) -> AsyncIterator[DashboardClient]:
        """A client for `cluster`'s dashboard; `DashboardUnavailable` while cooling down."""
        key = _cluster_key(cluster)
        failures = self._failures.get(key)
        if failures is not None and self._clock() < failures.until:
            raise DashboardCoolingDown(
                f"dashboard of RayCluster {key} failed {failures.count} time(s) in a row; "
                f"not asking again for {failures.until - self._clock():.1f}s"
            )
        url = self.dashboard_url(cluster)
        if not url:
            # No request: the only address the operator uses is this cluster's own head Pod.
            raise DashboardUnavailable(
                f"no dashboard address for RayCluster {key}: none is configured and no head Pod "
                "of this cluster has an IP yet",
                cause=NO_ADDRESS,
            )
        endpoint = DashboardEndpoint(url, token=await self._token(cluster))
        async with DashboardClient(endpoint, options=self.options) as dashboard:
            try:
                yield dashboard
            except DashboardError as error:
                # Unreachable, 5xx or refused credentials: asking again at once would only fail
                # again. A job it does not know or an odd answer is an answer: no cool-down.
                if error.unreachable_cause is not None:
                    self._failed(key)
                raise
            self._failures.pop(key, None)

    def dashboard_url(self, cluster: RayCluster) -> str | None:
        """The base URL `open` asks for `cluster`: as the resolver says, given its head Pod."""
        return self.resolver.dashboard_url(cluster, self.head_pod(cluster))

    def head_pod(self, cluster: RayCluster) -> Pod | None:
        """`cluster`'s own head Pod with an IP, as cached (`head_pod_to_address`)."""
        if self._store is None:
            return None
        metadata = cluster.get("metadata") or {}
        pods = self._store.list_for_cluster(
            POD, metadata.get("namespace", ""), metadata.get("name", "")
        )
        return head_pod_to_address(cluster, pods)

    def reachability(
        self, cluster: RayCluster, error: DashboardError | None
    ) -> Reachability | None:
        """What a check of `cluster`'s dashboard found; None when it learnt nothing (the
        dashboard was cooling down, or answered with something we could not use)."""
        asked = self.dashboard_url(cluster)
        url = shown_url(asked) if asked else ""
        if error is None:
            return Reachability(url=url, cause=None)
        cause = error.unreachable_cause
        if cause is None:
            return None
        return Reachability(url=url, cause=cause, detail=str(error))

    def report_reachability(
        self,
        owner: Object,
        status: JSON,
        found: Reachability | None,
        *,
        events: EventRecorder,
        now: datetime.datetime,
    ) -> JSON:
        """`status` with the `DashboardReachable` condition for `found`; an Event and a log
        line at INFO or above only when the cause changed since the condition last said."""
        if found is None:
            return status
        key = _cluster_key(owner)  # `<namespace>/<name>` of any object
        what = f"{owner['kind']} {key}"
        # The condition remembers across restarts; this memory covers a status write that
        # failed after the Event went out (a Conflict, then a retry from the same cache).
        already_told = key in self._told and self._told[key] == found.cause
        self._told[key] = found.cause
        if already_told or not cause_changed(status, found):
            if found.cause is not None:
                logger.debug("%s: %s", what, found.message)
        elif found.cause is not None:
            logger.warning("%s: %s", what, found.message)
            events.record(
                owner, reason="DashboardUnreachable", message=found.message, type="Warning"
            )
        else:
            logger.info("%s: %s", what, found.message)
            events.record(owner, reason="DashboardReachable", message=found.message)
        generation = int(owner["metadata"].get("generation") or 0)
        return with_reachability(status, found, now=now, generation=generation)

    def forget_owner(self, namespace: str, name: str) -> None:
        """Drop what was reported for a RayJob or RayService that is gone."""
        self._told.pop(f"{namespace}/{name}", None)

    def cooldown_remaining(self, cluster: RayCluster) -> float:
        """Seconds before the dashboard of `cluster` is asked again (0: now)."""
        failures = self._failures.get(_cluster_key(cluster))
        return 0.0 if failures is None else max(0.0, failures.until - self._clock())

    async def serve_proxy_healthy(self, cluster: RayCluster, head_pod: Pod) -> bool | None:
        """Whether the head's Serve proxy is healthy; None when its address is unknown (the
        in-cluster resolver answers only for `cluster`'s own head Pod)."""
        url = self.resolver.serve_proxy_url(cluster, head_pod)
        if not url:
            return None
        return await check_serve_proxy(url, options=self.options)

    def _failed(self, key: str) -> None:
        previous = self._failures.get(key)
        count = 1 if previous is None else previous.count + 1
        cooldown = min(MAX_COOLDOWN, INITIAL_COOLDOWN * 2 ** (count - 1))
        self._failures[key] = _Failures(count, self._clock() + cooldown)

    async def _token(self, cluster: RayCluster) -> str | None:
        options = cluster.get("spec", {}).get("authOptions", {})
        if options.get("mode") != "token":
            return None
        metadata = cluster["metadata"]
        secret_name = options.get("secretName") or check_name(metadata["name"])
        try:
            secret = await self._client.get(SECRET, secret_name, namespace=metadata["namespace"])
        except NotFound as error:
            raise DashboardUnavailable(
                f"Ray auth Secret {metadata['namespace']}/{secret_name} not found",
                cause=UNAUTHORIZED,
            ) from error
        try:
            # Not strict base64: this reader never was (the API server's `data` is base64 anyway).
            return secret_text(secret, names.AUTH_TOKEN_SECRET_KEY, strict=False)
        except MissingSecretKeyError:
            raise DashboardUnavailable(
                f"Ray auth Secret {metadata['namespace']}/{secret_name} has no "
                f"{names.AUTH_TOKEN_SECRET_KEY!r} key",
                cause=UNAUTHORIZED,
            ) from None


def _cluster_key(cluster: Mapping[str, Any]) -> str:
    metadata = cluster.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
