"""Writing the objects a RayCluster owns: the one place its steps create, repair and delete them.

`OwnedObjects` holds the RayCluster controller's `Expectations` (one per dependent kind), so a
cache that lags our own writes never shows a missing object twice; every step — the Services and
RBAC of the controller, the GCS fault tolerance, the scaling executor, the network policies, the
mTLS PKI — writes through it.

`ensure` is the one "ensure an owned object" sequence: create it, or read the object that already
has its name; an object of that name the cluster does not own is a collision, handed to the
caller's policy (an error that stops the cluster, or a Warning told once and the cluster goes on);
an owned one is brought back to what we set (`planning/drift.py` compares only our fields, so a
converged object costs no request) or to the caller's own repair.

What a cluster owns is decided by ownerReferences (its uid), never by labels alone. Deletes carry
the object's uid as a precondition. Work is bounded: `run_bounded` keeps at most
`MAX_PARALLEL_WRITES` writes in flight, and `Batch` counts the `PODS_PER_RECONCILE` dependents one
reconcile may create or delete before it requeues itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ray_operator.controllers.expectations import Expectations
from ray_operator.planning.drift import owner_description, repair_patch
from ray_operator.runtime.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    NamespaceTerminating,
    NotFound,
)
from ray_operator.spec.kinds import (
    AUTOSCALER_RBAC_KINDS,
    CERT_MANAGER_KINDS,
    INGRESS,
    JOB,
    NETWORK_POLICY,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    RAY_CLUSTER,
    SERVICE,
    Kind,
    ObjectKey,
    Viewed,
)

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]

# Creates of one reconcile run concurrently, but bounded: a 500-Pod scale-up must not open 500
# connections at once, nor starve other clusters' reconciles of the API server. Every busy
# reconcile worker keeps this many writes in flight, so the API server queues up to
# workers x this: at 16 (64 with 4 workers) a new cluster's first writes waited behind them
# (its first Pod came 4.8-6.7 s after it was created while four 1000-Pod clusters scaled, on a
# loaded 2-core machine); at 8, 0.5-1.5 s.
MAX_PARALLEL_WRITES = 8
# Pods (and other dependents) one reconcile creates or deletes before it requeues itself behind
# the other waiting keys. Small enough that a batch takes a fraction of a second (fairness, and a
# delete is noticed quickly); large enough that the O(observed Pods) planning around each batch
# stays a small share of the work. A multi-host replica is created whole, even when larger.
PODS_PER_RECONCILE = 2 * MAX_PARALLEL_WRITES

# Everything a RayCluster may own, all labelled `ray.io/cluster` and watched by the runtime.
# Jobs: only the Redis cleanup Job is the cluster's (a RayJob's submitter is the RayJob's).
DEPENDENT_KINDS: tuple[Kind, ...] = (
    POD,
    SERVICE,
    *AUTOSCALER_RBAC_KINDS,
    PERSISTENT_VOLUME_CLAIM,
    INGRESS,
    JOB,
    *CERT_MANAGER_KINDS,
    NETWORK_POLICY,
)

T = TypeVar("T")


class ReplicaFailureError(RuntimeError):
    """Some Pod creates or deletes failed; the status says which, the queue retries with backoff."""


@dataclass
class Batch:
    """The dependents one reconcile may still create or delete, and whether work was left over."""

    room: int = PODS_PER_RECONCILE
    work_left: bool = False

    def take(self, items: Sequence[T]) -> Sequence[T]:
        """As many of `items` as there is room for; the rest waits for the next reconcile."""
        taken = items[: max(0, self.room)]
        self.spend(len(taken))
        if len(taken) < len(items):
            self.work_left = True
        return taken

    def spend(self, count: int) -> None:
        self.room -= count


@dataclass(frozen=True)
class Wording:
    """How the Events of a create name the object: its kind, unless KubeRay words it otherwise
    (`CreatedPVC`, "Created GCS storage PVC ns/name"; "Failed to create ..., <error>")."""

    noun: str
    """In messages: "Service", "GCS storage PVC"."""
    reason: str
    """In reasons, after `Created` and `FailedToCreate`: "Service", "PVC"."""
    error_separator: str = ": "


class OwnedObjects:
    """The RayCluster controller's view of what its clusters own, and its writes of them."""

    def __init__(self, *, store: StoreView, client: KubeClient, events: EventRecorder) -> None:
        self._store = store
        self._client = client
        self._events = events
        self.expectations = {kind: Expectations() for kind in DEPENDENT_KINDS}
        # (kind, namespace, name) -> the resourceVersion we last repaired: until the cache shows
        # the repaired version, the old one must not be patched again.
        # Per cluster, so that it is forgotten with the cluster.
        self._repaired_from: dict[ObjectKey, dict[tuple[str, str], str]] = {}
        # Per cluster, (cluster uid, finding) already told in a Warning Event: a collision, a
        # drifted GCS storage PVC or a missing user claim is reported once, not on every
        # reconcile. Forgotten with the cluster.
        self._reported: dict[ObjectKey, set[tuple[str, str]]] = {}

    def forget(self, key: ObjectKey) -> None:
        """Drop what is remembered about a deleted cluster (once its dependents are gone)."""
        for expectations in self.expectations.values():
            expectations.forget(key)
        self._repaired_from.pop(key, None)
        self._reported.pop(key, None)

    def expect_created(self, key: ObjectKey, kind: Kind, created: Object) -> None:
        """Count `created` (the API server's answer) as this cluster's until the cache shows it.

        Kept as the cache keeps it, not as answered: the answer carries managedFields and every
        defaulted field, about 20 KiB of Python objects per Pod. A cluster's next reconcile, which
        sees the cache catch up, can come long after its creates while a thousand clusters queue
        before it; whole answers held that long made 125 KiB per new cluster while creating (the
        RSS that "doubled with more concurrency")."""
        answer = kind.with_type_meta(dict(created))
        self.expectations[kind].created(key, self._store.keep(kind, answer))

    def expect_maybe_created(self, key: ObjectKey, kind: Kind, sent: Object) -> None:
        """Count `sent`, whose create may or may not have happened, as this cluster's for now."""
        self.expectations[kind].maybe_created(key, self._store.keep(kind, dict(sent)))

    # --- what the cache shows, corrected by our own pending writes -----------------------------

    def observed(self, kind: Kind[Viewed], key: ObjectKey, cluster: RayCluster) -> list[Viewed]:
        """This cluster's objects of `kind` (owned by its uid), with our creates not yet cached."""
        uid = cluster["metadata"]["uid"]
        cached = [
            obj
            for obj in self._store.list_for_cluster(kind, key.namespace, key.name)
            if owned_by(obj, uid)
        ]
        # Our creates are built objects of the same kind, so of the same view.
        return cast("list[Viewed]", self.expectations[kind].observe(key, cached))

    def observed_pods(self, key: ObjectKey, cluster: RayCluster) -> list[Pod]:
        return self.observed(POD, key, cluster)

    def cached_dependents(self, kind: Kind, key: ObjectKey) -> list[Object]:
        """Cached objects of `kind` labelled for this cluster, whoever owns them, with our
        creates not yet cached."""
        cached = self._store.list_for_cluster(kind, key.namespace, key.name)
        return self.expectations[kind].observe(key, cached)

    def cached_by_name(self, kind: Kind, key: ObjectKey, name: str) -> Object | None:
        """`cached_dependents` of that name, or None."""
        return next(
            (o for o in self.cached_dependents(kind, key) if o["metadata"]["name"] == name), None
        )

    def dependents(
        self, key: ObjectKey, owner_matches: Callable[[str], bool]
    ) -> list[tuple[Kind, Object]]:
        """Cached dependents labelled for this cluster name and owned by a matching RayCluster
        uid (objects labelled so but not owned by any RayCluster are not ours to delete)."""
        found: list[tuple[Kind, Object]] = []
        for kind, expectations in self.expectations.items():
            cached = self._store.list_for_cluster(kind, key.namespace, key.name)
            for obj in expectations.observe(key, cached):
                owner = cluster_owner_uid(obj, key.name)
                if owner is not None and owner_matches(owner) and not terminating(obj):
                    found.append((kind, obj))
        return found

    # --- ensure: create or read, ownership, collision, repair -----------------------------------

    async def ensure(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        kind: Kind[Any],
        desired: Object,
        *,
        existing: Object | None,
        on_collision: Callable[[Object], Awaitable[None]],
        owns: Callable[[Object, str], bool] | None = None,
        repair: Callable[[Object], Awaitable[None]] | None = None,
    ) -> Object | None:
        """Create `desired` unless `existing` (the cached object of its name) is given, or read
        the object a 409 says has its name; one the cluster does not own (`owns`, by default
        any ownerReference to its uid) goes to `on_collision`; an owned one is repaired
        (`repair`, by default `repair_drift`) and returned. None: created, or a collision."""
        if existing is None:
            existing = await self.create_or_read(key, cluster, kind, desired)
            if existing is None:
                return None
        if not (owns or owned_by)(existing, cluster["metadata"]["uid"]):
            await on_collision(existing)
            return None
        if repair is None:
            await self.repair_drift(key, cluster, kind, desired, existing)
        else:
            await repair(existing)
        return existing

    def collision_reported_once(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        kind: Kind[Any],
        *,
        finding: str,
        reason: str,
        consequence: str,
    ) -> Callable[[Object], Awaitable[None]]:
        """An `on_collision` for objects the cluster can go on without: a Warning Event, told
        once per cluster and `finding`, naming the owner and then the `consequence`."""

        async def report(existing: Object) -> None:
            name = existing["metadata"]["name"]
            self.report_once(
                cluster,
                finding,
                reason=reason,
                message=f"{kind.kind} {key.namespace}/{name} already exists and "
                f"{owner_description(existing)}, not this RayCluster{consequence}",
            )

        return report

    async def create_or_read(
        self, key: ObjectKey, cluster: RayCluster, kind: Kind[Object], desired: Object
    ) -> Object | None:
        """Create `desired` (None), or read the object that already has its name.

        A 409 means ours not cached yet (or no longer cached: a label we watch by was removed),
        or someone else's: only its ownerReferences tell, so it is read from the API.
        """
        if await self.create(key, cluster, kind, desired):
            return None
        name = desired["metadata"]["name"]
        try:
            return await self._client.get(kind, name, namespace=key.namespace)
        except NotFound as error:
            # Deleted between our create and read: retried (with backoff) from the top.
            raise ReplicaFailureError(f"{key}: {kind.kind} {name} came and went") from error

    async def create(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        kind: Kind[Any],
        desired: Object,
        *,
        wording: Wording | None = None,
    ) -> bool:
        """Create `desired`, expected and told in a Normal Event; False when its name is taken
        (409). Any other refusal is told in a Warning Event and raised (the queue retries)."""
        wording = wording or Wording(noun=kind.kind, reason=kind.kind)
        name = f"{key.namespace}/{desired['metadata']['name']}"
        try:
            created = await self._client.create(kind, desired, namespace=key.namespace)
        except AlreadyExists:
            return False
        except NamespaceTerminating:
            raise  # No Event: nothing new, Events included, may be written there any more.
        except ApiError as error:
            self._events.record(
                cluster,
                reason=f"FailedToCreate{wording.reason}",
                type="Warning",
                message=f"Failed to create {wording.noun} {name}{wording.error_separator}{error}",
            )
            raise
        self.expect_created(key, kind, created)
        logger.info("%s: created %s %s", key, wording.noun, name)
        self._events.record(
            cluster, reason=f"Created{wording.reason}", message=f"Created {wording.noun} {name}"
        )
        return True

    async def repair_drift(
        self, key: ObjectKey, cluster: RayCluster, kind: Kind, desired: Object, existing: Object
    ) -> None:
        """Patch back the fields we set that someone changed (issue 12, finding 10).

        Costs nothing on a converged object: `repair_patch` compares only what we set. After a
        repair the cache shows the old version for a moment; its resourceVersion is remembered
        so that the same drift is not patched twice.
        """
        metadata = existing["metadata"]
        identity = (kind.kind, metadata["name"])
        version = str(metadata.get("resourceVersion", ""))
        if self.patched_from(key, identity) == version:
            return
        self._repaired_from.get(key, {}).pop(identity, None)
        patch = repair_patch(desired, existing)
        if patch is None:
            return
        what = f"{kind.kind} {key.namespace}/{metadata['name']}"
        try:
            await self._client.patch(kind, metadata["name"], patch, namespace=key.namespace)
        except (NotFound, Conflict):
            return  # Gone or replaced meanwhile: its event brings us back.
        except ApiError as error:
            # Immutable or refused: an Event, not a retry loop (nothing we send would differ).
            self._events.record(
                cluster,
                reason=f"FailedToRepair{kind.kind}",
                type="Warning",
                message=f"Failed to restore {what} to its desired spec: {error}",
            )
            return
        self.remember_patched(key, identity, version)
        changed = ", ".join(sorted(_patched_paths(patch)))
        logger.info("%s: restored %s (%s)", key, what, changed)
        self._events.record(
            cluster,
            reason=f"Repaired{kind.kind}",
            type="Warning",
            message=f"Restored {what}: {changed} had been changed",
        )

    def patched_from(self, key: ObjectKey, identity: tuple[str, str]) -> str | None:
        """The resourceVersion we last patched `identity` (kind or aspect, name) from."""
        return self._repaired_from.get(key, {}).get(identity)

    def remember_patched(self, key: ObjectKey, identity: tuple[str, str], version: str) -> None:
        """Until the cache shows a newer version than `version`, do not patch it again."""
        self._repaired_from.setdefault(key, {})[identity] = version

    def report_once(self, cluster: RayCluster, finding: str, *, reason: str, message: str) -> None:
        """A Warning Event the first time this cluster shows this finding (not every reconcile)."""
        seen = (str(cluster["metadata"].get("uid", "")), finding)
        reported = self._reported.setdefault(ObjectKey.of(cluster), set())
        if seen in reported:
            return
        reported.add(seen)
        logger.warning("%s: %s", ObjectKey.of(cluster), message)
        self._events.record(cluster, reason=reason, type="Warning", message=message)

    # --- deletes --------------------------------------------------------------------------------

    async def delete(self, key: ObjectKey, kind: Kind, obj: Object) -> None:
        metadata = obj["metadata"]
        # NotFound: already gone; Conflict: another object of that name now, not ours to delete.
        with contextlib.suppress(NotFound, Conflict):
            await self._client.delete(
                kind, metadata["name"], namespace=key.namespace, uid=metadata.get("uid")
            )
        self.expectations[kind].deleted(key, obj)

    async def delete_all(
        self, key: ObjectKey, objects: Sequence[tuple[Kind, Object]], *, why: str
    ) -> None:
        """Delete `objects` in parallel, at most `MAX_PARALLEL_WRITES` at a time."""

        async def delete(kind: Kind, obj: Object) -> None:
            await self.delete(key, kind, obj)
            logger.info(
                "%s: deleted %s %s because %s", key, kind.kind, obj["metadata"]["name"], why
            )

        await run_bounded(delete(kind, obj) for kind, obj in objects)


