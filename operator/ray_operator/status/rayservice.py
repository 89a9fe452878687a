"""A RayService's decisions and status, as pure functions (KubeRay's `rayservice_controller.go`).

- `needs_serve_update`: PUT `serveConfigV2` to a cluster when we never did, when its hash
  changed, or when the cluster lost its applications (a head restart without GCS FT).
- `needs_new_cluster`: the serving (or pending) cluster was built from a different
  `rayClusterConfig` → prepare a pending cluster (zero-downtime upgrade), unless the
  upgrade strategy is `None`.
- `should_update_cluster`: rewrite a cluster in place instead (KubeRay's `shouldUpdateCluster`:
  groups only added at the end, or an active cluster stamped by another KubeRay version);
  `cluster_updated_in_place` is the body of that update.
- `compute_status`: active/pending service statuses, promotion of the pending cluster once the
  Services point at it, `numServeEndpoints`, conditions `Ready` and `UpgradeInProgress`, and the
  deprecated `serviceStatus` (same meaning as Ready). With the `ray.io/initializing-timeout`
  annotation, a RayService still `Initializing` after that long gets Ready=False/
  `InitializingTimeout` and its cluster names cleared (the clusters are then deleted as replaced
  ones); that state is terminal (`initializing_timed_out`): only suspend/resume or recreating the
  RayService starts over, as in KubeRay.
- `spec.suspend` (KubeRay's `handleSuspend`): `suspend_phase` says where the state machine
  stands: no suspension → `Suspending` (staged in the status first: the commit point) → owned
  RayClusters and Services deleted → `Suspended` → resumed when `suspend` goes false. Once
  `Suspending` is stored, the suspension completes even if `suspend` is turned off meanwhile.
"""

from __future__ import annotations

import copy
import datetime
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_operator.builders.rayservice import build_cluster_for_service, is_cluster_spec_hash_equal
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.dashboard_models import ServeApplicationStatus
from ray_operator.spec.raycluster import json_copy
from ray_operator.status.conditions import set_condition
from ray_operator.validation.rayservice import (
    INITIALIZING_TIMEOUT_ANNOTATION,
    initializing_timeout_seconds,
)

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster, RayService


JSON = dict[str, Any]
Object = Mapping[str, Any]

READY = "Ready"
UPGRADE_IN_PROGRESS = "UpgradeInProgress"
ROLLBACK_IN_PROGRESS = "RollbackInProgress"
SUSPENDING = "Suspending"
SUSPENDED = "Suspended"
# Condition reasons (KubeRay's RayServiceConditionReason).
INITIALIZING = "Initializing"
INITIALIZING_TIMEOUT = "InitializingTimeout"
SUSPEND_REQUESTED = "SuspendRequested"
SUSPEND_IN_PROGRESS = "SuspendInProgress"
SUSPEND_COMPLETE = "SuspendComplete"
RESUMED = "RayServiceResumed"
ZERO_SERVE_ENDPOINTS = "ZeroServeEndpoints"
NON_ZERO_SERVE_ENDPOINTS = "NonZeroServeEndpoints"
BOTH_CLUSTERS_EXIST = "BothActivePendingClustersExist"
NO_PENDING_CLUSTER = "NoPendingCluster"
NO_ACTIVE_CLUSTER = "NoActiveCluster"
VALIDATION_FAILED = "ValidationFailed"
RUNNING = "Running"

CLUSTER_HASH_ANNOTATION = "ray.io/hash-without-replicas-and-workers-to-delete"


def application_statuses(apps: Mapping[str, ServeApplicationStatus]) -> JSON:
    """`applicationStatuses` as the CRD spells it."""
    return {
        name: {
            "status": app.status,
            "message": app.message,
            "serveDeploymentStatuses": {
                deployment: {"status": d.status, "message": d.message}
                for deployment, d in app.deployments.items()
            },
        }
        for name, app in sorted(apps.items())
    }


def apps_ready(apps: Mapping[str, ServeApplicationStatus]) -> bool:
    """A cluster takes traffic only when it has applications and all of them are RUNNING."""
    return bool(apps) and all(app.running for app in apps.values())


