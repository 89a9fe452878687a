"""The batch scheduler step of the RayCluster and RayJob controllers (KubeRay's scheduler plugins).

`BatchScheduling` is built from `--batch-scheduler` and does what KubeRay's plugin does at its
three hooks: `ensure_for_cluster` / `ensure_for_job` (KubeRay's `DoBatchSchedulingOnSubmission`:
create or resize the PodGroup, or refuse a RayJob the scheduler cannot gang-schedule),
`decorate` (`AddMetadataToChildResource`, pure, from `builders.batch_scheduling`) and
`release_for_job` (`CleanupOnCompletion`: a finished or suspended RayJob's Volcano PodGroup
shrinks to what its cluster still holds, zero once the cluster is gone).

PodGroups are read from the cache (their kind is watched only with a scheduler that makes them)
and written by the API. A PodGroup CRD the API server lacks is told as a Warning Event on the
owner and the reconcile fails into backoff (no Pods that no scheduler would place), never a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ray_operator.builders import batch_scheduling as build
from ray_operator.runtime.controller import ControllerContext
from ray_operator.runtime.errors import AlreadyExists, NotFound, ReportedError
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import POD_GROUP_KINDS, RAY_CLUSTER, Kind

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

CRD_MISSING_REASON = "PodGroupCRDMissing"
INVALID_LABEL_REASON = "InvalidBatchSchedulingLabel"
REFUSED_REASON = "BatchSchedulingRefused"
CLEANED_UP_REASON = "BatchSchedulerCleanedUp"


class BatchSchedulingError(ReportedError):
    """The scheduler's objects could not be made (told by a Warning Event): the reconcile fails
    into backoff, as KubeRay's."""


