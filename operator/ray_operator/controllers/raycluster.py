"""The RayCluster controller: make a cluster's Pods and Services match its spec, then report.

`reconcile` reads like a table of contents: validate, remove what an earlier incarnation left,
ensure the Services, RBAC, auth Secret, Ingress, GCS storage, NetworkPolicies and mTLS PKI, carry
out the scaling plan, clear `workersToDelete`, write the status. The decisions are pure functions
elsewhere (`builders/` build the objects, `planning/scaling.py` plans, `status/raycluster.py`
computes the status, `validation/` judges the spec); the steps that execute them against the API
are objects of their own, one per responsibility:

- `owned_objects.OwnedObjects`: the expectations around every create and delete, the one
  "ensure an owned object" sequence (create or read, ownership, collision, drift repair), bounded
  batches of deletes;
- `gcs_fault_tolerance.GcsFaultTolerance`: the GCS storage PVC and the Redis cleanup finalizer;
- `scaling_executor.ScalingExecutor`: the Pod creates and deletes of the scaling plan;
- `raycluster_status.ClusterStatusWriter`: the status write, only when it changed;
- `network_policies.NetworkPolicySteps`, `mtls.ClusterMTLS`, `batch_scheduling.BatchScheduling`.

What a cluster owns is decided by ownerReferences (its uid), never by labels alone. An object of
a name we must use that belongs to someone else (a 409 we do not own) is an error — Event,
ReplicaFailure condition, not ready, no Pods — retried with backoff; an owned object that someone
edited is patched back.

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
cleanup Job; a cluster with Redis-backed GCS FT is held by KubeRay's finalizer until its Redis
cleanup ran (`GcsFaultTolerance.finish_deletion`).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from ray_operator.builders.auth import (
    auth_secret_name,
    build_auth_secret,
    needs_generated_auth_secret,
)
from ray_operator.builders.ingress import (
    build_head_ingress,
    ingress_annotation_patch,
    wants_ingress,
)
from ray_operator.builders.pods import PodOptions, with_feature_gates
from ray_operator.builders.rbac import (
    build_autoscaler_role,
    build_autoscaler_role_binding,
    build_autoscaler_service_account,
    user_names_service_account,
)
from ray_operator.builders.redis_cleanup import is_redis_cleanup_job
from ray_operator.builders.services import (
    build_head_service,
    build_headless_service,
    needs_headless_service,
)
from ray_operator.controllers.batch_scheduling import BatchScheduling
from ray_operator.controllers.gcs_fault_tolerance import GcsFaultTolerance
from ray_operator.controllers.mtls import (
    CERT_MANAGER_RECHECK_S,
    ClusterMTLS,
    requeue_sooner,
)
from ray_operator.controllers.network_policies import NetworkPolicySteps
from ray_operator.controllers.owned_objects import (
    DEPENDENT_KINDS,
    MAX_PARALLEL_WRITES,
    PODS_PER_RECONCILE,
    Batch,
    OwnedObjects,
    ReplicaFailureError,
    owned_by,
)
from ray_operator.controllers.raycluster_status import ClusterStatusWriter
from ray_operator.controllers.scaling_executor import Outcome, ScalingExecutor
from ray_operator.features import RAY_CLUSTER_MTLS, RAY_CLUSTER_NETWORK_POLICY
from ray_operator.planning.drift import owner_description
from ray_operator.planning.kuberay_version import head_pod_restamps
from ray_operator.planning.scaling import plan_scaling
from ray_operator.runtime.controller import (
    ControllerContext,
    Result,
    cluster_key_from_label,
    own_key,
    owner_keys,
)
from ray_operator.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import (
    INGRESS,
    JOB,
    POD,
    RAY_CLUSTER,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    Kind,
    ObjectKey,
)
from ray_operator.spec.object_names import check_name
from ray_operator.spec.raycluster import is_autoscaling_enabled, spec
from ray_operator.spec.version_memo import VersionMemo
from ray_operator.status import raycluster as cluster_status
from ray_operator.validation.errors import FieldError, summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycluster import validate_raycluster

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]

# Ray's own token generator uses 32 random bytes; so does KubeRay's.
AUTH_TOKEN_BYTES = 32

__all__ = [
    "MAX_PARALLEL_WRITES",
    "PODS_PER_RECONCILE",
    "NameConflictError",
    "RayClusterController",
    "ReplicaFailureError",
]


class NameConflictError(ReplicaFailureError):
    """An object we must create has a name taken by an object this cluster does not own."""


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
        now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        # Clusters (by uid) whose generated auth Secret exists. Secrets are not watched: that
        # would take the right to read every Secret of the cluster, which the operator must not
        # hold; so existence is learnt from the create call (201 or 409) and remembered.
        self._auth_secret_ensured: set[str] = set()
        # The Secrets this process created (cluster key -> Secret uid), deleted with the cluster.
        self._generated_auth_secrets: dict[ObjectKey, str] = {}
        # Per cluster, the problems of the version last validated: most reconciles come from Pod
        # events and see the same version of the cluster again.
        self._validated: VersionMemo[ObjectKey, list[FieldError]] = VersionMemo()
        self._objects = objects = OwnedObjects(
            store=self._store, client=self._client, events=self._events
        )
        self._status = ClusterStatusWriter(
            client=self._client,
            events=self._events,
            objects=objects,
            clock=now,
            monotonic=monotonic,
        )
        self._gcs_fault_tolerance = GcsFaultTolerance(
            store=self._store,
            client=self._client,
            events=self._events,
            objects=objects,
            pod_options=self._pod_options,
            clock=now,
            redis_cleanup=redis_cleanup,
        )
        self._scaling = ScalingExecutor(
            client=self._client,
            events=self._events,
            objects=objects,
            pod_options=self._pod_options,
            is_wanted=self._is_wanted,
        )
        self._mtls = ClusterMTLS(
            client=self._client,
            store=self._store,
            events=self._events,
            objects=objects,
            ensure_object=self._ensure_object,
            gate_on=limits.feature_gates.enabled(RAY_CLUSTER_MTLS),
            cluster_domain=self._pod_options.cluster_domain,
        )
        self._network_policies = NetworkPolicySteps(
            enabled=limits.feature_gates.enabled(RAY_CLUSTER_NETWORK_POLICY),
            objects=objects,
            client=self._client,
            events=self._events,
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
            batch = Batch()
            await self.delete_everything_of_deleted_cluster(key, batch)
            return _next_batch_or(batch, None)
        if _managed_elsewhere(cluster):
            return Result()  # MultiKueue (or another controller) runs this one, as in KubeRay.
        if cluster["metadata"].get("deletionTimestamp"):
            return await self._gcs_fault_tolerance.finish_deletion(key, cluster)
        problems = self.validation_problems(key, cluster)
        if problems:
            await self.report_invalid_spec(key, cluster, summarize(problems))
            return Result()  # No retry: only a spec change (a new event) can fix it.
        if await self._gcs_fault_tolerance.ensure_redis_cleanup_finalizer(cluster):
            return Result()  # Nothing is created before the finalizer is: its event brings us back.
        outcome = Outcome()
        batch = Batch()
        await self.delete_objects_of_earlier_incarnations(key, cluster, batch)
        await self.ensure_head_service(key, cluster)
        await self.ensure_headless_worker_service(key, cluster)
        await self.ensure_autoscaler_rbac(key, cluster)
        await self.ensure_auth_secret(key, cluster)
        await self.ensure_ingress(key, cluster)
        await self._gcs_fault_tolerance.ensure_gcs_storage_pvc(key, cluster)
        await self._network_policies.ensure_network_policies(key, cluster)
        if (problem := await self._mtls.ensure_pki(key, cluster)) is not None:
            await self.report_invalid_spec(key, cluster, problem)
            return Result(requeue_after=CERT_MANAGER_RECHECK_S)
        await self.restamp_head_pods_of_other_kuberay_versions(key, cluster)
        await self._batch_scheduling.ensure_for_cluster(cluster)
        plan = plan_scaling(
            cluster,
            pods=self._objects.observed_pods(key, cluster),
            provisioned=_is_provisioned(cluster),
            max_pod_creates=PODS_PER_RECONCILE,
        )
        plan, issuance_wait = await self._mtls.hold_creates_until_issued(key, cluster, plan)
        await self._scaling.carry_out_scaling_plan(key, cluster, plan, outcome, batch=batch)
        if not self._is_wanted(key, cluster["metadata"]["uid"]):
            return Result(requeue_after=0)  # Deleted meanwhile: the delete reconcile comes next.
        self._scaling.record_what_was_done(cluster, outcome)
        await self._scaling.clear_workers_to_delete(key, cluster, plan)
        status_due_in = await self._status.update_status(key, cluster, failure=outcome.failure)
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

    # --- steps -------------------------------------------------------------------------------

    def validation_problems(self, key: ObjectKey, cluster: RayCluster) -> list[FieldError]:
        """`validate_raycluster`, once per version of the cluster.

        Validation is a pure function of the object and O(its size) — including the decode as
        KubeRay's Go types would (a spec Go cannot decode has no head Pod hash), about 40 ms for
        a 1.3 MB spec — so it is not repeated for every Pod event while the cluster is unchanged.
        """
        problems = self._validated.get(key, cluster)
        if problems is None:
            problems = self._validated.remember(
                key, cluster, validate_raycluster(cluster, limits=self._limits)
            )
        return problems

    async def delete_everything_of_deleted_cluster(self, key: ObjectKey, batch: Batch) -> None:
        """The RayCluster is gone: delete every Pod and Service it had (we rely on no GC), one
        batch per reconcile, in parallel."""
        await self._mtls.delete_issued_secrets(key, lambda owner_uid: True)
        leftovers = self._objects.dependents(key, lambda owner_uid: True)
        await self._objects.delete_all(
            key, batch.take(leftovers), why=f"RayCluster {key} was deleted"
        )
        await self.delete_generated_auth_secret(key)
        if not leftovers:
            self._objects.forget(key)
            self._status.forget(key)
            self._gcs_fault_tolerance.forget(key)
            self._validated.forget(key)
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
        self, key: ObjectKey, cluster: RayCluster, batch: Batch
    ) -> None:
        """Pods/Services of a deleted RayCluster of the same name must not join the new one."""
        uid = cluster["metadata"]["uid"]
        await self._mtls.delete_issued_secrets(key, lambda owner_uid: owner_uid != uid)
        stale = self._objects.dependents(key, lambda owner_uid: owner_uid != uid)
        await self._objects.delete_all(
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
            self._events.record(
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
        existing = await self._objects.ensure(
            key,
            cluster,
            INGRESS,
            desired,
            existing=self._objects.cached_by_name(INGRESS, key, name),
            on_collision=self._objects.collision_reported_once(
                key,
                cluster,
                INGRESS,
                finding=f"ingress-conflict/{name}",
                reason="FailedToCreateIngress",
                consequence="; not modifying it",
            ),
        )
        if existing is not None:
            await self._follow_cluster_annotations(key, cluster, desired, existing)

    async def _follow_cluster_annotations(
        self, key: ObjectKey, cluster: RayCluster, desired: Object, existing: Object
    ) -> None:
        """Write the cluster's changed annotations onto its Ingress, once per version seen."""
        annotations = ingress_annotation_patch(desired, existing)
        name = existing["metadata"]["name"]
        version = str(existing["metadata"].get("resourceVersion", ""))
        identity = ("Ingress annotations", name)
        if annotations is None or self._objects.patched_from(key, identity) == version:
            return
        with contextlib.suppress(NotFound):  # gone: its delete event brings us back
            await self._client.patch(INGRESS, name, annotations, namespace=key.namespace)
        self._objects.remember_patched(key, identity, version)
        self._events.record(
            cluster,
            reason="UpdatedIngress",
            message=f"Updated ingress {key.namespace}/{name}",
        )

    async def restamp_head_pods_of_other_kuberay_versions(
        self, key: ObjectKey, cluster: RayCluster
    ) -> None:
        """Recreate upgrade: a head Pod another KubeRay version stamped gets our hash and version
        (one merge patch, no recreate), as KubeRay does (`planning/kuberay_version`). A failure is
        only logged, as in KubeRay: the head is not recreated meanwhile, the next reconcile
        tries again."""
        for name, patch in head_pod_restamps(cluster, self._objects.observed_pods(key, cluster)):
            try:
                await self._client.patch(POD, name, patch, namespace=key.namespace)
            except KubeError as error:
                logger.info("%s: could not re-stamp head Pod %s: %s", key, name, error)
                continue
            logger.info("%s: re-stamped head Pod %s for this KubeRay version", key, name)

    async def report_invalid_spec(self, key: ObjectKey, cluster: RayCluster, message: str) -> None:
        """A Warning event and the InvalidSpec condition; the spec must change to go on."""
        logger.warning("%s: invalid spec: %s", key, message)
        self._events.record(
            cluster, reason="InvalidRayClusterSpec", message=message, type="Warning"
        )
        await self._status.update_status(key, cluster, invalid_spec=message)

    # --- owned objects a cluster cannot do without -------------------------------------------

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
            (
                o
                for o in self._objects.observed(kind, key, cluster)
                if o["metadata"]["name"] == name
            ),
            None,
        ) or self._cached_without_cluster_label(kind, key, name, uid)

        async def stop_on_name_conflict(existing: Object) -> None:
            await self._report_name_conflict(key, cluster, kind, existing)

        await self._objects.ensure(
            key, cluster, kind, desired, existing=existing, on_collision=stop_on_name_conflict
        )

    def _cached_without_cluster_label(
        self, kind: Kind, key: ObjectKey, name: str, uid: str
    ) -> Object | None:
        """This cluster's object `name` when cached but not labelled `ray.io/cluster`.

        KubeRay's headless worker Service carries only `ray.io/headless-worker-svc`: the cache
        has it (watched by that label) but not under the cluster's name. Found by name and owner
        uid, a taken-over cluster's is used as is; no create that answers 409, no relabelling.
        """
        cached = self._store.get(kind, key.namespace, name)
        return cached if cached is not None and owned_by(cached, uid) else None

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
        self._events.record(
            cluster, reason=f"FailedToCreate{kind.kind}", type="Warning", message=message
        )
        failure = cluster_status.ReplicaFailure(
            cluster_status.name_conflict_reason(kind.kind), message, blocks_ready=True
        )
        await self._status.update_status(key, cluster, failure=failure)
        raise NameConflictError(f"{key}: {message}")


def _next_batch_or(batch: Batch, requeue_after: float | None) -> Result:
    """Requeue at once (behind the keys already waiting) while work was left for another batch."""
    return Result(requeue_after=0) if batch.work_left else Result(requeue_after=requeue_after)


def _managed_elsewhere(cluster: Mapping[str, Any]) -> bool:
    return (cluster.get("spec") or {}).get("managedBy") not in names.OWN_MANAGED_BY


def _is_provisioned(cluster: RayCluster) -> bool:
    conditions = (cluster.get("status") or {}).get("conditions") or ()
    return any(
        c.get("type") == cluster_status.PROVISIONED and c.get("status") == "True"
        for c in conditions
    )
