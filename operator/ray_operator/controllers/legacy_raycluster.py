"""The legacy RayCluster controller: serves `cluster.ray.io/v1` RayClusters (Ray's legacy Python
operator) while their users migrate, when the operator runs with `--legacy-clusters`.

`reconcile` reads as a table of contents: the finalizer `ray-operator.io/legacy-cluster-cleanup`
(deleting the legacy object deletes its RayCluster explicitly, whose controller then deletes the
Pods and Services: no garbage collector is relied on), the conversion (`legacy.conversion`, the
function `ray-operator convert` runs, which also makes the webhook's checks of its result), the
ray.io/v1 RayCluster of the same name (created, or rewritten when the legacy object changed:
`builders.legacy_cluster`), the legacy head Service `<name>-ray-head` carried over, the legacy
operator's own Pods retired once the new cluster is ready, then the status (`status.legacy`),
written only when it changed.

What each outcome changes:
- a spec that does not convert, or converts into a RayCluster the API server refuses:
  `Converted` False with every problem and its field path, phase Error and a Warning Event;
  the RayCluster that runs is left exactly as it is, and nothing is retried until the object
  changes (a new event brings it back);
- a RayCluster of that name not owned by this object: reported the same way (`RayClusterExists`)
  and left alone;
- a converted spec whose hash differs from the one stamped on the RayCluster: the RayCluster is
  rewritten (PUT on the cached resourceVersion: an autoscaler write in between makes it fail and
  retry), its worker groups keeping the autoscaler's replicas. A changed annotation of the legacy
  object changes every Pod template, so the Recreate upgrade restarts the Pods.

What the legacy operator left is found by API reads, not through the cache (neither carries a
`ray.io` label): the head Service by a GET once per generation of the object, its Pods by a LIST
(label `ray-cluster-name`, projected to their metadata) once the cluster is ready, deleted at most
`MAX_POD_DELETES` per reconcile. Only what the legacy object controls is touched; a Service of
that name owned by something else is left alone and reported.

Conversion warnings (fields dropped or approximated) go into one Normal Event per generation.
The conversion (with its validation) is O(spec) (at most what etcd stores, ~1.5 MB) and run once per
version of the object, in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.legacy_cluster import (
    LEGACY_CLUSTER_NAME_LABEL,
    MAX_SERVICE_NAME_LENGTH,
    head_service_changes,
    is_legacy_operator_pod,
    legacy_head_service,
    legacy_head_service_name,
    needs_rewrite,
    owned_cluster,
    rewritten_cluster,
)
from ray_operator.controllers import status_writer
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.legacy.conversion import LegacyConversionError, convert_legacy_cluster
from ray_operator.runtime.client import PatchType
from ray_operator.runtime.controller import ControllerContext, ControllerFactory, Result
from ray_operator.runtime.errors import AlreadyExists, BadRequest, Invalid, NotFound
from ray_operator.spec.kinds import (
    JSON,
    LEGACY_RAY_CLUSTER,
    POD,
    RAY_CLUSTER,
    SERVICE,
    Kind,
    ObjectKey,
)
from ray_operator.spec.version_memo import VersionMemo
from ray_operator.status import legacy as legacy_status
from ray_operator.status.rayservegraph import ConditionState
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

logger = logging.getLogger(__name__)

FINALIZER: Final = "ray-operator.io/legacy-cluster-cleanup"

MAX_WARNINGS_IN_EVENT: Final = 10
"""Conversion warnings named in the Event (the rest are counted): Events stay short."""

MAX_POD_DELETES: Final = 50
"""Legacy operator Pods deleted per reconcile; more are deleted in the next one."""

RETIRE_AGAIN_SECONDS: Final = 1.0


@dataclass(frozen=True, slots=True)
class Converted:
    """The outcome of converting one version of a legacy object."""

    cluster: JSON | None
    """The RayCluster to run (None: the spec does not convert)."""
    problem: str | None = None
    """Why not, one problem per line, each with its field path."""
    warnings: tuple[str, ...] = ()
    """What the conversion dropped or approximated."""


class LegacyRayClusterController:
    """Reconciles legacy RayClusters; their ray.io RayCluster maps back by name."""

    kind = LEGACY_RAY_CLUSTER
    reads = (LEGACY_RAY_CLUSTER, RAY_CLUSTER)

    def __init__(
        self,
        context: ControllerContext,
        *,
        limits: ClusterLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self._limits = limits
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        # Per object: the outcome of converting the version last converted.
        self._converted: VersionMemo[ObjectKey, Converted] = VersionMemo()
        # Per object: the (uid, generation) whose warnings were reported, and the last problem
        # reported (our own status write brings the object back once more: one Event is enough).
        self._warned: dict[ObjectKey, tuple[str, int]] = {}
        self._reported: dict[ObjectKey, tuple[str, int, str, str]] = {}
        # Per object: the (uid, generation) whose head Service was carried over, and the uid
        # whose legacy operator Pods are all gone.
        self._head_service_done: dict[ObjectKey, tuple[str, int]] = {}
        self._retired: dict[ObjectKey, str] = {}

    def keys_for(self, kind: Kind, obj: Mapping[str, Any]) -> Iterable[ObjectKey]:
        if kind == LEGACY_RAY_CLUSTER:
            return [LEGACY_RAY_CLUSTER.key(obj)]
        if kind == RAY_CLUSTER:
            # By name, not by owner: a RayCluster in the way (not ours) going away matters too.
            metadata = obj["metadata"]
            namespace, name = metadata.get("namespace", ""), metadata["name"]
            if self._store.get(LEGACY_RAY_CLUSTER, namespace, name) is not None:
                return [ObjectKey(LEGACY_RAY_CLUSTER.key_kind, namespace, name)]
        return []

    async def reconcile(self, key: ObjectKey) -> Result:
        legacy = self._store.get(LEGACY_RAY_CLUSTER, key.namespace, key.name)
        if legacy is None:
            self._forget(key)
            return Result()
        if legacy["metadata"].get("deletionTimestamp"):
            return await self.finalize(key, legacy)
        if await add_finalizer(self._client, LEGACY_RAY_CLUSTER, legacy, FINALIZER):
            return Result(requeue_after=1.0)  # the watch brings it back with the finalizer
        converted = await self.convert(key, legacy)
        self.report_warnings(key, legacy, converted)
        if converted.cluster is None:
            state = legacy_status.converted_condition(converted.problem)
            self.report_problem(key, legacy, state)
            cluster = self._owned_cluster(legacy)
            await self.write_status(legacy, state, cluster)
            return Result()
        state, cluster = await self.ensure_ray_cluster(key, legacy, converted.cluster)
        more_to_retire = False
        if cluster is not None:
            await self.carry_over_legacy_head_service(key, legacy)
            ready = legacy_status.ready_condition(cluster, name=key.name)
            if ready.status == "True":
                more_to_retire = await self.retire_legacy_operator_pods(key, legacy)
        await self.write_status(legacy, state, cluster)
        return Result(requeue_after=RETIRE_AGAIN_SECONDS if more_to_retire else None)

    # --- conversion ----------------------------------------------------------------------------

    async def convert(self, key: ObjectKey, legacy: Mapping[str, Any]) -> Converted:
        """The conversion of this version of the object (once per resourceVersion)."""
        known = self._converted.get(key, legacy)
        if known is not None:
            return known
        # O(spec), up to tens of milliseconds for a spec at etcd's limit: off the event loop.
        converted = await asyncio.to_thread(self._convert, legacy)
        return self._converted.remember(key, legacy, converted)

    def _convert(self, legacy: Mapping[str, Any]) -> Converted:
        try:
            conversion = convert_legacy_cluster(legacy, limits=self._limits)
        except LegacyConversionError as error:
            return Converted(None, problem="\n".join(str(p) for p in error.problems))
        warnings = tuple(str(warning) for warning in conversion.warnings)
        return Converted(owned_cluster(legacy, conversion.cluster), warnings=warnings)

    def report_warnings(
        self, key: ObjectKey, legacy: Mapping[str, Any], converted: Converted
    ) -> None:
        """One Normal Event per generation naming what the conversion dropped or approximated."""
        metadata = legacy["metadata"]
        generation = (str(metadata.get("uid", "")), int(metadata.get("generation") or 0))
        if not converted.warnings or self._warned.get(key) == generation:
            return
        self._warned[key] = generation
        shown = list(converted.warnings[:MAX_WARNINGS_IN_EVENT])
        hidden = len(converted.warnings) - len(shown)
        if hidden:
            shown.append(f"and {hidden} more (`ray-operator convert` lists them all)")
        logger.info("converted with warnings: %s", "; ".join(shown))
        self._events.record(
            legacy, reason="ConvertedWithWarnings", message="; ".join(shown), type="Normal"
        )

    def report_problem(
        self, key: ObjectKey, legacy: Mapping[str, Any], state: ConditionState
    ) -> None:
        """A Warning Event with the problem, once per generation of the object."""
        metadata = legacy["metadata"]
        seen = (
            str(metadata.get("uid", "")),
            int(metadata.get("generation") or 0),
            state.reason,
            state.message,
        )
        if self._reported.get(key) == seen:
            return
        self._reported[key] = seen
        logger.info("not converted (%s): %s", state.reason, state.message)
        self._events.record(legacy, reason=state.reason, message=state.message, type="Warning")

    # --- the RayCluster ------------------------------------------------------------------------

    def _owned_cluster(self, legacy: Mapping[str, Any]) -> RayCluster | None:
        metadata = legacy["metadata"]
        existing = self._store.get(RAY_CLUSTER, metadata["namespace"], metadata["name"])
        if existing is None or not _owned_by(existing, legacy):
            return None
        return existing

    async def ensure_ray_cluster(
        self, key: ObjectKey, legacy: Mapping[str, Any], desired: JSON
    ) -> tuple[ConditionState, RayCluster | None]:
        """Create the RayCluster, or rewrite it when the legacy object changed; the `Converted`
        condition and the RayCluster as it now is (None: none of ours)."""
        metadata = legacy["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        existing = self._store.get(RAY_CLUSTER, namespace, name)
        if existing is not None and not _owned_by(existing, legacy):
            message = (
                f"a RayCluster named {name} exists and is not owned by this cluster: "
                "delete it, or give this legacy cluster another name"
            )
            state = legacy_status.converted_condition(
                message, reason=legacy_status.RAY_CLUSTER_EXISTS
            )
            self.report_problem(key, legacy, state)
            return state, None
        try:
            if existing is None:
                cluster = await self._create(legacy, desired)
            elif existing["metadata"].get("deletionTimestamp"):
                cluster = existing  # recreated once it is gone (its delete re-enqueues us)
            elif needs_rewrite(existing, desired):
                cluster = await self._rewrite(legacy, existing, desired)
            else:
                cluster = existing
        except (Invalid, BadRequest) as error:
            message = f"the API server refused RayCluster {name}: {error}"
            state = legacy_status.converted_condition(
                message, reason=legacy_status.RAY_CLUSTER_REFUSED
            )
            self.report_problem(key, legacy, state)
            return state, self._owned_cluster(legacy)
        return legacy_status.converted_condition(), cluster

    async def _create(self, legacy: Mapping[str, Any], desired: JSON) -> RayCluster | None:
        namespace = desired["metadata"]["namespace"]
        try:
            created = await self._client.create(RAY_CLUSTER, desired, namespace=namespace)
        except AlreadyExists:
            return None  # the cache is behind: the next reconcile sees it
        logger.info("created RayCluster %s", desired["metadata"]["name"])
        self._events.record(
            legacy,
            reason="CreatedRayCluster",
            message=f"created RayCluster {namespace}/{desired['metadata']['name']}",
        )
        return created

    async def _rewrite(
        self, legacy: Mapping[str, Any], existing: Mapping[str, Any], desired: JSON
    ) -> RayCluster:
        body = rewritten_cluster(existing, desired)
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        # Conflict (the autoscaler wrote in between) propagates: retried with backoff.
        updated = await self._client.replace(RAY_CLUSTER, body)
        logger.info("updated RayCluster %s from the legacy spec", name)
        self._events.record(
            legacy,
            reason="UpdatedRayCluster",
            message=f"updated RayCluster {namespace}/{name} from the changed legacy cluster",
        )
        return updated

    # --- what the legacy operator left ---------------------------------------------------------

    async def carry_over_legacy_head_service(
        self, key: ObjectKey, legacy: Mapping[str, Any]
    ) -> None:
        """The legacy `<name>-ray-head` Service, selecting the new head Pod: created, or the
        legacy operator's own repointed; checked once per generation of the object."""
        metadata = legacy["metadata"]
        done = (str(metadata.get("uid", "")), int(metadata.get("generation") or 0))
        if self._head_service_done.get(key) == done:
            return
        desired = legacy_head_service(legacy)
        if desired is None:
            message = (
                f"no legacy head Service: {legacy_head_service_name(legacy)} is longer than "
                f"{MAX_SERVICE_NAME_LENGTH} characters"
            )
            self._events.record(
                legacy, reason="NoLegacyHeadService", message=message, type="Warning"
            )
            self._head_service_done[key] = done
            return
        name, namespace = desired["metadata"]["name"], metadata["namespace"]
        try:
            existing: Mapping[str, Any] | None = await self._client.get(
                SERVICE, name, namespace=namespace
            )
        except NotFound:
            existing = None
        if existing is None:
            with contextlib.suppress(AlreadyExists):  # made meanwhile: looked at again next time
                await self._client.create(SERVICE, desired, namespace=namespace)
                self._events.record(
                    legacy,
                    reason="CreatedLegacyHeadService",
                    message=f"created Service {name}, selecting the head Pod of RayCluster "
                    f"{metadata['name']}",
                )
                self._head_service_done[key] = done
            return
        if not _owned_by(existing, legacy):
            message = f"a Service named {name} exists and is not this cluster's: left alone"
            self._events.record(
                legacy, reason="LegacyHeadServiceExists", message=message, type="Warning"
            )
        elif operations := head_service_changes(existing, desired["spec"]):
            await self._client.patch(
                SERVICE, name, operations, namespace=namespace, patch_type=PatchType.JSON
            )
            logger.info("Service %s now selects the head Pod of the RayCluster", name)
            self._events.record(
                legacy,
                reason="RepointedLegacyHeadService",
                message=f"Service {name} now selects the head Pod of RayCluster {metadata['name']}",
            )
        self._head_service_done[key] = done

    async def retire_legacy_operator_pods(self, key: ObjectKey, legacy: Mapping[str, Any]) -> bool:
        """Delete the Pods the legacy operator started for this cluster, now that the RayCluster
        runs it; True when more are left for the next reconcile."""
        uid = str(legacy["metadata"].get("uid", ""))
        if self._retired.get(key) == uid:
            return False
        pods = await self._legacy_operator_pods(legacy)
        for pod in pods[:MAX_POD_DELETES]:
            await self._client.delete_seen(POD, pod)
        if pods:
            logger.info(
                "deleted %d Pods the legacy operator had started", len(pods[:MAX_POD_DELETES])
            )
            self._events.record(
                legacy,
                reason="DeletedLegacyOperatorPods",
                message=f"deleted {len(pods[:MAX_POD_DELETES])} Pods the legacy operator had "
                f"started; RayCluster {legacy['metadata']['name']} runs the cluster now",
            )
        if len(pods) > MAX_POD_DELETES:
            return True
        self._retired[key] = uid
        return False

    async def _legacy_operator_pods(self, legacy: Mapping[str, Any]) -> list[JSON]:
        """The legacy operator's live Pods of this cluster (their metadata only)."""
        metadata = legacy["metadata"]
        if len(metadata["name"]) > MAX_SERVICE_NAME_LENGTH:
            return []  # no label value can name it: the legacy operator labelled none
        listed = await self._client.list(
            POD,
            namespace=metadata["namespace"],
            label_selector=f"{LEGACY_CLUSTER_NAME_LABEL}={metadata['name']}",
            keep=_metadata_only,
        )
        return [
            pod
            for pod in listed.items
            if is_legacy_operator_pod(pod, legacy) and not pod["metadata"].get("deletionTimestamp")
        ]

    # --- status and deletion -------------------------------------------------------------------

    async def write_status(
        self, legacy: Mapping[str, Any], converted: ConditionState, cluster: RayCluster | None
    ) -> None:
        metadata = legacy["metadata"]
        old = dict(legacy.get("status") or {})
        observed = legacy_status.Observed(
            generation=int(metadata.get("generation") or 0),
            cluster_name=metadata["name"],
            converted=converted,
            cluster=cluster,
        )
        new = legacy_status.compute_status(old, observed, now=self._now())
        if not legacy_status.status_changed(old, new):
            return
        # Conflict: the object changed since the cache showed it, and that change brings it back
        # here (level-triggered): nothing is lost by not retrying this write.
        await status_writer.write_status(
            self._client, LEGACY_RAY_CLUSTER, legacy, old, new, drop_conflicts=True
        )

    async def finalize(self, key: ObjectKey, legacy: Mapping[str, Any]) -> Result:
        """Being deleted: delete the RayCluster (its controller deletes its Pods), then let go."""
        self._forget(key)
        if not has_finalizer(legacy, FINALIZER):
            return Result()
        owned = self._owned_cluster(legacy)
        if owned is not None and not owned["metadata"].get("deletionTimestamp"):
            await self._client.delete_seen(RAY_CLUSTER, owned)
            logger.info("deleted RayCluster %s", owned["metadata"]["name"])
            self._events.record(
                legacy,
                reason="DeletedRayCluster",
                message=f"deleted RayCluster {owned['metadata']['name']}",
            )
        await self._delete_legacy_head_service(legacy)
        pods = await self._legacy_operator_pods(legacy)
        for pod in pods[:MAX_POD_DELETES]:
            await self._client.delete_seen(POD, pod)
        if len(pods) > MAX_POD_DELETES:
            return Result(requeue_after=RETIRE_AGAIN_SECONDS)
        await remove_finalizer(self._client, LEGACY_RAY_CLUSTER, legacy, FINALIZER)
        return Result()

    async def _delete_legacy_head_service(self, legacy: Mapping[str, Any]) -> None:
        name = legacy_head_service_name(legacy)
        if len(name) > MAX_SERVICE_NAME_LENGTH:
            return
        try:
            service = await self._client.get(
                SERVICE, name, namespace=legacy["metadata"]["namespace"]
            )
        except NotFound:
            return
        if _owned_by(service, legacy):
            await self._client.delete_seen(SERVICE, service)

    def _forget(self, key: ObjectKey) -> None:
        self._converted.forget(key)
        for memory in (
            self._warned,
            self._reported,
            self._head_service_done,
            self._retired,
        ):
            memory.pop(key, None)


def _metadata_only(pod: Mapping[str, Any]) -> JSON:
    metadata = pod.get("metadata") or {}
    kept = ("name", "namespace", "uid", "ownerReferences", "deletionTimestamp")
    return {"metadata": {field: metadata[field] for field in kept if field in metadata}}


def _owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    uid = owner["metadata"].get("uid")
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or ())


def legacy_raycluster_controller(*, limits: ClusterLimits = DEFAULT_LIMITS) -> ControllerFactory:
    """The factory `app.run(..., controllers=[...])` takes (with `--legacy-clusters`): the
    conversion holds legacy clusters to the operator's limits (`--max-pods-per-cluster`)."""
    return functools.partial(LegacyRayClusterController, limits=limits)