class BatchScheduling:
    """One operator's batch scheduler (`scheduler` empty: none, every hook does nothing)."""

    def __init__(self, context: ControllerContext, scheduler: str) -> None:
        self.scheduler = scheduler
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._pod_group: Kind[JSON] | None = POD_GROUP_KINDS.get(scheduler)

    @property
    def pod_group_kind(self) -> Kind[JSON] | None:
        """The PodGroup kind this scheduler creates (None: it creates none)."""
        return self._pod_group

    def decorate(self, parent: Object, child: JSON, *, group_name: str, pod: bool = True) -> JSON:
        """`child` with the scheduler's metadata from `parent` (see the builder)."""
        return build.add_scheduling_metadata(
            self.scheduler, parent=parent, child=child, group_name=group_name, pod=pod
        )

    async def ensure_for_cluster(self, cluster: Object) -> None:
        """A RayCluster's PodGroup: Volcano's (not for a RayJob's cluster: the RayJob's group
        covers it), scheduler-plugins' (only with the gang label; created once, never resized,
        as KubeRay). Not for a suspended cluster: KubeRay's pod step stops before it."""
        if (cluster.get("spec") or {}).get("suspend") is True:
            return
        if self.scheduler == build.VOLCANO:
            if _created_by_rayjob(cluster):
                return
            await self._sync_volcano(cluster, build.volcano_gang(cluster.get("spec") or {}))
        elif self.scheduler == build.SCHEDULER_PLUGINS and build.is_gang_scheduled(cluster):
            name = cluster["metadata"]["name"]
            if self._cached(name, cluster) is None:
                await self._create(cluster, build.build_scheduler_plugins_pod_group(cluster))

    async def ensure_for_job(self, rayjob: Object) -> str | None:
        """Before a RayJob's cluster is made: its Volcano PodGroup (cluster plus submitter), or
        the reason the scheduler refuses it (None: go on)."""
        spec = rayjob.get("spec") or {}
        if self.scheduler == build.KAI_SCHEDULER and _mode(rayjob) == "K8sJobMode":
            return (
                "KAI-Scheduler does not support RayJob with K8sJobMode: the submitter pod is "
                "created after the RayCluster is ready, which prevents gang scheduling"
            )
        if self.scheduler != build.VOLCANO:
            return None
        if not spec.get("rayClusterSpec"):
            return (
                "gang scheduling does not support a RayJob that references an existing "
                "RayCluster (clusterSelector)"
            )
        gang = build.volcano_gang(spec["rayClusterSpec"]).plus(build.submitter_resources(rayjob))
        await self._sync_volcano(rayjob, gang)
        return None

    async def release_for_job(self, rayjob: Object, status: Object) -> None:
        """A finished or suspended RayJob's Volcano PodGroup asks only for what its cluster
        still holds: the cluster's own size while it lives, nothing once it is gone."""
        spec = rayjob.get("spec") or {}
        if self.scheduler != build.VOLCANO or spec.get("clusterSelector"):
            return
        cluster_name = str(status.get("rayClusterName") or "")
        if not cluster_name:
            return
        namespace = rayjob["metadata"]["namespace"]
        cluster = self._store.get(RAY_CLUSTER, namespace, cluster_name)
        gang = build.GangSize(0, {})
        if cluster is not None and not cluster["metadata"].get("deletionTimestamp"):
            gang = build.volcano_gang(cluster.get("spec") or {})
        if await self._sync_volcano(rayjob, gang, create=False):
            self._events.record(
                rayjob,
                reason=CLEANED_UP_REASON,
                message=f"Cleaned up batch scheduler resources for RayJob {namespace}/"
                f"{rayjob['metadata']['name']}",
            )

    # --- PodGroups ----------------------------------------------------------------------------

    async def _sync_volcano(
        self, owner: Object, gang: build.GangSize, *, create: bool = True
    ) -> bool:
        """Create the owner's Volcano PodGroup, or resize it when `minMember` or `minResources`
        differ; True when something was written."""
        name = build.volcano_pod_group_name(owner)
        existing = self._cached(name, owner)
        if existing is None:
            if not create:
                return False
            try:
                pod_group = build.build_volcano_pod_group(owner, gang)
            except build.InvalidSchedulingLabelError as error:
                self._events.record(
                    owner, reason=INVALID_LABEL_REASON, message=str(error), type="Warning"
                )
                raise BatchSchedulingError(str(error)) from None
            return await self._create(owner, pod_group)
        spec = existing.get("spec") or {}
        if spec.get("minMember") == gang.min_member and build.same_resources(
            spec.get("minResources"), gang.min_resources
        ):
            return False
        wanted = gang.resource_strings()
        removed = {key: None for key in spec.get("minResources") or {} if key not in wanted}
        patch = {"spec": {"minMember": gang.min_member, "minResources": {**removed, **wanted}}}
        assert self._pod_group is not None
        try:
            await self._client.patch(
                self._pod_group, name, patch, namespace=owner["metadata"]["namespace"]
            )
        except NotFound:
            return False  # Deleted meanwhile: its event brings the owner back to create it.
        logger.info("%s: resized PodGroup %s", _key(owner), name)
        return True

    def _cached(self, name: str, owner: Object) -> JSON | None:
        assert self._pod_group is not None
        return self._store.get(self._pod_group, owner["metadata"]["namespace"], name)

    async def _create(self, owner: Object, pod_group: JSON) -> bool:
        assert self._pod_group is not None
        name = pod_group["metadata"]["name"]
        try:
            await self._client.create(
                self._pod_group, pod_group, namespace=owner["metadata"]["namespace"]
            )
        except AlreadyExists:
            return False  # Ours, not cached yet (KubeRay takes it as it is, too).
        except NotFound:
            kind = self._pod_group
            message = (
                f"the API server does not serve {kind.api_version} PodGroups (the "
                f"CustomResourceDefinition {kind.plural}.{kind.group} is not installed): install "
                f"the {self.scheduler} scheduler's CRDs, or run the operator without "
                f"--batch-scheduler={self.scheduler}"
            )
            self._events.record(owner, reason=CRD_MISSING_REASON, message=message, type="Warning")
            raise BatchSchedulingError(message) from None
        logger.info("%s: created PodGroup %s", _key(owner), name)
        return True


def _created_by_rayjob(cluster: Object) -> bool:
    labels = cluster["metadata"].get("labels") or {}
    return labels.get(names.ORIGINATED_FROM_CRD_LABEL) == names.CRD_RAY_JOB


def _mode(rayjob: Object) -> str:
    return str((rayjob.get("spec") or {}).get("submissionMode") or "K8sJobMode")


def _key(obj: Object) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
