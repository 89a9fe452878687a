"""Leader election on a coordination.k8s.io/v1 Lease: only the holder reconciles.

Our own rather than kubernetes-asyncio's `leaderelection`, which compares wall-clock times, has no
per-request timeouts, ignores the record's `leaseDurationSeconds` and cannot release the lease.
The algorithm is client-go's:

- A candidate reads the Lease every `retry_period`. It takes the Lease when nobody holds it
  (`holderIdentity` empty: released), or when the record has not changed for the record's own
  `leaseDurationSeconds` as measured on *our* monotonic clock since we first saw that record — no
  comparison of timestamps written by other machines. Writes are compare-and-swap (PUT with
  resourceVersion), so two candidates cannot both win.
- The leader renews every `retry_period`. Each request's timeout ends at the renew deadline. If no
  renewal succeeded for `renew_deadline` (< `lease_duration`), it steps down: `may_write()` turns
  false at that instant — before any other replica may consider the lease expired — so a stalled
  leader stops writing in time even if a reconcile is still running; the app then cancels the
  workers.
- On a clean shutdown the leader releases the Lease (empty `holderIdentity`, duration 1s), so a
  standby takes over at its next retry instead of waiting out the lease.

`AlwaysLeader` stands in with `--no-leader-elect`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ray_operator.runtime.client import KubeClient, Object
from ray_operator.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound, NotLeader
from ray_operator.spec.kinds import LEASE

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)


class Leadership(Protocol):
    """What the app needs to know about leadership."""

    leading: asyncio.Event
    """Set while this replica may reconcile."""
    following: asyncio.Event
    """Set while it may not (the complement of `leading`)."""

    def check_may_write(self) -> None:
        """Raise `NotLeader` unless writes are allowed now (the API client's write guard)."""
        ...

    async def run(self) -> NoReturn:
        """Campaign, lead, and campaign again after losing, until cancelled."""
        ...

    async def release(self) -> None:
        """Give up leadership so another replica takes over without waiting out the lease."""
        ...


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    """Where the Lease is and how it is timed (client-go's defaults: 15s/10s/2s)."""

    name: str
    """Lease name."""
    namespace: str
    """Lease namespace."""
    identity: str
    """This replica's holderIdentity (unique per process)."""
    lease_duration: float = 15.0
    """How long others wait after the last renewal before taking over."""
    renew_deadline: float = 10.0
    """How long the leader keeps trying to renew before it stops writing and steps down."""
    retry_period: float = 2.0
    """How often candidates try to acquire and the leader renews."""

    def __post_init__(self) -> None:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs retry_period < renew_deadline < lease_duration"
                f" (got {self.retry_period}, {self.renew_deadline},"
                f" {self.lease_duration})"
            )


