"""What a RayJob owns, found, created, kept and deleted: its RayCluster (created from
`rayClusterSpec`, or the one `clusterSelector` names, which must exist), the K8sJobMode submitter
Job, and the `<rayjob>-head-svc` Service.

Objects are found in the cache by name and recognised as the RayJob's by its uid in their
ownerReferences (a RayJob taken over from KubeRay finds KubeRay's the same way). Deletes are
explicit and answer "gone yet?" from the cache, so a RayJob is finished only once its objects
are: where no garbage collector runs, nothing else would delete them.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.builders import rayjob as build
from ray_operator.builders.batch_scheduling import SUBMITTER_GROUP
from ray_operator.planning.drift import selector_patch
from ray_operator.runtime.errors import AlreadyExists, NotFound
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import JOB, POD, RAY_CLUSTER, SERVICE, Kind, Viewed
from ray_operator.status import rayjob as rules

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster, RayJob

    from ray_operator.controllers.batch_scheduling import BatchScheduling
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

# How often a RayJob waiting for the RayCluster its clusterSelector names says so again.
MISSING_CLUSTER_REPORT_SECONDS = 60.0


class RayJobObjects:
    """A RayJob's RayCluster, submitter Job and head Service; one per RayJob controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        events: EventRecorder,
        store: StoreView,
        batch_scheduling: BatchScheduling,
        clock: Callable[[], datetime.datetime],
        submitter_restart: bool,
    ) -> None:
        self._client = client
        self._events = events
        self._store = store
        self._batch_scheduling = batch_scheduling
        self._now = clock
        self._submitter_restart = submitter_restart
        # (namespace, name) of a RayJob → when we last reported its selected cluster missing
        # (an entry per RayJob waiting for one; dropped once found or when the RayJob is gone).
        self._missing_cluster_reported: dict[tuple[str, str], datetime.datetime] = {}

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered about a deleted RayJob."""
        self._missing_cluster_reported.pop((namespace, name), None)

    async def get_or_create_cluster(self, rayjob: RayJob, status: JSON) -> RayCluster | None:
        """The RayCluster of this run; created from `rayClusterSpec` when absent (None until the
        cache shows it). With `clusterSelector`, the selected cluster must exist."""
        name = str(status.get("rayClusterName") or "")
        namespace = rayjob["metadata"]["namespace"]
        cluster = self._store.get(RAY_CLUSTER, namespace, name)
        if cluster is not None:
            self._missing_cluster_reported.pop((namespace, rayjob["metadata"]["name"]), None)
            return cluster
        if rules.uses_cluster_selector(rayjob):
            self.report_missing_selected_cluster(rayjob, f"{namespace}/{name}")
            return None
        try:
            built = build.build_cluster_for_job(
                rayjob,
                name=name,
                submission_id=str(status.get("jobId") or ""),
                dashboard_address=str(status.get("dashboardURL") or ""),
                submitter_restart=self._submitter_restart,
            )
            if rules.submission_mode(rayjob) == "K8sJobMode":
                self._batch_scheduling.decorate(rayjob, built, group_name="", pod=False)
            await self._client.create(RAY_CLUSTER, built, namespace=namespace)
        except AlreadyExists:
            return None  # Ours, not cached yet (or a stranger's: the next look tells).
        logger.info("created RayCluster %s", name)
        self._events.record(
            rayjob, reason="CreatedRayCluster", message=f"Created RayCluster {namespace}/{name}"
        )
        return None

    def report_missing_selected_cluster(self, rayjob: RayJob, cluster: str) -> None:
        """A Warning that the selected cluster does not exist: at once, then again only every
        `MISSING_CLUSTER_REPORT_SECONDS` while we keep looking every few seconds (each report
        is an API write: a RayJob waiting for its user's cluster must not write every 3s)."""
        key = (rayjob["metadata"]["namespace"], rayjob["metadata"]["name"])
        last = self._missing_cluster_reported.get(key)
        now = self._now()
        if last is not None and (now - last).total_seconds() < MISSING_CLUSTER_REPORT_SECONDS:
            return
        self._missing_cluster_reported[key] = now
        self._events.record(
            rayjob,
            reason="RayClusterNotFound",
            type="Warning",
            message=f"RayCluster {cluster} set in the clusterSelector is not found. "
            "It must be created manually",
        )

    async def ensure_submitter_job(self, rayjob: RayJob, cluster: RayCluster, status: JSON) -> None:
        """K8sJobMode: the submitter Job `<rayjob>`, submitting to the cluster's dashboard."""
        name = rayjob["metadata"]["name"]
        if self.owned(JOB, rayjob, name) is not None:
            return
        job = build.build_submitter_job(
            rayjob,
            cluster,
            dashboard_address=str(status["dashboardURL"]),
            submission_id=str(status.get("jobId") or ""),
        )
        self._batch_scheduling.decorate(rayjob, job["spec"]["template"], group_name=SUBMITTER_GROUP)
        try:
            await self._client.create(JOB, job, namespace=rayjob["metadata"]["namespace"])
        except AlreadyExists:
            return
        logger.info("created submitter Job %s", name)
        self._events.record(
            rayjob,
            reason="CreatedRayJobSubmitter",
            message=f"Created Kubernetes Job {job['metadata']['namespace']}/{name}",
        )

    async def ensure_head_service(self, rayjob: RayJob, cluster: RayCluster) -> None:
        """`<rayjob>-head-svc` pointing at the job's cluster (not with clusterSelector)."""
        if rules.uses_cluster_selector(rayjob):
            return
        service = build.build_head_service_for_owner(rayjob, cluster)
        existing = self.owned(SERVICE, rayjob, service["metadata"]["name"])
        if existing is not None:
            await self.keep_head_service_selecting(rayjob, existing, service)
            return
        try:
            await self._client.create(SERVICE, service, namespace=rayjob["metadata"]["namespace"])
        except AlreadyExists:
            return
        self._events.record(
            rayjob,
            reason="CreatedService",
            message=f"Created Service {service['metadata']['name']}",
        )

    async def keep_head_service_selecting(
        self, rayjob: RayJob, existing: Object, service: JSON
    ) -> None:
        """Make an existing `<rayjob>-head-svc` select exactly the job's head Pod: one taken over
        from KubeRay also requires `created-by=kuberay-operator`, which a head Pod we recreate
        lacks."""
        patch = selector_patch(service, existing)
        if patch is None:
            return
        name = service["metadata"]["name"]
        try:
            await self._client.patch(
                SERVICE, name, patch, namespace=rayjob["metadata"]["namespace"]
            )
        except NotFound:
            return  # Deleted meanwhile: its event brings us back to create it.
        self._events.record(
            rayjob, reason="UpdatedService", message=f"Updated the selector of Service {name}"
        )

    async def delete_cluster(self, rayjob: RayJob, status: Object) -> bool:
        """Delete this run's RayCluster; True once the cache no longer has it."""
        if rules.uses_cluster_selector(rayjob):
            return True
        name = str(status.get("rayClusterName") or "")
        cluster = self.owned(RAY_CLUSTER, rayjob, name)
        if cluster is None:
            return True
        if not cluster["metadata"].get("deletionTimestamp"):
            await self._client.delete_seen(RAY_CLUSTER, cluster)
            logger.info("deleted RayCluster %s", name)
            self._events.record(
                rayjob, reason="DeletedRayCluster", message=f"Deleted RayCluster {name}"
            )
        return False

    async def delete_submitter_job(self, rayjob: RayJob) -> bool:
        job = self.owned(JOB, rayjob, rayjob["metadata"]["name"])
        if job is None:
            return True
        if not job["metadata"].get("deletionTimestamp"):
            await self._client.delete_seen(JOB, job)
        return False

    async def delete_head_service(self, rayjob: RayJob) -> bool:
        """Delete `<rayjob>-head-svc`: where no garbage collector runs, nothing else would
        (KubeRay leaves it to the ownerReference)."""
        name = f"{rayjob['metadata']['name']}-{names.HEAD_SERVICE_SUFFIX}"
        service = self.owned(SERVICE, rayjob, name)
        if service is None:
            return True
        if not service["metadata"].get("deletionTimestamp"):
            await self._client.delete_seen(SERVICE, service)
        return False

    def cluster(self, rayjob: RayJob, status: Object) -> RayCluster | None:
        """The RayCluster of this run that the RayJob owns (none with `clusterSelector`)."""
        return self.owned(RAY_CLUSTER, rayjob, str(status.get("rayClusterName") or ""))

    def submitter_job(self, rayjob: RayJob) -> Object | None:
        """The K8sJobMode submitter Job, named after the RayJob, as cached."""
        return self.owned(JOB, rayjob, rayjob["metadata"]["name"])

    def owned(self, kind: Kind[Viewed], owner: Object, name: str) -> Viewed | None:
        """The cached object of `kind` named `name` when `owner` is among its owners."""
        obj = self._store.get(kind, owner["metadata"]["namespace"], name)
        if obj is None:
            return None
        uid = owner["metadata"]["uid"]
        refs = obj["metadata"].get("ownerReferences") or ()
        return obj if any(ref.get("uid") == uid for ref in refs) else None

    def head_pod(self, cluster: RayCluster) -> Pod | None:
        """The cluster's head Pod as cached (ours or KubeRay's: by label and owner uid)."""
        metadata = cluster["metadata"]
        for pod in self._store.list_for_cluster(POD, metadata["namespace"], metadata["name"]):
            labels = pod["metadata"].get("labels") or {}
            refs = pod["metadata"].get("ownerReferences") or ()
            if labels.get(names.NODE_TYPE_LABEL) == names.HEAD_NODE and any(
                ref.get("uid") == metadata["uid"] for ref in refs
            ):
                return pod
        return None
