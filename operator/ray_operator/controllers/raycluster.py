"""The RayCluster controller: make a cluster's Pods and Services match its spec, then report.

`reconcile` reads like a table of contents: validate, remove what an earlier incarnation left,
ensure the Services, carry out the scaling plan, clear `workersToDelete`, write the status. The
decisions are pure functions elsewhere (`builders/` build the objects, `status/scaling.py` plans,
`status/raycluster.py` computes the status, `validation/` judges the spec); this module only
executes them against the API and records Events.

Every create and delete goes through `Expectations`, so a cache that lags our own writes can never
produce a duplicate Pod or a second delete; a Pod create whose answer was lost (timeout, reset,
5xx) is kept as "maybe created" under its name until the cache shows it or the entry expires.

What a cluster owns is decided by ownerReferences (its uid), never by labels alone. An object of
a name we must use that belongs to someone else (a 409 we do not own) is an error — Event,
ReplicaFailure condition, not ready, no Pods — retried with backoff; an owned object that someone
edited is patched back (`status/drift.py` compares only the fields we set, so a converged
cluster costs no request).

Work per reconcile is bounded: one reconcile creates or deletes at most `PODS_PER_RECONCILE`
dependents (`MAX_PARALLEL_WRITES` at a time), then asks to run again at once — which puts the key
at the back of the queue, behind every other cluster waiting, so no cluster holds a worker for
long. Before each create the cache is asked whether the RayCluster still exists (same uid, not
being deleted): a delete stops creation within the writes already in flight, and the delete
reconcile (same key, serialised by the queue) runs right after, itself in parallel batches.

Deleting a RayCluster deletes its Pods and Services explicitly — the operator does not rely on
the garbage collector (there is none in the test control plane, and a cluster may be deleted
while the operator is down: its orphans are found again through their `ray.io/cluster` label).
The same goes for its Ingress, its NetworkPolicies, its owned GCS storage PVC and its Redis
cleanup Job. A cluster with GCS fault tolerance on Redis carries KubeRay's
`REDIS_CLEANUP_FINALIZER`: on delete its Pods go first, then the cleanup Job runs, then the
finalizer goes (`finish_deletion`). In a namespace being deleted the Job can never be created
(the API server refuses anything new there): the finalizer goes at once and the cluster's keys
stay in Redis, rather than holding the namespace in Terminating until the deletion timeout
(KubeRay's #3388).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import itertools
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from ray_operator import labels as names
from ray_operator.builders.auth import (
    auth_secret_name,
    build_auth_secret,
    needs_generated_auth_secret,
)
from ray_operator.builders.fault_tolerance import (
    build_gcs_storage_pvc,
    external_storage_namespace,
    gcs_storage_claim_name,
    gcs_storage_pvc_adoption_patch,
    gcs_storage_pvc_drift,
)
from ray_operator.builders.ingress import (
    build_head_ingress,
    ingress_annotation_patch,
    wants_ingress,
)
from ray_operator.builders.pods import (
    PodOptions,
    build_head_pod,
    build_worker_pod,
    with_feature_gates,
)
from ray_operator.builders.rbac import (
    build_autoscaler_role,
    build_autoscaler_role_binding,
    build_autoscaler_service_account,
    user_names_service_account,
)
from ray_operator.builders.redis_cleanup import (
    build_redis_cleanup_job,
    deletion_timeout_s,
    is_redis_cleanup_job,
    job_outcome,
    needs_redis_cleanup,
    redis_cleanup_job_name,
)
from ray_operator.builders.services import (
    build_head_service,
    build_headless_service,
    needs_headless_service,
)
from ray_operator.controllers.batch_scheduling import BatchScheduling
from ray_operator.controllers.expectations import Expectations
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.controllers.mtls import (
    CERT_MANAGER_RECHECK_S,
    ClusterMTLS,
    ClusterObjects,
    requeue_sooner,
)
from ray_operator.controllers.network_policies import NetworkPolicySteps
from ray_operator.features import RAY_CLUSTER_MTLS, RAY_CLUSTER_NETWORK_POLICY
from ray_operator.runtime.client import PatchType
from ray_operator.runtime.controller import (
    ControllerContext,
    Result,
    cluster_key_from_label,
    own_key,
    owner_keys,
)
from ray_operator.runtime.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Invalid,
    KubeError,
    NamespaceTerminating,
    NotFound,
    ServerError,
    TransportError,
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
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    Kind,
    ObjectKey,
    Viewed,
)
from ray_operator.spec.object_names import check_name, random_suffix, replica_group_name
from ray_operator.spec.raycluster import (
    is_autoscaling_enabled,
    is_gcs_ft_embedded,
    is_gcs_ft_enabled,
    spec,
)
from ray_operator.status import raycluster as cluster_status
from ray_operator.status import waiting
from ray_operator.status.drift import owner_description, repair_patch
from ray_operator.status.kuberay_version import head_pod_restamps
from ray_operator.status.scaling import GroupPlan, PodDeletion, ScalingPlan, plan_scaling
from ray_operator.validation.errors import FieldError, summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycluster import validate_raycluster

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

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

# Ray's own token generator uses 32 random bytes; so does KubeRay's.
AUTH_TOKEN_BYTES = 32

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

REDIS_CLEANUP_FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"
"""KubeRay's finalizer on Redis-backed GCS FT clusters: the same name, so either operator
finishes a deletion the other began."""
ENABLE_REDIS_CLEANUP_ENV = "ENABLE_GCS_FT_REDIS_CLEANUP"
"""KubeRay's switch: "false" adds no finalizer and runs no cleanup Job (Redis cleaned by hand)."""
# While a head Pod terminates (KubeRay waits 10 s too); its delete event usually comes first.
HEAD_TERMINATION_RECHECK_S = 10.0


class ReplicaFailureError(RuntimeError):
    """Some Pod creates or deletes failed; the status says which, the queue retries with backoff."""


class NameConflictError(ReplicaFailureError):
    """An object we must create has a name taken by an object this cluster does not own."""


# Status changes that only move counters or addresses are written at most this often per
# cluster: while Pods come up one by one they would otherwise cost one write each.
MIN_SECONDS_BETWEEN_PROGRESS_WRITES = 1.0
# Pod names listed in one summarising Event before "and N more".
NAMES_PER_EVENT = 10
# The length of `random_suffix()`, the end of every Pod name we generate.
RANDOM_SUFFIX_LENGTH = 5

T = TypeVar("T")


@dataclass
class _Batch:
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


@dataclass
class _Outcome:
    """What one reconcile did: what the status must reflect and the Events must tell."""

    failure: cluster_status.ReplicaFailure | None = None
    # Event reason -> what happened, e.g. "CreatedWorkerPod" -> ["ns/a", "ns/b"]
    done: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def record(self, reason: str, noun: str, name: str) -> None:
        self.done.setdefault((reason, noun), []).append(name)