def needs_serve_update(
    cached_hash: str | None, current_hash: str, *, apps: Mapping[str, ServeApplicationStatus]
) -> tuple[bool, str]:
    """Whether to PUT the Serve config, and why (KubeRay's `checkIfNeedSubmitServeApplications`)."""
    if cached_hash is None:
        return True, "Nothing has been cached for the cluster."
    if not apps:
        return True, (
            "No Serve application found in the RayCluster. A possible reason is that "
            "the head Pod crashed and GCS FT was not enabled."
        )
    if cached_hash != current_hash:
        return True, "Current V2 Serve config doesn't match cached Serve config."
    return False, "Current V2 Serve config matches cached Serve config."


def zero_downtime_upgrade_enabled(rayservice: RayService) -> bool:
    """`upgradeStrategy.type` NewCluster (the default) or NewClusterWithIncrementalUpgrade
    (admitted only with its feature gate on); `None` turns upgrades off."""
    strategy = rayservice.get("spec", {}).get("upgradeStrategy", {}).get("type")
    return strategy in (None, "", "NewCluster", "NewClusterWithIncrementalUpgrade")


def needs_new_cluster(
    rayservice: RayService,
    *,
    goal_hash: str,
    active: RayCluster | None,
    pending: RayCluster | None,
    pending_serving: bool = False,
) -> bool:
    """Whether to name a new pending cluster (KubeRay's `shouldPrepareNewCluster`)."""
    if pending_serving:
        return False
    if active is None and pending is None:
        return True
    cluster = pending if pending is not None else active
    assert cluster is not None
    annotations = cluster["metadata"].get("annotations") or {}
    if annotations.get(CLUSTER_HASH_ANNOTATION) == goal_hash:
        return False
    if is_cluster_spec_hash_equal(rayservice, cluster, partial=True):
        return False  # groups only added at the end: the cluster is updated in place instead
    return zero_downtime_upgrade_enabled(rayservice)


def should_update_cluster(
    rayservice: RayService,
    cluster: RayCluster | None,
    *,
    active: bool,
    upgrade_in_progress: bool,
    goal_hash: str | None = None,
) -> bool:
    """Whether to rewrite a cluster's spec and annotations in place from `rayClusterConfig`
    instead of preparing a new cluster (KubeRay's `shouldUpdateCluster`): the active cluster was
    stamped by another KubeRay version (its hash may differ only by that version's Go types), or
    worker groups were only added at the end of the config (`ray.io/num-worker-groups`).
    `goal_hash` is `cluster_config_hash(rayservice)` when the caller has it already."""
    if cluster is None:
        return False
    annotations = (cluster.get("metadata") or {}).get("annotations") or {}
    if active:
        if upgrade_in_progress:
            return False  # only the pending cluster follows the spec during an upgrade
        if annotations.get(names.KUBERAY_VERSION_ANNOTATION) != names.KUBERAY_VERSION:
            return True
    if goal_hash is not None:
        if annotations.get(CLUSTER_HASH_ANNOTATION) == goal_hash:
            return False
    elif is_cluster_spec_hash_equal(rayservice, cluster, partial=False):
        return False
    return is_cluster_spec_hash_equal(rayservice, cluster, partial=True)


def upgrade_in_progress(status: Object) -> bool:
    """The status says `UpgradeInProgress` (KubeRay reads it before deciding anything)."""
    return _condition_true(list(status.get("conditions") or []), UPGRADE_IN_PROGRESS)


def cluster_updated_in_place(rayservice: RayService, cluster: RayCluster) -> JSON:
    """The body that rewrites `cluster` from the RayService (KubeRay's `modifyRayCluster` over
    `constructRayClusterForRayService`): spec from `rayClusterConfig` with the cluster's own
    `suspend` kept (Kueue owns it once the cluster exists), labels and annotations as a new
    cluster would get them (hash, worker group count, our version); the rest of the metadata,
    `resourceVersion` included, as cached, so the update is a compare-and-swap."""
    goal = build_cluster_for_service(rayservice, name=cluster["metadata"]["name"])
    body: JSON = json_copy(cluster)
    body.pop("status", None)  # ignored on update (status subresource)
    body["metadata"]["labels"] = goal["metadata"]["labels"]
    body["metadata"]["annotations"] = goal["metadata"]["annotations"]
    spec = goal["spec"]
    spec.pop("suspend", None)
    suspend = cluster.get("spec", {}).get("suspend")
    if suspend is not None:
        spec["suspend"] = suspend
    body["spec"] = spec
    return body


def serving_cluster_of(service: Object | None) -> str | None:
    """The RayCluster a Service selects (`ray.io/cluster`), or None."""
    if service is None:
        return None
    return ((service.get("spec") or {}).get("selector") or {}).get("ray.io/cluster")