async def run_bounded(actions: Iterable[Awaitable[None]]) -> None:
    """Run `actions`, at most `MAX_PARALLEL_WRITES` at a time, taking each from the iterable
    only when a slot frees up: a lazy iterable is never materialised, and a check made
    while producing the next action (`ScalingExecutor`'s `_while_wanted`) sees the cache of that
    moment."""
    remaining = iter(actions)
    first = next(remaining, None)
    if first is None:
        return  # the usual case of a converged cluster: no tasks to start and gather
    remaining = itertools.chain((first,), remaining)

    async def run_one_after_another() -> None:
        for action in remaining:
            await action

    await asyncio.gather(*(run_one_after_another() for _ in range(MAX_PARALLEL_WRITES)))


def _patched_paths(patch: Mapping[str, Any]) -> list[str]:
    """`{"spec": {"selector": ...}}` -> `["spec.selector"]`: what a repair changed, for Events."""
    paths: list[str] = []
    for field_name, value in patch.items():
        if isinstance(value, Mapping) and field_name in ("metadata", "spec"):
            paths += [f"{field_name}.{inner}" for inner in value]
        else:
            paths.append(field_name)
    return paths


def cluster_owner_uid(obj: Object, cluster_name: str) -> str | None:
    """The uid of the RayCluster of this name among `obj`'s owners, or None."""
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == RAY_CLUSTER.kind and ref.get("name") == cluster_name:
            return str(ref.get("uid", ""))
    return None


def owned_by(obj: Object, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())


def terminating(obj: Object) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))