class RayClusterController:
    """Reconciles RayClusters; Pods and Services map to their cluster by `ray.io/cluster`."""

    kind = RAY_CLUSTER

    def __init__(
        self,
        context: ControllerContext,
        *,
        pod_options: PodOptions | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        limits: ClusterLimits = DEFAULT_LIMITS,
        redis_cleanup: bool | None = None,
    ) -> None:
        self._limits = limits  # the webhook's bounds (--max-pods-per-cluster), re-checked here
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._pod_options = with_feature_gates(pod_options or PodOptions(), limits.feature_gates)
        self._batch_scheduling = BatchScheduling(context, self._pod_options.batch_scheduler)
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._monotonic = monotonic
        self._last_status_write: dict[ObjectKey, float] = {}
        # Clusters (by uid) whose generated auth Secret exists. Secrets are not watched: that
        # would take the right to read every Secret of the cluster, which the operator must not
        # hold; so existence is learnt from the create call (201 or 409) and remembered.
        self._auth_secret_ensured: set[str] = set()
        # The Secrets this process created (cluster key -> Secret uid), deleted with the cluster.
        self._generated_auth_secrets: dict[ObjectKey, str] = {}
        self._expectations = {kind: Expectations() for kind in DEPENDENT_KINDS}
        # (kind, namespace, name) -> the resourceVersion we last repaired: until the cache shows
        # the repaired version, the old one must not be patched again.
        # Per cluster, so that it is forgotten with the cluster.
        self._repaired_from: dict[ObjectKey, dict[tuple[str, str], str]] = {}
        # The status we last wrote, per cluster, with the resourceVersion our write produced:
        # until the watch delivers that version the cache shows the older status, and comparing
        # with it would write the same status twice.
        self._written_status: dict[ObjectKey, tuple[str, Mapping[str, Any]]] = {}
        # KubeRay's ENABLE_GCS_FT_REDIS_CLEANUP, read the way it reads it: anything but "false".
        self._redis_cleanup = (
            redis_cleanup
            if redis_cleanup is not None
            else os.environ.get(ENABLE_REDIS_CLEANUP_ENV, "").lower() != "false"
        )
        # Per cluster, (cluster uid, finding) already told in a Warning Event: a drifted GCS
        # storage PVC or a missing user claim is reported once, not on every reconcile; and
        # (cluster uid, "claim:" name) of users' own GCS storage claims seen to exist (not in
        # the label-selected cache, they are read by name until found). Forgotten with the cluster.
        self._reported: dict[ObjectKey, set[tuple[str, str]]] = {}
        # Per cluster, ((uid, resourceVersion), problems) of the version last validated: most
        # reconciles come from Pod events and see the same version of the cluster again.
        self._validated: dict[ObjectKey, tuple[tuple[str, str], list[FieldError]]] = {}
        self._mtls = ClusterMTLS(
            client=self._client,
            store=self._store,
            events=self._events,
            objects=ClusterObjects(
                self.observed, self.observed_pods, self._ensure_object, self._delete
            ),
            gate_on=limits.feature_gates.enabled(RAY_CLUSTER_MTLS),
            cluster_domain=self._pod_options.cluster_domain,
        )
        self._network_policies = NetworkPolicySteps(
            enabled=limits.feature_gates.enabled(RAY_CLUSTER_NETWORK_POLICY),
            observed=self.observed,
            client=self._client,
            events=self._events,
            create_or_read=self._create_or_read,
            delete=self._delete,
            report_once=self._report_once,
        )

    def keys_for(self, kind: Kind, obj: Object) -> Iterable[ObjectKey]:
        if kind == JOB and not is_redis_cleanup_job(obj):
            return []
        if kind in DEPENDENT_KINDS:
            return cluster_key_from_label(obj)
        if kind == self._batch_scheduling.pod_group_kind:
            return owner_keys(obj, owner=RAY_CLUSTER)
        return own_key(kind, obj, of=RAY_CLUSTER)

    async def reconcile(self, key: ObjectKey) -> Result:
        cluster = self._store.get(RAY_CLUSTER, key.namespace, key.name)
        if cluster is None:
            batch = _Batch()
            await self.delete_everything_of_deleted_cluster(key, batch)
            return _next_batch_or(batch, None)
        if _managed_elsewhere(cluster):
            return Result()  # MultiKueue (or another controller) runs this one, as in KubeRay.
        if cluster["metadata"].get("deletionTimestamp"):
            return await self.finish_deletion(key, cluster)
        problems = self.validation_problems(key, cluster)
        if problems:
            await self.report_invalid_spec(key, cluster, summarize(problems))
            return Result()  # No retry: only a spec change (a new event) can fix it.
        if await self.ensure_redis_cleanup_finalizer(cluster):
            return Result()  # Nothing is created before the finalizer is: its event brings us back.
        outcome = _Outcome()
        batch = _Batch()
        await self.delete_objects_of_earlier_incarnations(key, cluster, batch)
        await self.ensure_head_service(key, cluster)
        await self.ensure_headless_worker_service(key, cluster)
        await self.ensure_autoscaler_rbac(key, cluster)
        await self.ensure_auth_secret(key, cluster)
        await self.ensure_ingress(key, cluster)
        await self.ensure_gcs_storage_pvc(key, cluster)
        await self._network_policies.ensure_network_policies(key, cluster)
        if (problem := await self._mtls.ensure_pki(key, cluster)) is not None:
            await self.report_invalid_spec(key, cluster, problem)
            return Result(requeue_after=CERT_MANAGER_RECHECK_S)
        await self.restamp_head_pods_of_other_kuberay_versions(key, cluster)
        await self._batch_scheduling.ensure_for_cluster(cluster)
        plan = plan_scaling(
            cluster,
            pods=self.observed_pods(key, cluster),
            provisioned=_is_provisioned(cluster),
            max_pod_creates=PODS_PER_RECONCILE,
        )
        plan, issuance_wait = await self._mtls.hold_creates_until_issued(key, cluster, plan)
        await self.carry_out_scaling_plan(key, cluster, plan, outcome, batch=batch)
        if not self._is_wanted(key, cluster["metadata"]["uid"]):
            return Result(requeue_after=0)  # Deleted meanwhile: the delete reconcile comes next.
        await self.record_what_was_done(cluster, outcome)
        await self.clear_workers_to_delete(key, cluster, plan)
        status_due_in = await self.update_status(key, cluster, outcome)
        if outcome.failure is not None:
            raise ReplicaFailureError(f"{key}: {outcome.failure.message}")
        return _next_batch_or(batch, requeue_sooner(status_due_in, issuance_wait))

    def _is_wanted(self, key: ObjectKey, uid: str) -> bool:
        """Whether the cache still shows this RayCluster (same uid) and not being deleted."""
        current = self._store.get(RAY_CLUSTER, key.namespace, key.name)
        return (
            current is not None
            and current["metadata"].get("uid") == uid
            and not current["metadata"].get("deletionTimestamp")
        )

    def _while_wanted(self, key: ObjectKey, uid: str, items: Iterable[T]) -> Iterator[T]:
        """`items`, asking the cache before each one whether the RayCluster is still wanted:
        a delete stops a scale-up within the creates already in flight."""
        for item in items:
            if not self._is_wanted(key, uid):
                logger.info("%s: deleted or being deleted; creating nothing more", key)
                return
            yield item

    # --- what the cache shows, corrected by our own pending writes -----------------------------

    def observed(self, kind: Kind[Viewed], key: ObjectKey, cluster: RayCluster) -> list[Viewed]:
        """This cluster's objects of `kind` (owned by its uid), with our creates not yet cached."""
        uid = cluster["metadata"]["uid"]
        cached = [
            obj
            for obj in self._store.list_for_cluster(kind, key.namespace, key.name)
            if _owned_by(obj, uid)
        ]
        # Our creates are built objects of the same kind, so of the same view.
        return cast("list[Viewed]", self._expectations[kind].observe(key, cached))

    def observed_pods(self, key: ObjectKey, cluster: RayCluster) -> list[Pod]:
        return self.observed(POD, key, cluster)

    # --- steps -------------------------------------------------------------------------------

    def validation_problems(self, key: ObjectKey, cluster: RayCluster) -> list[FieldError]:
        """`validate_raycluster`, once per version of the cluster.

        Validation is a pure function of the object and O(its size) — including the decode as
        KubeRay's Go types would (a spec Go cannot decode has no head Pod hash), about 40 ms for
        a 1.3 MB spec — so it is not repeated for every Pod event while the cluster is unchanged.
        """
        metadata = cluster["metadata"]
        version = (str(metadata.get("uid", "")), str(metadata.get("resourceVersion", "")))
        known = self._validated.get(key)
        if known is not None and known[0] == version:
            return known[1]
        problems = validate_raycluster(cluster, limits=self._limits)
        self._validated[key] = (version, problems)
        return problems

    async def delete_everything_of_deleted_cluster(self, key: ObjectKey, batch: _Batch) -> None:
        """The RayCluster is gone: delete every Pod and Service it had (we rely on no GC), one
        batch per reconcile, in parallel."""
        await self._mtls.delete_issued_secrets(key, lambda owner_uid: True)
        leftovers = self._dependents(key, lambda owner_uid: True)
        await self._delete_all(key, batch.take(leftovers), why=f"RayCluster {key} was deleted")
        await self.delete_generated_auth_secret(key)
        if not leftovers:
            for expectations in self._expectations.values():
                expectations.forget(key)
            self._written_status.pop(key, None)
            self._last_status_write.pop(key, None)
            self._repaired_from.pop(key, None)
            self._reported.pop(key, None)
            self._validated.pop(key, None)
            self._mtls.forget(key)

    async def delete_generated_auth_secret(self, key: ObjectKey) -> None:
        """Delete the auth Secret we generated for a now deleted cluster, if we remember it.

        Only while this process remembers making it: the Secret is not in the cache, and a
        Secret of that name could be the user's. After a restart its ownerReference leaves it
        to the garbage collector. (The cluster uid stays in `_auth_secret_ensured`: uids are
        never reused, and the entry is a few bytes.)
        """
        secret_uid = self._generated_auth_secrets.pop(key, None)
        if secret_uid is None:
            return
        # The uid precondition makes sure it is still the Secret we made.
        with contextlib.suppress(NotFound, Conflict):
            await self._client.delete(
                SECRET, check_name(key.name), namespace=key.namespace, uid=secret_uid
            )

    async def delete_objects_of_earlier_incarnations(
        self, key: ObjectKey, cluster: RayCluster, batch: _Batch
    ) -> None:
        """Pods/Services of a deleted RayCluster of the same name must not join the new one."""
        uid = cluster["metadata"]["uid"]
        await self._mtls.delete_issued_secrets(key, lambda owner_uid: owner_uid != uid)
        stale = self._dependents(key, lambda owner_uid: owner_uid != uid)
        await self._delete_all(
            key, batch.take(stale), why="it belonged to an earlier RayCluster of this name"
        )

    async def ensure_head_service(self, key: ObjectKey, cluster: RayCluster) -> None:
        await self._ensure_service(key, cluster, build_head_service(cluster))

    async def ensure_headless_worker_service(self, key: ObjectKey, cluster: RayCluster) -> None:
        if needs_headless_service(cluster):
            await self._ensure_service(key, cluster, build_headless_service(cluster))

    async def ensure_autoscaler_rbac(self, key: ObjectKey, cluster: RayCluster) -> None:
        """The ServiceAccount, Role and RoleBinding Ray's autoscaler acts with (as KubeRay)."""
        if not is_autoscaling_enabled(spec(cluster)):
            return
        if not user_names_service_account(cluster):
            await self._ensure_object(
                key, cluster, SERVICE_ACCOUNT, build_autoscaler_service_account(cluster)
            )
        await self._ensure_object(key, cluster, ROLE, build_autoscaler_role(cluster))
        await self._ensure_object(
            key, cluster, ROLE_BINDING, build_autoscaler_role_binding(cluster)
        )

    async def ensure_auth_secret(self, key: ObjectKey, cluster: RayCluster) -> None:
        """The generated Ray auth token Secret of a token-auth cluster (as KubeRay makes it)."""
        uid = cluster["metadata"]["uid"]
        if uid in self._auth_secret_ensured or not needs_generated_auth_secret(cluster):
            return
        token = base64.b64encode(secrets.token_bytes(AUTH_TOKEN_BYTES)).decode()
        secret = build_auth_secret(cluster, token=token)
        try:
            created = await self._client.create(SECRET, secret, namespace=key.namespace)
        except AlreadyExists:
            pass  # Ours from before a restart, or the user's: either way the Pods will find it.
        else:
            self._generated_auth_secrets[key] = created["metadata"]["uid"]
            await self._events.record(
                cluster,
                reason="CreatedSecret",
                message=f"Created Secret {key.namespace}/{auth_secret_name(cluster)} "
                "with a generated Ray auth token",
            )
        self._auth_secret_ensured.add(uid)

    async def ensure_ingress(self, key: ObjectKey, cluster: RayCluster) -> None:
        """The head's Ingress of `enableIngress` (KubeRay's `reconcileIngress`).

        As KubeRay, an Ingress of that name this cluster does not own is left alone (a Warning
        Event, the cluster goes on: the dashboard is not what a Ray cluster needs to run). An
        owned one that drifted is patched back (KubeRay's is taken over as it is: drift.py).
        """
        if not wants_ingress(cluster):
            return
        desired = build_head_ingress(cluster)
        name = desired["metadata"]["name"]
        existing = next(
            (o for o in self._cached_dependents(INGRESS, key) if o["metadata"]["name"] == name),
            None,
        )
        if existing is None:
            existing = await self._create_or_read(key, cluster, INGRESS, desired)
            if existing is None:
                return
        if not _owned_by(existing, cluster["metadata"]["uid"]):
            await self._report_once(
                cluster,
                f"ingress-conflict/{name}",
                reason="FailedToCreateIngress",
                message=f"Ingress {key.namespace}/{name} already exists and "
                f"{owner_description(existing)}, not this RayCluster; not modifying it",
            )
            return
        await self._repair_drift(key, cluster, INGRESS, desired, existing)
        await self._follow_cluster_annotations(key, cluster, desired, existing)

    async def _follow_cluster_annotations(
        self, key: ObjectKey, cluster: RayCluster, desired: Object, existing: Object
    ) -> None:
        """Write the cluster's changed annotations onto its Ingress, once per version seen."""
        annotations = ingress_annotation_patch(desired, existing)
        name = existing["metadata"]["name"]
        version = str(existing["metadata"].get("resourceVersion", ""))
        identity = ("Ingress annotations", name)
        if annotations is None or self._repaired_from.get(key, {}).get(identity) == version:
            return
        with contextlib.suppress(NotFound):  # gone: its delete event brings us back
            await self._client.patch(INGRESS, name, annotations, namespace=key.namespace)
        self._repaired_from.setdefault(key, {})[identity] = version
        await self._events.record(
            cluster,
            reason="UpdatedIngress",
            message=f"Updated ingress {key.namespace}/{name}",
        )

    async def ensure_gcs_storage_pvc(self, key: ObjectKey, cluster: RayCluster) -> None:
        """The PVC of embedded GCS FT (KubeRay's `reconcileGCSStoragePVC`), created once.

        A `<cluster>-gcs-pvc` that exists is adopted as it is — a retained one keeps its RocksDB
        state for a cluster of the same name — and never reconfigured: what differs is reported.
        Its controller reference follows `deletionPolicy` (owned: deleted with the cluster;
        Retain: not owned, kept). A user's own claim (`storage.claimName`) is never created,
        owned or deleted; a missing one is reported, the head waits for it.
        """
        if not is_gcs_ft_enabled(cluster) or not is_gcs_ft_embedded(spec(cluster)):
            return
        storage = spec(cluster).get("gcsFaultToleranceOptions", {}).get("storage", {})
        if storage.get("claimName"):
            await self.check_user_gcs_storage_claim(key, cluster)
            return
        desired = build_gcs_storage_pvc(cluster)
        name = desired["metadata"]["name"]
        existing = next(
            (
                o
                for o in self._cached_dependents(PERSISTENT_VOLUME_CLAIM, key)
                if o["metadata"]["name"] == name
            ),
            None,
        )
        if existing is None:
            existing = await self._create_gcs_storage_pvc(key, cluster, desired)
            if existing is None:
                return
        if _terminating(existing):
            return  # An earlier incarnation's, going away: its delete event brings us back.
        drift = gcs_storage_pvc_drift(desired, existing)
        if drift:
            await self._report_once(
                cluster,
                f"pvc-drift/{existing['metadata'].get('uid')}/{drift}",
                reason="FailedToCreatePVC",
                message=f"GCS storage PVC {key.namespace}/{name} already exists and cannot be "
                f"reconfigured in place ({drift}); delete the PVC to recreate it with the new "
                "settings",
            )
        await self.adopt_gcs_storage_pvc(key, cluster, existing)

    async def _create_gcs_storage_pvc(
        self, key: ObjectKey, cluster: RayCluster, pvc: Object
    ) -> Object | None:
        """Create the PVC (None), or read the one that already has its name (to adopt it)."""
        name = f"{key.namespace}/{pvc['metadata']['name']}"
        try:
            created = await self._client.create(
                PERSISTENT_VOLUME_CLAIM, pvc, namespace=key.namespace
            )
        except AlreadyExists:
            try:
                return await self._client.get(
                    PERSISTENT_VOLUME_CLAIM, pvc["metadata"]["name"], namespace=key.namespace
                )
            except NotFound:
                # An earlier incarnation's, deleted meanwhile (we may have just deleted it):
                # its delete event brings us back to create ours.
                return None
        except ApiError as error:
            await self._events.record(
                cluster,
                reason="FailedToCreatePVC",
                type="Warning",
                message=f"Failed to create GCS storage PVC {name}, {error}",
            )
            raise
        self._expectations[PERSISTENT_VOLUME_CLAIM].created(key, created)
        logger.info("%s: created GCS storage PVC %s", key, name)
        await self._events.record(
            cluster, reason="CreatedPVC", message=f"Created GCS storage PVC {name}"
        )
        return None

    async def adopt_gcs_storage_pvc(self, key: ObjectKey, cluster: RayCluster, pvc: Object) -> None:
        """Align the PVC's controller reference with `deletionPolicy` (one patch, or none)."""
        name = pvc["metadata"]["name"]
        try:
            patch = gcs_storage_pvc_adoption_patch(cluster, pvc)
        except ValueError as error:
            await self._report_once(
                cluster, f"pvc-owner/{name}", reason="FailedToCreatePVC", message=str(error)
            )
            return
        if patch is None:
            return
        try:
            await self._client.patch(PERSISTENT_VOLUME_CLAIM, name, patch, namespace=key.namespace)
        except NotFound:
            return  # Deleted meanwhile: its event brings us back, and a new one is created.
        logger.info("%s: set the owner of PersistentVolumeClaim %s per deletionPolicy", key, name)

    async def check_user_gcs_storage_claim(self, key: ObjectKey, cluster: RayCluster) -> None:
        """A Warning Event when the user's claim does not exist (read by name until it does)."""
        claim = gcs_storage_claim_name(cluster)
        seen = (cluster["metadata"]["uid"], f"claim:{claim}")
        if seen in self._reported.get(key, ()):
            return
        try:
            await self._client.get(PERSISTENT_VOLUME_CLAIM, claim, namespace=key.namespace)
        except NotFound:
            await self._report_once(
                cluster,
                f"missing-claim/{claim}",
                reason="FailedToCreatePVC",
                message=f"GcsFaultToleranceOptions.Storage.ClaimName {claim!r} not found in "
                f"namespace {key.namespace}; the head Pod will not start until it exists",
            )
            return
        self._reported.setdefault(key, set()).add(seen)

    async def ensure_redis_cleanup_finalizer(self, cluster: RayCluster) -> bool:
        """Add KubeRay's Redis cleanup finalizer to a Redis-backed GCS FT cluster; True when it
        had to be added (as KubeRay, nothing else is done before it is there)."""
        if not self._redis_cleanup or not needs_redis_cleanup(cluster):
            return False
        added = await add_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        if added:
            logger.info("%s: added %s", ObjectKey.of(cluster), REDIS_CLEANUP_FINALIZER)
        return added

    async def finish_deletion(self, key: ObjectKey, cluster: RayCluster) -> Result:
        """The cluster is being deleted: run the Redis cleanup if our finalizer holds it.

        Under another controller's finalizer nothing is done: creation stops (a running
        scale-up stops at its next create) and the Pods go once the object is gone.
        """
        if not has_finalizer(cluster, REDIS_CLEANUP_FINALIZER):
            return Result()
        if not needs_redis_cleanup(cluster):
            # Switched to the embedded backend (KubeRay removes it too) or FT switched off
            # (KubeRay would keep it forever): there is no Redis data of ours to clean.
            await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
            return Result()
        if not self._redis_cleanup:
            return Result()  # ENABLE_GCS_FT_REDIS_CLEANUP=false: cleaned up and removed by hand.
        return await self.clean_up_redis(key, cluster)

    async def clean_up_redis(self, key: ObjectKey, cluster: RayCluster) -> Result:
        """Delete the Pods; once the head is gone run the cleanup Job; when it has finished (or
        the deletion timeout passed) remove the finalizer. The head must be gone first: a GCS
        still writing would leave keys behind the cleanup."""
        batch = _Batch()
        live = [p for p in self.observed_pods(key, cluster) if not _terminating(p)]
        await self._delete_all(
            key,
            [(POD, pod) for pod in batch.take(live)],
            why="the RayCluster is being deleted (Redis is cleaned up once its head is gone)",
        )
        if batch.work_left:
            return Result(requeue_after=0)
        uid = cluster["metadata"]["uid"]
        heads = [
            p
            for p in self._store.list_for_cluster(POD, key.namespace, key.name)
            if _owned_by(p, uid)
            and p["metadata"].get("labels", {}).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        ]
        if heads:
            return Result(requeue_after=HEAD_TERMINATION_RECHECK_S)
        left = self._seconds_until_deletion_timeout(cluster)
        if left <= 0:
            await self.force_remove_redis_cleanup_finalizer(cluster)
            return Result()
        job = next((j for j in self.observed(JOB, key, cluster) if is_redis_cleanup_job(j)), None)
        if job is None:
            try:
                await self.create_redis_cleanup_job(key, cluster)
            except NamespaceTerminating:
                await self.give_up_redis_cleanup_in_terminating_namespace(key, cluster)
                return Result()
            return Result(requeue_after=left)
        outcome = job_outcome(job)
        if outcome is None:
            return Result(requeue_after=left)  # The Job's own status change brings us back.
        await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        job_name = f"{key.namespace}/{job['metadata']['name']}"
        if outcome == "Failed":
            annotations = job["metadata"].get("annotations") or {}
            storage = annotations.get(names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION, "")
            await self._events.record(
                cluster,
                reason="RedisCleanupJobFailed",
                type="Warning",
                message=f"Redis cleanup Job {job_name} failed; removed the finalizer anyway: "
                f"delete the storage namespace {storage!r} in Redis by hand",
            )
        else:
            logger.info("%s: Redis cleanup Job %s completed; finalizer removed", key, job_name)
        return Result()

    async def create_redis_cleanup_job(self, key: ObjectKey, cluster: RayCluster) -> None:
        """Create `<cluster>-redis-cleanup` (Events as KubeRay's: CreatedRedisCleanupJob, or
        FailedToCreateRedisCleanupJob and a retry with backoff)."""
        job = build_redis_cleanup_job(cluster, options=self._pod_options)
        name = f"{key.namespace}/{redis_cleanup_job_name(cluster)}"
        try:
            created = await self._client.create(JOB, job, namespace=key.namespace)
        except AlreadyExists:
            return  # Not cached yet (or not labelled as ours to find): looked at again soon.
        except NamespaceTerminating:
            raise  # No Event: nothing new, Events included, may be written there any more.
        except ApiError as error:
            await self._events.record(
                cluster,
                reason="FailedToCreateRedisCleanupJob",
                type="Warning",
                message=f"Failed to create Redis cleanup Job {name}, {error}",
            )
            raise
        self._expectations[JOB].created(key, created)
        logger.info("%s: created Redis cleanup Job %s", key, name)
        await self._events.record(
            cluster, reason="CreatedRedisCleanupJob", message=f"Created Redis cleanup Job {name}"
        )

    async def give_up_redis_cleanup_in_terminating_namespace(
        self, key: ObjectKey, cluster: RayCluster
    ) -> None:
        """The namespace is being deleted, so the cleanup Job can never be created: remove the
        finalizer now, not after the deletion timeout, and say so in the log (an Event cannot be
        written there either). The cluster's keys stay in Redis."""
        await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        logger.warning(
            "%s: namespace %s is being deleted, so no Redis cleanup Job can run there; removed "
            "%s: the cluster's keys stay in Redis (storage namespace %r), delete them by hand",
            key,
            key.namespace,
            REDIS_CLEANUP_FINALIZER,
            external_storage_namespace(cluster),
        )

    async def force_remove_redis_cleanup_finalizer(self, cluster: RayCluster) -> None:
        """The cleanup took longer than the deletion timeout: let the deletion finish anyway."""
        await remove_finalizer(self._client, RAY_CLUSTER, cluster, REDIS_CLEANUP_FINALIZER)
        namespace = (cluster["metadata"].get("annotations") or {}).get(
            names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION, ""
        )
        await self._events.record(
            cluster,
            reason="ForceDeletedStuckCluster",
            type="Warning",
            message=f"Force-removed GCS FT finalizer after {deletion_timeout_s(cluster)}s "
            f"due to Redis cleanup timeout; Redis storage namespace {namespace!r} may need "
            "manual cleanup",
        )

    def _seconds_until_deletion_timeout(self, cluster: RayCluster) -> float:
        requested = datetime.datetime.fromisoformat(
            str(cluster["metadata"]["deletionTimestamp"]).replace("Z", "+00:00")
        )
        elapsed = (self._now() - requested).total_seconds()
        return deletion_timeout_s(cluster) - elapsed

    def _cached_dependents(self, kind: Kind, key: ObjectKey) -> list[Object]:
        """Cached objects of `kind` labelled for this cluster, whoever owns them, with our
        creates not yet cached."""
        cached = self._store.list_for_cluster(kind, key.namespace, key.name)
        return self._expectations[kind].observe(key, cached)

    async def _report_once(
        self, cluster: RayCluster, finding: str, *, reason: str, message: str
    ) -> None:
        """A Warning Event the first time this cluster shows this finding (not every reconcile)."""
        seen = (str(cluster["metadata"].get("uid", "")), finding)
        reported = self._reported.setdefault(ObjectKey.of(cluster), set())
        if seen in reported:
            return
        reported.add(seen)
        logger.warning("%s: %s", ObjectKey.of(cluster), message)
        await self._events.record(cluster, reason=reason, type="Warning", message=message)

    async def restamp_head_pods_of_other_kuberay_versions(
        self, key: ObjectKey, cluster: RayCluster
    ) -> None:
        """Recreate upgrade: a head Pod another KubeRay version stamped gets our hash and version
        (one merge patch, no recreate), as KubeRay does (`status/kuberay_version`). A failure is
        only logged, as in KubeRay: the head is not recreated meanwhile, the next reconcile
        tries again."""
        for name, patch in head_pod_restamps(cluster, self.observed_pods(key, cluster)):
            try:
                await self._client.patch(POD, name, patch, namespace=key.namespace)
            except KubeError as error:
                logger.info("%s: could not re-stamp head Pod %s: %s", key, name, error)
                continue
            logger.info("%s: re-stamped head Pod %s for this KubeRay version", key, name)

    async def carry_out_scaling_plan(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        plan: ScalingPlan,
        outcome: _Outcome,
        *,
        batch: _Batch | None = None,
    ) -> None:
        """Deletions first, then creates, within one batch; creates only once every planned
        deletion was issued (the plan counted on them), and only while the cluster is wanted."""
        batch = batch or _Batch()
        if plan.extra_head_pods:
            message = (
                f"found {len(plan.extra_head_pods)} head Pods "
                f"({', '.join(plan.extra_head_pods)}); expected exactly one"
            )
            await self._events.record(
                cluster, reason="MultipleHeadPods", message=message, type="Warning"
            )
        pods = {p["metadata"]["name"]: p for p in self.observed_pods(key, cluster)}
        deletions = [
            d for d in (*plan.delete, *(d for g in plan.groups for d in g.delete)) if d.name in pods
        ]
        # workersToDelete is cleared after this reconcile: its Pods all go now (they exist, so
        # they are bounded); the other deletions are re-planned batch by batch.
        requested = [d for d in deletions if d.requested]
        batch.spend(len(requested))
        chosen = [*requested, *batch.take([d for d in deletions if not d.requested])]
        await self._run_bounded(
            self._delete_pod(key, cluster, pods[d.name], d, outcome) for d in chosen
        )
        await self.report_unknown_workers_to_delete(cluster, plan)
        if batch.work_left:
            return  # Creates wait for the planned deletions: the plan counted on them.
        head, replicas = _creates_that_fit(plan, batch)
        creates: list[Iterable[Callable[[], Object]]] = []
        if head:
            creates.append(
                [lambda: build_head_pod(cluster, suffix=random_suffix(), options=self._pod_options)]
            )
        creates += (self._worker_pod_builders(cluster, group, [index]) for group, index in replicas)
        await self._run_bounded(
            self._create_pod(key, cluster, build, outcome)
            for build in self._while_wanted(
                key, cluster["metadata"]["uid"], itertools.chain.from_iterable(creates)
            )
        )

    async def report_unknown_workers_to_delete(
        self, cluster: RayCluster, plan: ScalingPlan
    ) -> None:
        """One Warning Event per cluster naming at most NAMES_PER_EVENT of the ignored names.

        The same list gives the same message on every reconcile, so the recorder bumps one
        Event's count instead of writing one Event per name and retry (issue 12, finding 9).
        """
        total = sum(len(group.unknown_workers_to_delete) for group in plan.groups)
        if not total:
            return
        shown = list(
            itertools.islice(
                (
                    f"{group.group_name}/{unknown}"
                    for group in plan.groups
                    for unknown in group.unknown_workers_to_delete
                ),
                NAMES_PER_EVENT,
            )
        )
        more = f" and {total - len(shown)} more" if total > len(shown) else ""
        await self._events.record(
            cluster,
            reason="UnknownWorkerToDelete",
            type="Warning",
            message=f"scaleStrategy.workersToDelete names {total} Pods that are not workers "
            f"of their group (group/name: {', '.join(shown)}{more}); ignored",
        )

    async def record_what_was_done(self, cluster: RayCluster, outcome: _Outcome) -> None:
        """One Event per kind of action, naming the Pods (a 100-Pod scale-up is one Event)."""
        for (reason, noun), names_done in outcome.done.items():
            if len(names_done) == 1:
                message = f"{reason_verb(reason)} {noun} {names_done[0]}"
            else:
                shown = ", ".join(names_done[:NAMES_PER_EVENT])
                more = len(names_done) - NAMES_PER_EVENT
                shown += f" and {more} more" if more > 0 else ""
                message = f"{reason_verb(reason)} {len(names_done)} {noun}s: {shown}"
            await self._events.record(cluster, reason=reason, message=message)

    async def clear_workers_to_delete(
        self, key: ObjectKey, cluster: RayCluster, plan: ScalingPlan
    ) -> None:
        """Empty `workersToDelete` of groups whose listed Pods were handled (as KubeRay does).

        Compare-and-clear: the patch tests that each list still holds exactly the names we acted
        on. Ray's autoscaler may have written a new list since our cache read (issue 12, finding
        11); clearing that one would lose its terminate request, and the shrunk `replicas`
        would then delete Pods it did not choose. When the test fails the API refuses the whole
        patch, and the autoscaler's write re-enqueues the cluster: the next reconcile acts on
        the new list.
        """
        operations = workers_to_delete_clearing(cluster, plan)
        if not operations:
            return
        try:
            await self._client.patch(
                RAY_CLUSTER,
                key.name,
                operations,
                namespace=key.namespace,
                patch_type=PatchType.JSON,
            )
        except (Conflict, NotFound, Invalid) as error:
            # 422: a test failed (the list or the groups changed); 409/404: a concurrent write.
            logger.info("%s: workersToDelete changed meanwhile, not cleared: %s", key, error)

    async def update_status(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        outcome: _Outcome,
        *,
        invalid_spec: str | None = None,
    ) -> float | None:
        """Write the status subresource when something other than timestamps changed.

        Progress-only changes (counters, addresses) within a second of the previous write are
        held back; the returned delay says when to look again (None: nothing held back).
        """
        new = cluster_status.compute_status(
            cluster,
            pods=self.observed_pods(key, cluster),
            services=self.observed(SERVICE, key, cluster),
            now=self._now(),
            failure=outcome.failure,
            invalid_spec=invalid_spec,
        )
        old = self._status_baseline(key, cluster)
        if not cluster_status.status_changed(old, new):
            return None
        since_last = self._monotonic() - self._last_status_write.get(key, float("-inf"))
        if since_last < MIN_SECONDS_BETWEEN_PROGRESS_WRITES and not _is_news(old, new):
            return MIN_SECONDS_BETWEEN_PROGRESS_WRITES - since_last
        # A merge patch keeps fields it does not mention: name the vanished ones as null.
        patch = {**{k: None for k in old if k not in new}, **new}
        try:
            written = await self._client.patch_status(
                RAY_CLUSTER, key.name, {"status": patch}, namespace=key.namespace
            )
        except NotFound:
            return None
        self._last_status_write[key] = self._monotonic()
        self._written_status[key] = (
            written["metadata"]["resourceVersion"],
            written.get("status") or {},
        )
        if old.get("state") != new.get("state") and new.get("state"):
            logger.info("%s: state %s -> %s", key, old.get("state") or "(none)", new["state"])
        await self.tell_why_pods_wait(cluster, old, new)
        return None

    async def tell_why_pods_wait(
        self, cluster: RayCluster, old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> None:
        """One Event when the PodsWaiting reasons change (told by the status we just wrote,
        so not on every reconcile, nor once per Pod)."""
        told = waiting.news(old.get("conditions") or (), new.get("conditions") or ())
        if told is not None:
            await self._events.record(
                cluster, reason=told.reason, message=told.message, type=told.type
            )

    def _status_baseline(self, key: ObjectKey, cluster: RayCluster) -> Mapping[str, Any]:
        """The status to compare with: ours until the cache has caught up with our last write."""
        cached: Mapping[str, Any] = cluster.get("status") or {}
        if key not in self._written_status:
            return cached
        written_version, written = self._written_status[key]
        if cluster["metadata"].get("resourceVersion") == written_version:
            del self._written_status[key]
            return cached
        return written

    async def report_invalid_spec(self, key: ObjectKey, cluster: RayCluster, message: str) -> None:
        """A Warning event and the InvalidSpec condition; the spec must change to go on."""
        logger.warning("%s: invalid spec: %s", key, message)
        await self._events.record(
            cluster, reason="InvalidRayClusterSpec", message=message, type="Warning"
        )
        await self.update_status(key, cluster, _Outcome(), invalid_spec=message)

    # --- single actions ----------------------------------------------------------------------

    async def _ensure_service(self, key: ObjectKey, cluster: RayCluster, service: Object) -> None:
        await self._ensure_object(key, cluster, SERVICE, service)

    async def _ensure_object(
        self, key: ObjectKey, cluster: RayCluster, kind: Kind, desired: Object
    ) -> None:
        """Create `desired`, or bring this cluster's object of that name back to it.

        An object of that name this RayCluster does not own (another cluster's head Service, a
        user's Role) is a conflict: reported, and the reconcile stops there (issue 12, finding 4).
        """
        name = desired["metadata"]["name"]
        uid = cluster["metadata"]["uid"]
        existing = next(
            (o for o in self.observed(kind, key, cluster) if o["metadata"]["name"] == name), None
        ) or self._cached_without_cluster_label(kind, key, name, uid)
        if existing is None:
            existing = await self._create_or_read(key, cluster, kind, desired)
            if existing is None:
                return
        if not _owned_by(existing, uid):
            await self._report_name_conflict(key, cluster, kind, existing)
        await self._repair_drift(key, cluster, kind, desired, existing)

    def _cached_without_cluster_label(
        self, kind: Kind, key: ObjectKey, name: str, uid: str
    ) -> Object | None:
        """This cluster's object `name` when cached but not labelled `ray.io/cluster`.

        KubeRay's headless worker Service carries only `ray.io/headless-worker-svc`: the cache
        has it (watched by that label) but not under the cluster's name. Found by name and owner
        uid, a taken-over cluster's is used as is; no create that answers 409, no relabelling.
        """
        cached = self._store.get(kind, key.namespace, name)
        return cached if cached is not None and _owned_by(cached, uid) else None

    async def _create_or_read(
        self, key: ObjectKey, cluster: RayCluster, kind: Kind[Object], desired: Object
    ) -> Object | None:
        """Create `desired` (None), or read the object that already has its name.

        A 409 means ours not cached yet (or no longer cached: a label we watch by was removed),
        or someone else's: only its ownerReferences tell, so it is read from the API.
        """
        name = desired["metadata"]["name"]
        try:
            created = await self._client.create(kind, desired, namespace=key.namespace)
        except AlreadyExists:
            try:
                return await self._client.get(kind, name, namespace=key.namespace)
            except NotFound as error:
                # Deleted between our create and read: retried (with backoff) from the top.
                raise ReplicaFailureError(f"{key}: {kind.kind} {name} came and went") from error
        except ApiError as error:
            await self._events.record(
                cluster,
                reason=f"FailedToCreate{kind.kind}",
                type="Warning",
                message=f"Failed to create {kind.kind} {key.namespace}/{name}: {error}",
            )
            raise
        self._expectations[kind].created(key, created)
        logger.info("%s: created %s %s", key, kind.kind, name)
        await self._events.record(
            cluster,
            reason=f"Created{kind.kind}",
            message=f"Created {kind.kind} {key.namespace}/{name}",
        )
        return None

    async def _report_name_conflict(
        self, key: ObjectKey, cluster: RayCluster, kind: Kind, existing: Object
    ) -> NoReturn:
        """Warning Event + ReplicaFailure condition (the cluster is not ready), then raise so
        the queue retries with backoff: the name may be freed later. No Pod is created
        meanwhile: workers would join whatever head the foreign Service selects."""
        name = existing["metadata"]["name"]
        message = (
            f"{kind.kind} {key.namespace}/{name} exists and {owner_description(existing)}, "
            "not this RayCluster: no Pods are created until it is deleted or renamed"
        )
        logger.warning("%s: %s", key, message)
        await self._events.record(
            cluster, reason=f"FailedToCreate{kind.kind}", type="Warning", message=message
        )
        failure = cluster_status.ReplicaFailure(
            cluster_status.name_conflict_reason(kind.kind), message, blocks_ready=True
        )
        await self.update_status(key, cluster, _Outcome(failure=failure))
        raise NameConflictError(f"{key}: {message}")

    async def _repair_drift(
        self, key: ObjectKey, cluster: RayCluster, kind: Kind, desired: Object, existing: Object
    ) -> None:
        """Patch back the fields we set that someone changed (issue 12, finding 10).

        Costs nothing on a converged object: `repair_patch` compares only what we set. After a
        repair the cache shows the old version for a moment; its resourceVersion is remembered
        so that the same drift is not patched twice.
        """
        metadata = existing["metadata"]
        identity = (kind.kind, metadata["name"])
        repaired_from = self._repaired_from.get(key, {})
        version = str(metadata.get("resourceVersion", ""))
        if repaired_from.get(identity) == version:
            return
        repaired_from.pop(identity, None)
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
            await self._events.record(
                cluster,
                reason=f"FailedToRepair{kind.kind}",
                type="Warning",
                message=f"Failed to restore {what} to its desired spec: {error}",
            )
            return
        self._repaired_from.setdefault(key, {})[identity] = version
        changed = ", ".join(sorted(_patched_paths(patch)))
        logger.info("%s: restored %s (%s)", key, what, changed)
        await self._events.record(
            cluster,
            reason=f"Repaired{kind.kind}",
            type="Warning",
            message=f"Restored {what}: {changed} had been changed",
        )

    def _worker_pod_builders(
        self, cluster: RayCluster, group: GroupPlan, indices: Iterable[int]
    ) -> Iterator[Callable[[], Object]]:
        """Builders of the Pods of these replicas, made one at a time as they are taken (a
        replica of `numOfHosts` Pods never exists as a list)."""
        for index in indices:
            replica = (
                replica_group_name(group.group_name, suffix=random_suffix())
                if group.hosts_per_replica > 1
                else None
            )
            for host in range(group.hosts_per_replica):
                yield _worker_builder(
                    cluster,
                    group.group_name,
                    index=index,
                    replica=replica,
                    host=host,
                    options=self._pod_options,
                )

    async def _create_pod(
        self, key: ObjectKey, cluster: RayCluster, build: Callable[[], Object], outcome: _Outcome
    ) -> None:
        pod = build()
        name = pod["metadata"]["name"]
        head = pod["metadata"]["labels"].get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        kind_word = "head" if head else "worker"
        try:
            created = await self._client.create(POD, pod, namespace=key.namespace)
        except (TransportError, ServerError) as error:
            # No answer, or the server failed possibly after writing (a timeout while etcd
            # commits): the Pod may exist. Counted as existing under its name until the cache
            # shows it or the expectation expires, so no duplicate is made (finding 5).
            self._expectations[POD].maybe_created(key, pod)
            await self._report_failed_pod_action(
                cluster, outcome, verb="create", head=head, pod=name, error=error, generated=True
            )
            return
        except ApiError as error:
            await self._report_failed_pod_action(
                cluster, outcome, verb="create", head=head, pod=name, error=error, generated=True
            )
            return
        self._expectations[POD].created(key, created)
        logger.info("%s: created %s Pod %s", key, kind_word, name)
        outcome.record(
            f"Created{kind_word.title()}Pod", f"{kind_word} Pod", f"{key.namespace}/{name}"
        )

    async def _delete_pod(
        self,
        key: ObjectKey,
        cluster: RayCluster,
        pod: Pod,
        deletion: PodDeletion,
        outcome: _Outcome,
    ) -> None:
        head = pod["metadata"].get("labels", {}).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE
        kind_word = "head" if head else "worker"
        try:
            await self._delete(key, POD, pod)
        except ApiError as error:
            await self._report_failed_pod_action(
                cluster, outcome, verb="delete", head=head, pod=deletion.name, error=error
            )
            return
        logger.info("%s: deleted %s Pod %s (%s)", key, kind_word, deletion.name, deletion.reason)
        outcome.record(
            f"Deleted{kind_word.title()}Pod",
            f"{kind_word} Pod",
            f"{key.namespace}/{deletion.name} ({deletion.reason})",
        )

    async def _report_failed_pod_action(
        self,
        cluster: RayCluster,
        outcome: _Outcome,
        *,
        verb: str,
        head: bool,
        pod: str,
        error: KubeError,
        generated: bool = False,
    ) -> None:
        """The ReplicaFailure condition (KubeRay's reasons) and a Warning Event quoting the API.

        A Pod we failed to create has a fresh random name on every retry; with `generated` that
        suffix is masked in the message (the API quotes the name too), so retries produce the
        same message: one Event with a growing count, and a status that does not change.
        """
        reasons = {
            ("create", True): cluster_status.FAILED_CREATE_HEAD_POD,
            ("create", False): cluster_status.FAILED_CREATE_WORKER_POD,
            ("delete", True): cluster_status.FAILED_DELETE_HEAD_POD,
            ("delete", False): cluster_status.FAILED_DELETE_WORKER_POD,
        }
        role = "head" if head else "worker"
        namespace = cluster["metadata"].get("namespace", "")
        message = f"Failed to {verb} {role} Pod {namespace}/{pod}: {error}"
        if generated:
            message = message.replace(pod, masked_pod_name(pod))
        outcome.failure = cluster_status.ReplicaFailure(reasons[(verb, head)], message)
        await self._events.record(
            cluster,
            reason=f"FailedTo{verb.title()}{role.title()}Pod",
            message=message,
            type="Warning",
        )

    async def _delete(self, key: ObjectKey, kind: Kind, obj: Object) -> None:
        metadata = obj["metadata"]
        # NotFound: already gone; Conflict: another object of that name now, not ours to delete.
        with contextlib.suppress(NotFound, Conflict):
            await self._client.delete(
                kind, metadata["name"], namespace=key.namespace, uid=metadata.get("uid")
            )
        self._expectations[kind].deleted(key, obj)

    async def _delete_all(
        self, key: ObjectKey, objects: Sequence[tuple[Kind, Object]], *, why: str
    ) -> None:
        """Delete `objects` in parallel, at most `MAX_PARALLEL_WRITES` at a time."""

        async def delete(kind: Kind, obj: Object) -> None:
            await self._delete(key, kind, obj)
            logger.info(
                "%s: deleted %s %s because %s", key, kind.kind, obj["metadata"]["name"], why
            )

        await self._run_bounded(delete(kind, obj) for kind, obj in objects)

    def _dependents(
        self, key: ObjectKey, owner_matches: Callable[[str], bool]
    ) -> list[tuple[Kind, Object]]:
        """Cached dependents labelled for this cluster name and owned by a matching RayCluster
        uid (objects labelled so but not owned by any RayCluster are not ours to delete)."""
        found: list[tuple[Kind, Object]] = []
        for kind, expectations in self._expectations.items():
            cached = self._store.list_for_cluster(kind, key.namespace, key.name)
            for obj in expectations.observe(key, cached):
                owner = _cluster_owner_uid(obj, key.name)
                if owner is not None and owner_matches(owner) and not _terminating(obj):
                    found.append((kind, obj))
        return found

    async def _run_bounded(self, actions: Iterable[Awaitable[None]]) -> None:
        """Run `actions`, at most `MAX_PARALLEL_WRITES` at a time, taking each from the iterable
        only when a slot frees up: a lazy iterable is never materialised, and a check made
        while producing the next action (`_while_wanted`) sees the cache of that moment."""
        remaining = iter(actions)

        async def run_one_after_another() -> None:
            for action in remaining:
                await action

        await asyncio.gather(*(run_one_after_another() for _ in range(MAX_PARALLEL_WRITES)))


def _next_batch_or(batch: _Batch, requeue_after: float | None) -> Result:
    """Requeue at once (behind the keys already waiting) while work was left for another batch."""
    return Result(requeue_after=0) if batch.work_left else Result(requeue_after=requeue_after)


def _creates_that_fit(plan: ScalingPlan, batch: _Batch) -> tuple[bool, list[tuple[GroupPlan, int]]]:
    """The head (if planned) and the replicas (group, index) this batch has room for, in plan
    order; a replica is taken whole. Marks the batch when planned Pods were left for later."""
    head = plan.create_head and batch.room > 0
    batch.spend(int(head))
    replicas: list[tuple[GroupPlan, int]] = []
    taken = int(head)
    for group in plan.groups:
        for index in group.create_replica_indices:
            if batch.room <= 0:
                break
            replicas.append((group, index))
            batch.spend(group.hosts_per_replica)
            taken += group.hosts_per_replica
    if taken < plan.missing_pods:
        batch.work_left = True
    return head, replicas


def workers_to_delete_clearing(cluster: RayCluster, plan: ScalingPlan) -> list[dict[str, Any]]:
    """JSON patch operations emptying the handled `workersToDelete` lists, each guarded by
    `test` operations on the group's name and on the exact list the plan was made from."""
    groups = cluster.get("spec", {}).get("workerGroupSpecs") or []
    index_of = {g.get("groupName"): i for i, g in enumerate(groups)}
    operations: list[dict[str, Any]] = []
    for group_plan in plan.groups:
        index = index_of.get(group_plan.group_name)
        if not group_plan.clear_workers_to_delete or index is None:
            continue
        listed = (groups[index].get("scaleStrategy") or {}).get("workersToDelete") or []
        path = f"/spec/workerGroupSpecs/{index}"
        operations += [
            # The groups may have been reordered since our cache read...
            {"op": "test", "path": f"{path}/groupName", "value": group_plan.group_name},
            # ...and the autoscaler may have asked for other workers since.
            {"op": "test", "path": f"{path}/scaleStrategy/workersToDelete", "value": listed},
            {"op": "replace", "path": f"{path}/scaleStrategy/workersToDelete", "value": []},
        ]
    return operations


def masked_pod_name(name: str) -> str:
    """`c-small-worker-x7k2p` -> `c-small-worker-*****`: the name without its random suffix."""
    return name[:-RANDOM_SUFFIX_LENGTH] + "*" * RANDOM_SUFFIX_LENGTH


def _patched_paths(patch: Mapping[str, Any]) -> list[str]:
    """`{"spec": {"selector": ...}}` -> `["spec.selector"]`: what a repair changed, for Events."""
    paths: list[str] = []
    for field_name, value in patch.items():
        if isinstance(value, Mapping) and field_name in ("metadata", "spec"):
            paths += [f"{field_name}.{inner}" for inner in value]
        else:
            paths.append(field_name)
    return paths


def reason_verb(reason: str) -> str:
    """`CreatedWorkerPod` -> `Created`: the verb an Event message starts with."""
    return "Created" if reason.startswith("Created") else "Deleted"


def _is_news(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a status change is one a person or a script waits for (not mere progress)."""

    def headline(status: Mapping[str, Any]) -> tuple[Any, ...]:
        conditions = sorted(
            (c.get("type"), c.get("status"), c.get("reason"))
            for c in status.get("conditions") or ()
        )
        return status.get("state"), status.get("observedGeneration"), conditions

    return headline(old) != headline(new)


def _worker_builder(
    cluster: RayCluster,
    group_name: str,
    *,
    index: int,
    replica: str | None,
    host: int,
    options: PodOptions,
) -> Callable[[], Object]:
    return lambda: build_worker_pod(
        cluster,
        group_name,
        suffix=random_suffix(),
        replica_index=index,
        replica_name=replica,
        host_index=host,
        options=options,
    )


def _managed_elsewhere(cluster: Mapping[str, Any]) -> bool:
    return (cluster.get("spec") or {}).get("managedBy") not in names.OWN_MANAGED_BY


def _cluster_owner_uid(obj: Object, cluster_name: str) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == RAY_CLUSTER.kind and ref.get("name") == cluster_name:
            return str(ref.get("uid", ""))
    return None


def _owned_by(obj: Object, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())


def _terminating(obj: Object) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _is_provisioned(cluster: RayCluster) -> bool:
    conditions = (cluster.get("status") or {}).get("conditions") or ()
    return any(
        c.get("type") == cluster_status.PROVISIONED and c.get("status") == "True"
        for c in conditions
    )