def count_serve_endpoints(pods: Sequence[Pod], *, cluster: str | None) -> int:
    """Ready Pods of `cluster` labelled `ray.io/serve: "true"`: what the serve Service's
    EndpointSlices would list as ready (counted from Pods: they are in our cache)."""
    if cluster is None:
        return 0
    return sum(
        1
        for pod in pods
        if (pod["metadata"].get("labels") or {}).get("ray.io/cluster") == cluster
        and (pod["metadata"].get("labels") or {}).get("ray.io/serve") == "true"
        and not pod["metadata"].get("deletionTimestamp")
        and _ready(pod)
    )


@dataclass(frozen=True, slots=True)
class Observed:
    """What one reconcile saw, for `compute_status`."""

    generation: int
    active: RayCluster | None
    pending: RayCluster | None
    active_apps: Mapping[str, ServeApplicationStatus] | None
    pending_apps: Mapping[str, ServeApplicationStatus] | None
    services_point_to: str | None
    """The cluster the head and serve Services select (None while they do not exist)."""
    serve_endpoints: int
    new_pending_name: str | None
    """A name for a new pending cluster when one is needed (else None)."""
    initializing_timeout: float | None = None
    """Seconds from `ray.io/initializing-timeout` (None: no timeout)."""


def compute_status(old: Object, observed: Observed, *, now: datetime.datetime) -> JSON:
    """The next status of a RayService."""
    new = copy.deepcopy(dict(old))
    new["observedGeneration"] = observed.generation
    active = dict(new.get("activeServiceStatus") or {})
    pending = dict(new.get("pendingServiceStatus") or {})
    _observe(active, observed.active, observed.active_apps)
    _observe(pending, observed.pending, observed.pending_apps)
    pointed = observed.services_point_to
    if pointed is not None and pending.get("rayClusterName") == pointed:
        # The Services switched to the pending cluster: it is the active one now.
        active, pending = pending, {}
    if observed.new_pending_name is not None:
        pending = {"rayClusterName": observed.new_pending_name}
    new["activeServiceStatus"] = active
    new["pendingServiceStatus"] = pending
    # KubeRay's field is `omitempty`: 0 is no field (a takeover then rewrites nothing).
    new.pop("numServeEndpoints", None)
    if observed.serve_endpoints:
        new["numServeEndpoints"] = observed.serve_endpoints
    new["conditions"] = _conditions(new, now=now, timeout=observed.initializing_timeout)
    ready = _condition_true(new["conditions"], READY)
    if ready:
        new["serviceStatus"] = RUNNING
    else:
        new.pop("serviceStatus", None)
    return new


def invalid_status(old: Object, message: str, *, generation: int, now: datetime.datetime) -> JSON:
    """Ready=False/ValidationFailed with the message."""
    new = copy.deepcopy(dict(old))
    new["observedGeneration"] = generation
    conditions = list(new.get("conditions") or [])
    new["conditions"] = set_condition(
        conditions,
        READY,
        status="False",
        reason=VALIDATION_FAILED,
        message=message,
        now=now,
        generation=generation,
    )
    return new


def status_changed(old: Object, new: Object) -> bool:
    """Whether to write: anything but timestamps."""
    return _comparable(old) != _comparable(new)


def _observe(
    entry: JSON, cluster: RayCluster | None, apps: Mapping[str, ServeApplicationStatus] | None
) -> None:
    if cluster is not None:
        entry["rayClusterStatus"] = copy.deepcopy(dict(cluster.get("status") or {}))
    else:
        entry.pop("rayClusterStatus", None)
    if apps is not None:
        entry["applicationStatuses"] = application_statuses(apps)


