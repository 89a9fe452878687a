"""A RayService's decisions and status, as pure functions (KubeRay's `rayservice_controller.go`).

- `needs_serve_update`: PUT `serveConfigV2` to a cluster when we never did, when its hash
  changed, or when the cluster lost its applications (a head restart without GCS FT).
- `needs_new_cluster`: the serving (or pending) cluster was built from a different
  `rayClusterConfig` → prepare a pending cluster (zero-downtime upgrade), unless the
  upgrade strategy is `None`.
- `compute_status`: active/pending service statuses, promotion of the pending cluster once the
  Services point at it, `numServeEndpoints`, conditions `Ready` and `UpgradeInProgress`, and the
  deprecated `serviceStatus` (same meaning as Ready).
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_operator.dashboard.models import ServeApplicationStatus

JSON = dict[str, Any]
Object = Mapping[str, Any]

READY = "Ready"
UPGRADE_IN_PROGRESS = "UpgradeInProgress"
# Condition reasons (KubeRay's RayServiceConditionReason).
INITIALIZING = "Initializing"
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


def zero_downtime_upgrade_enabled(rayservice: Object) -> bool:
    """`upgradeStrategy.type` NewCluster (the default); `None` turns upgrades off."""
    strategy = ((rayservice.get("spec") or {}).get("upgradeStrategy") or {}).get("type")
    return strategy in (None, "", "NewCluster")


def needs_new_cluster(
    rayservice: Object,
    *,
    goal_hash: str,
    active: Object | None,
    pending: Object | None,
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
    return zero_downtime_upgrade_enabled(rayservice)


def serving_cluster_of(service: Object | None) -> str | None:
    """The RayCluster a Service selects (`ray.io/cluster`), or None."""
    if service is None:
        return None
    return ((service.get("spec") or {}).get("selector") or {}).get("ray.io/cluster")


def count_serve_endpoints(pods: Sequence[Object], *, cluster: str | None) -> int:
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
    active: Object | None
    pending: Object | None
    active_apps: Mapping[str, ServeApplicationStatus] | None
    pending_apps: Mapping[str, ServeApplicationStatus] | None
    services_point_to: str | None
    """The cluster the head and serve Services select (None while they do not exist)."""
    serve_endpoints: int
    new_pending_name: str | None
    """A name for a new pending cluster when one is needed (else None)."""


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
    new["numServeEndpoints"] = observed.serve_endpoints
    new["conditions"] = _conditions(new, now=now)
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


def set_condition(
    conditions: list[JSON],
    kind: str,
    *,
    status: str,
    reason: str,
    message: str,
    now: datetime.datetime,
    generation: int,
) -> list[JSON]:
    """`conditions` with `kind` set; `lastTransitionTime` moves only when `status` changes
    (apimachinery's `SetStatusCondition`)."""
    result = [dict(c) for c in conditions if c.get("type") != kind]
    previous = next((c for c in conditions if c.get("type") == kind), None)
    moment = (
        previous.get("lastTransitionTime")
        if previous and previous.get("status") == status
        else None
    ) or now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": moment,
            "observedGeneration": generation,
        }
    )
    return sorted(result, key=lambda c: str(c["type"]))


def _observe(
    entry: JSON, cluster: Object | None, apps: Mapping[str, ServeApplicationStatus] | None
) -> None:
    if cluster is not None:
        entry["rayClusterStatus"] = copy.deepcopy(dict(cluster.get("status") or {}))
    else:
        entry.pop("rayClusterStatus", None)
    if apps is not None:
        entry["applicationStatuses"] = application_statuses(apps)


def _conditions(status: JSON, *, now: datetime.datetime) -> list[JSON]:
    generation = int(status.get("observedGeneration") or 0)
    conditions = list(status.get("conditions") or [])

    def mark(kind: str, value: str, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = set_condition(
            conditions,
            kind,
            status=value,
            reason=reason,
            message=message,
            now=now,
            generation=generation,
        )

    if not conditions:
        mark(READY, "False", INITIALIZING, "RayService is initializing")
        mark(UPGRADE_IN_PROGRESS, "False", INITIALIZING, "RayService is initializing")
    if int(status.get("numServeEndpoints") or 0) > 0:
        mark(READY, "True", NON_ZERO_SERVE_ENDPOINTS, "Number of serve endpoints is greater than 0")
    elif _condition_true(conditions, READY):
        mark(READY, "False", ZERO_SERVE_ENDPOINTS, "Number of serve endpoints dropped to 0")
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
    return conditions


def _condition_true(conditions: list[JSON], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _ready(pod: Object) -> bool:
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