class LeaderElector:
    """Campaigns for, holds, renews and releases one Lease."""

    def __init__(self, client: KubeClient, config: LeaseConfig, *, metrics: Metrics) -> None:
        self.config = config
        self.leading = asyncio.Event()
        self.following = asyncio.Event()
        self.following.set()
        self._client = client
        self._metrics = metrics
        self._observed: tuple[Any, ...] | None = None  # the last record seen, to detect change
        self._observed_at = 0.0  # loop time when `_observed` last changed
        self._renewed_at = float("-inf")  # loop time when our last successful write was sent
        self._lease: Object | None = None  # the Lease as we last wrote/read it
        # Renew from our own last write (one PUT, its resourceVersion the compare-and-swap) until
        # a Conflict says someone else wrote; then read the Lease again first.
        self._own_write_is_current = False
        self._failing = False  # in a streak of failed requests (to log it once)
        self._standby_for = ""  # the leader we last said we stand by for (to say it once)
        metrics.leader.labels(config.name).set(0)

    def check_may_write(self) -> None:
        expired = self._now() >= self._renewed_at + self.config.renew_deadline
        if not self.leading.is_set() or expired:
            raise NotLeader(
                f"lease {self.config.namespace}/{self.config.name} is not held by "
                f"{self.config.identity}"
            )

    async def run(self) -> NoReturn:
        while True:
            await self._acquire()
            self._set_leading(True)
            logger.info(
                "%s/%s: %s became the leader",
                self.config.namespace,
                self.config.name,
                self.config.identity,
            )
            await self._renew_until_lost()
            self._set_leading(False)
            logger.warning(
                "%s/%s: %s lost the lease (no renewal for %.1fs); stopped writing",
                self.config.namespace,
                self.config.name,
                self.config.identity,
                self.config.renew_deadline,
            )

    async def release(self) -> None:
        was_leading = self.leading.is_set()
        self._set_leading(False)
        self._own_write_is_current = False
        if not was_leading or self._lease is None:
            return
        lease = self._lease
        for _ in range(2):
            try:
                await self._client.replace(
                    LEASE, _released(lease), request_timeout=self.config.retry_period
                )
            except Conflict:
                # A renewal cancelled mid-flight may have landed: re-read, release if still ours.
                try:
                    lease = await self._client.get(
                        LEASE,
                        self.config.name,
                        namespace=self.config.namespace,
                        request_timeout=self.config.retry_period,
                    )
                except KubeError:
                    break
                if (lease.get("spec") or {}).get("holderIdentity") != self.config.identity:
                    return
                continue
            except KubeError as error:
                logger.warning(
                    "%s/%s: could not release the lease: %s",
                    self.config.namespace,
                    self.config.name,
                    error,
                )
                return
            logger.info(
                "%s/%s: %s released the lease",
                self.config.namespace,
                self.config.name,
                self.config.identity,
            )
            return
        logger.warning(
            "%s/%s: could not release the lease", self.config.namespace, self.config.name
        )

    async def _acquire(self) -> None:
        while True:
            if await self._try_acquire_or_renew(request_timeout=self.config.retry_period):
                return
            await asyncio.sleep(self.config.retry_period)

    async def _renew_until_lost(self) -> None:
        while True:
            await asyncio.sleep(self.config.retry_period)
            while True:
                remaining = self._renewed_at + self.config.renew_deadline - self._now()
                if remaining <= 0:
                    return
                timeout = min(remaining, self.config.retry_period)
                if await self._try_acquire_or_renew(request_timeout=timeout):
                    break
                await asyncio.sleep(min(self.config.retry_period, max(remaining, 0.0)))

    async def _try_acquire_or_renew(self, *, request_timeout: float) -> bool:
        started = self._now()
        if self._own_write_is_current and self._lease is not None:
            return await self._update(self._lease, started, request_timeout=request_timeout)
        try:
            lease = await self._client.get(
                LEASE,
                self.config.name,
                namespace=self.config.namespace,
                request_timeout=request_timeout,
            )
        except NotFound:
            return await self._create(started, request_timeout=request_timeout)
        except KubeError as error:
            self._log_failure("cannot read the lease", error)
            return False
        self._failing = False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (
            holder,
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        if record != self._observed:
            self._observed, self._observed_at = record, started
        # Honour the holder's own duration, measured on our clock from when the record changed.
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        if holder and holder != self.config.identity and started < self._observed_at + duration:
            self._log_standby(holder, duration)
            return False
        return await self._update(lease, started, request_timeout=request_timeout)

    async def _create(self, started: float, *, request_timeout: float) -> bool:
        now = _micro_time()
        lease = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.config.identity,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
                "leaseDurationSeconds": round(self.config.lease_duration),
            },
        }
        try:
            created = await self._client.create(LEASE, lease, request_timeout=request_timeout)
        except AlreadyExists:
            return False
        except KubeError as error:
            self._log_failure("cannot create the lease", error)
            return False
        self._wrote(created, started)
        return True

    async def _update(self, lease: Object, started: float, *, request_timeout: float) -> bool:
        spec = dict(lease.get("spec") or {})
        now = _micro_time()
        if spec.get("holderIdentity") != self.config.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            holderIdentity=self.config.identity,
            renewTime=now,
            leaseDurationSeconds=max(1, round(self.config.lease_duration)),
        )
        # resourceVersion from the read makes this a compare-and-swap: a racing writer wins, we
        # get Conflict and look again next period.
        try:
            updated = await self._client.replace(
                LEASE, {**lease, "spec": spec}, request_timeout=request_timeout
            )
        except Conflict:
            self._own_write_is_current = False
            return False
        except KubeError as error:
            # It may have landed all the same: the next renewal then meets a Conflict and reads.
            self._log_failure("cannot update the lease", error)
            return False
        self._wrote(updated, started)
        return True

    def _log_standby(self, holder: str, duration: float) -> None:
        # Once per leader, not per retry: a standby would otherwise say nothing at all, or the
        # same line every retry period.
        if holder == self._standby_for:
            return
        self._standby_for = holder
        logger.info(
            "%s/%s: standby: %s leads; %s takes over if it stops renewing for %.0fs",
            self.config.namespace,
            self.config.name,
            holder,
            self.config.identity,
            duration,
        )

    def _log_failure(self, what: str, error: KubeError) -> None:
        # The first failure of a streak at INFO, the rest (every retry period) at DEBUG.
        level = logging.DEBUG if self._failing else logging.INFO
        self._failing = True
        logger.log(level, "%s/%s: %s: %s", self.config.namespace, self.config.name, what, error)

    def _wrote(self, lease: Object, started: float) -> None:
        self._failing = False
        spec = lease.get("spec") or {}
        self._lease = lease
        self._own_write_is_current = True
        self._observed = (
            spec.get("holderIdentity") or "",
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        self._observed_at = started
        # The request's start, not its end: the conservative bound on when others saw it.
        self._renewed_at = started

    def _set_leading(self, leading: bool) -> None:
        if leading:
            self.following.clear()
            self.leading.set()
        else:
            self.leading.clear()
            self.following.set()
        self._metrics.leader.labels(self.config.name).set(1 if leading else 0)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()


class AlwaysLeader:
    """Leadership without election (`--no-leader-elect`): always leading, never writes a Lease."""

    def __init__(self, *, metrics: Metrics, lease_name: str) -> None:
        self.leading = asyncio.Event()
        self.leading.set()
        self.following = asyncio.Event()
        metrics.leader.labels(lease_name).set(1)

    def check_may_write(self) -> None:
        return None

    async def run(self) -> NoReturn:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def release(self) -> None:
        return None


def _released(lease: Object) -> Object:
    """The Lease as client-go releases it: no holder, so the next candidate takes it at once."""
    now = _micro_time()
    spec = {
        **(lease.get("spec") or {}),
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "renewTime": now,
        "acquireTime": now,
    }
    return {**lease, "spec": spec}


def _micro_time() -> str:
    # metav1.MicroTime's wire format.
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