def _conditions(status: JSON, *, now: datetime.datetime, timeout: float | None) -> list[JSON]:
    def mark(kind: str, value: str, reason: str, message: str) -> None:
        _mark_all(status, now=now, marks=[(kind, value, reason, message)])

    if not status.get("conditions"):
        mark(READY, "False", INITIALIZING, "RayService is initializing")
        mark(UPGRADE_IN_PROGRESS, "False", INITIALIZING, "RayService is initializing")
    if int(status.get("numServeEndpoints") or 0) > 0:
        mark(READY, "True", NON_ZERO_SERVE_ENDPOINTS, "Number of serve endpoints is greater than 0")
    elif _condition_true(status["conditions"], READY):
        mark(READY, "False", ZERO_SERVE_ENDPOINTS, "Number of serve endpoints dropped to 0")
    elif (spent := initializing_for(status["conditions"], now=now)) is not None and (
        timeout is not None and spent >= timeout
    ):
        # Clearing the names makes both clusters replaced ones: they are deleted.
        for entry in ("activeServiceStatus", "pendingServiceStatus"):
            (status.get(entry) or {}).pop("rayClusterName", None)
        mark(
            READY,
            "False",
            INITIALIZING_TIMEOUT,
            f"RayService failed to become ready within the configured timeout of "
            f"{go_duration(timeout)}. Time spent initializing: {go_duration(spent)}",
        )
    active = (status.get("activeServiceStatus") or {}).get("rayClusterName")
    pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName")
    if active and pending:
        mark(
            UPGRADE_IN_PROGRESS,
            "True",
            BOTH_CLUSTERS_EXIST,
            "Both active and pending Ray clusters exist",
        )
    elif active:
        mark(
            UPGRADE_IN_PROGRESS,
            "False",
            NO_PENDING_CLUSTER,
            "Active Ray cluster exists and no pending Ray cluster",
        )
    return list(status["conditions"])


# --- initializing timeout ------------------------------------------------------------------------


def initializing_timeout(rayservice: RayService) -> float | None:
    """Seconds of `ray.io/initializing-timeout` (a Go duration or whole seconds, validated
    beforehand), or None without one (KubeRay's `getInitializingTimeout`)."""
    annotations = (rayservice.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(INITIALIZING_TIMEOUT_ANNOTATION)
    if not value:
        return None
    seconds = initializing_timeout_seconds(str(value))
    return seconds if seconds is not None and seconds > 0 else None


def initializing_for(conditions: Sequence[Object], *, now: datetime.datetime) -> float | None:
    """Seconds Ready has been False/Initializing (None when it is not)."""
    ready = _condition(conditions, READY)
    if ready is None or ready.get("status") != "False" or ready.get("reason") != INITIALIZING:
        return None
    since = parse_time(ready.get("lastTransitionTime"))
    return None if since is None else max(0.0, (now - since).total_seconds())


def initializing_timed_out(status: Object) -> bool:
    """Ready=False/InitializingTimeout: terminal, nothing but cleanup is reconciled (KubeRay's
    `isInitializingTimeout`)."""
    ready = _condition(list(status.get("conditions") or []), READY)
    return (
        ready is not None
        and ready.get("status") == "False"
        and ready.get("reason") == INITIALIZING_TIMEOUT
    )


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String` writes it ("2s", "1m30.5s", "1h0m0s", "250ms"),
    as KubeRay's messages show durations."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size or unit == "ns":
                return f"{sign}{_decimal(nanos, size)}{unit}"
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = f"{_decimal(rest, 1_000_000_000)}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _decimal(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")


MAX_TIME_LENGTH = 64
"""Longer is no RFC 3339 time: refused before it is parsed."""


def parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 time as the API writes it (naive ones read as UTC); None when absent or
    unreadable, as a user-writable field or annotation may be."""
    if not isinstance(value, str) or len(value) > MAX_TIME_LENGTH:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


# --- suspend -------------------------------------------------------------------------------------


class SuspendPhase(enum.Enum):
    """Where `spec.suspend`'s state machine stands for one reconcile (KubeRay's `handleSuspend`)."""

    NOT_SUSPENDED = "NotSuspended"
    """No suspension under way or done: reconcile as usual."""
    STAGE = "Stage"
    """`suspend` just became true: store `Suspending` first (the commit point), delete nothing."""
    DELETE = "Delete"
    """`Suspending` is stored: delete the owned objects, whatever `suspend` says now."""
    SUSPENDED = "Suspended"
    """Suspended and still asked to be: nothing to do."""
    RESUME = "Resume"
    """Suspended, `suspend` is false again: leave `Suspended` and reconcile as usual."""


def suspend_phase(status: Object, *, suspend: bool) -> SuspendPhase:
    conditions = list(status.get("conditions") or [])
    if _condition_true(conditions, SUSPENDED):
        return SuspendPhase.SUSPENDED if suspend else SuspendPhase.RESUME
    if _condition_true(conditions, SUSPENDING):
        return SuspendPhase.DELETE
    return SuspendPhase.STAGE if suspend else SuspendPhase.NOT_SUSPENDED


def suspend_owns_reconcile(status: Object) -> bool:
    """Suspending or Suspended: the rest of the reconcile would recreate what was deleted."""
    conditions = list(status.get("conditions") or [])
    return _condition_true(conditions, SUSPENDING) or _condition_true(conditions, SUSPENDED)


def suspending_status(old: Object, *, generation: int, now: datetime.datetime) -> JSON:
    """`Suspending` staged: service statuses, endpoints and `serviceStatus` cleared."""
    new = copy.deepcopy(dict(old))
    new["observedGeneration"] = generation
    _mark_all(
        new,
        now=now,
        marks=[
            (
                SUSPENDING,
                "True",
                SUSPEND_REQUESTED,
                "Spec.Suspend is true; will delete all Kubernetes resources owned by this "
                "RayService.",
            ),
            (READY, "False", SUSPEND_IN_PROGRESS, "RayService is suspending."),
            (UPGRADE_IN_PROGRESS, "False", SUSPEND_IN_PROGRESS, "No upgrade in progress."),
            (ROLLBACK_IN_PROGRESS, "False", SUSPEND_IN_PROGRESS, "No rollback in progress."),
        ],
    )
    new["activeServiceStatus"] = {}
    new["pendingServiceStatus"] = {}
    new.pop("numServeEndpoints", None)
    new.pop("serviceStatus", None)  # KubeRay's NotRunning is "", omitted
    return new


def suspension_progress_status(old: Object, *, all_deleted: bool, now: datetime.datetime) -> JSON:
    """After a round of deletions: still `Suspending`, or `Suspended` once nothing is left."""
    new = copy.deepcopy(dict(old))
    if not all_deleted:
        _mark_all(
            new,
            now=now,
            marks=[
                (
                    SUSPENDING,
                    "True",
                    SUSPEND_IN_PROGRESS,
                    "Waiting for all Kubernetes resources owned by this RayService to be deleted.",
                )
            ],
        )
        return new
    done = "All owned resources have been deleted."
    _mark_all(
        new,
        now=now,
        marks=[
            (SUSPENDING, "False", SUSPEND_COMPLETE, done),
            (SUSPENDED, "True", SUSPEND_COMPLETE, done),
            (READY, "False", SUSPEND_COMPLETE, "RayService is suspended."),
            (UPGRADE_IN_PROGRESS, "False", SUSPEND_COMPLETE, "No upgrade in progress."),
            (ROLLBACK_IN_PROGRESS, "False", SUSPEND_COMPLETE, "No rollback in progress."),
        ],
    )
    return new


def resumed_status(old: Object, *, generation: int, now: datetime.datetime) -> JSON:
    """`Suspended` False; Ready and UpgradeInProgress back to `Initializing` with a fresh
    transition time, so the initializing timeout counts from the resume."""
    new = copy.deepcopy(dict(old))
    new["observedGeneration"] = generation
    message = "RayService is initializing after resuming from suspend."
    new["conditions"] = [
        c for c in new.get("conditions") or [] if c.get("type") not in (READY, UPGRADE_IN_PROGRESS)
    ]
    _mark_all(
        new,
        now=now,
        marks=[
            (SUSPENDED, "False", RESUMED, "Spec.Suspend is false; RayService has resumed."),
            (READY, "False", INITIALIZING, message),
            (UPGRADE_IN_PROGRESS, "False", INITIALIZING, message),
        ],
    )
    return new


def _mark_all(
    status: JSON, *, now: datetime.datetime, marks: Sequence[tuple[str, str, str, str]]
) -> None:
    generation = int(status.get("observedGeneration") or 0)
    conditions = list(status.get("conditions") or [])
    for kind, value, reason, message in marks:
        conditions = set_condition(
            conditions,
            kind,
            status=value,
            reason=reason,
            message=message,
            now=now,
            generation=generation,
        )
    status["conditions"] = conditions


def _condition(conditions: Sequence[Object], kind: str) -> Object | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _condition_true(conditions: list[JSON], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _ready(pod: Pod) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def _comparable(status: Object) -> JSON:
    result = copy.deepcopy(dict(status))
    result.pop("lastUpdateTime", None)
    for key in ("activeServiceStatus", "pendingServiceStatus"):
        cluster = (result.get(key) or {}).get("rayClusterStatus")
        if isinstance(cluster, dict):
            cluster.pop("lastUpdateTime", None)
            for condition in cluster.get("conditions") or ():
                condition.pop("lastTransitionTime", None)
    return result
