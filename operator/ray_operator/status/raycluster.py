"""RayCluster status: computed from the spec, the previous status and the observed Pods/Services.

Pure counterpart of KubeRay's `calculateStatus` and `InconsistentRayClusterStatus`. The same fields,
condition types and reason strings, so `kubectl wait --for=condition=RayClusterProvisioned` and
dashboards keep working. Deliberate differences, each for robustness:
- RayClusterProvisioned also needs the head and every desired worker to exist;
- a missing head Service leaves `head.serviceIP/serviceName` empty (KubeRay fails the whole update);
- removing `spec.suspend` resumes a suspended cluster as `suspend: false` does;
- an invalid spec is reported as condition `InvalidSpec` (KubeRay only emits an Event);
- Suspending/Suspended conditions carry a message (KubeRay leaves it empty);
- condition `PodsWaiting` says why Pods wait (unschedulable, image, crash loop: `waiting.py`);
- `status_changed` also reports a new `observedGeneration` or desired resources.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.ray_start import is_gpu_resource
from ray_operator.spec import kuberay_names as names
from ray_operator.spec import pods as observed
from ray_operator.spec.object_names import identifier
from ray_operator.spec.quantity import ZERO, Quantity, sum_quantities
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    head_group,
    is_suspended,
    json_copy,
    pod_spec,
    pod_spec_resources,
    read_cluster_manifest,
    spec,
    worker_groups,
)
from ray_operator.spec.replicas import (
    clamp_int32,
    desired_group_pods,
    hosts_per_replica,
    is_group_suspended,
    max_group_pods,
    min_group_pods,
)
from ray_operator.status import waiting

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster

    from ray_operator.spec.raycluster import GroupSpec


# Condition types (KubeRay's RayClusterConditionType values) and reasons.
HEAD_POD_READY: Final = "HeadPodReady"
PROVISIONED: Final = "RayClusterProvisioned"
REPLICA_FAILURE: Final = "ReplicaFailure"
SUSPENDING: Final = "RayClusterSuspending"
SUSPENDED: Final = "RayClusterSuspended"
INVALID_SPEC: Final = "InvalidSpec"  # ours
REASON_ALL_PODS_READY_FIRST_TIME: Final = "AllPodRunningAndReadyFirstTime"
REASON_PODS_PROVISIONING: Final = "RayClusterPodsProvisioning"
REASON_HEAD_POD_NOT_FOUND: Final = "HeadPodNotFound"
REASON_HEAD_POD_RUNNING_AND_READY: Final = "HeadPodRunningAndReady"
REASON_UNKNOWN: Final = "Unknown"
REASON_VALIDATION_FAILED: Final = "ValidationFailed"
# ReplicaFailure reasons, named after the step that failed (KubeRay's errRayClusterReplicaFailure).
FAILED_CREATE_HEAD_POD: Final = "FailedCreateHeadPod"
FAILED_DELETE_HEAD_POD: Final = "FailedDeleteHeadPod"
FAILED_CREATE_WORKER_POD: Final = "FailedCreateWorkerPod"
FAILED_DELETE_WORKER_POD: Final = "FailedDeleteWorkerPod"
FAILED_DELETE_ALL_PODS: Final = "FailedDeleteAllPods"
STATE_READY: Final = "ready"
STATE_SUSPENDED: Final = "suspended"
STATE_FAILED: Final = "failed"


@dataclasses.dataclass(frozen=True)
class ReplicaFailure:
    """A create/delete that failed in this reconcile: a FAILED_* reason, the API's words.

    `blocks_ready`: the cluster cannot work until a person acts (a Service name taken by an
    object it does not own): it is not `ready`, even if it was before.
    """

    reason: str
    message: str
    blocks_ready: bool = False


def name_conflict_reason(kind: str) -> str:
    """The ReplicaFailure reason when a `kind` we must create has its name taken by an object
    this cluster does not own, e.g. `FailedCreateService` (KubeRay's FailedCreate* pattern)."""
    return f"FailedCreate{kind}"


def compute_status(
    cluster: ClusterLike,
    *,
    pods: Sequence[Pod],
    services: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
    failure: ReplicaFailure | None = None,
    invalid_spec: str | None = None,
) -> JSON:
    """The new `status` of `cluster` (its current status is read from it); `pods`: all its Pods."""
    # Read, never copied whole: the new status is built from a copy of the old one and from
    # values computed here, so nothing of `cluster` is written to or returned.
    manifest = read_cluster_manifest(cluster)
    old: JSON = dict(manifest.get("status", {}))
    new: JSON = json_copy(old)
    stamp = _timestamp(now)
    new["observedGeneration"] = manifest.get("metadata", {}).get("generation", 0)
    new.update(_replica_counts(manifest, pods))
    new.update(_desired_resources(manifest))
    conditions = _Conditions(new.get("conditions") or [], stamp)
    _failure_conditions(conditions, failure=failure, invalid_spec=invalid_spec)
    _head_pod_condition(conditions, _head_pod(pods))
    _provisioned_condition(conditions, manifest, pods)
    _suspension_conditions(conditions, manifest, any_pods=bool(pods))
    _waiting_condition(conditions, pods)
    new["conditions"] = conditions.items
    _update_state(new, manifest, pods=pods, failed=failure is not None or invalid_spec is not None)
    if failure is not None and failure.blocks_ready and new.get("state") == STATE_READY:
        # "ready" would tell scripts the cluster works; it cannot (finding 4 of issue 12).
        del new["state"]
    new["endpoints"] = _endpoints(old.get("endpoints") or {}, _head_service(manifest, services))
    new["head"] = _head_info(_head_pod(pods), _head_service(manifest, services))
    new["lastUpdateTime"] = stamp
    if old.get("state") != new.get("state") and new.get("state"):
        new.setdefault("stateTransitionTimes", {})[new["state"]] = stamp
    return {key: value for key, value in new.items() if value not in (None, {}, [])}


def status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing `new` over `old` changes anything but the timestamp of the computation."""
    return _without_timestamp(old) != _without_timestamp(new)


def _without_timestamp(status: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: value
        for key, value in status.items()
        if key != "lastUpdateTime" and value not in (None, {}, [])
    }


def _timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Conditions:
    """`metav1.Condition`s with apimachinery's SetStatusCondition semantics."""

    def __init__(self, items: list[JSON], stamp: str) -> None:
        self.items = [dict(item) for item in items]
        self._stamp = stamp

    def get(self, kind: str) -> JSON | None:
        return next((item for item in self.items if item.get("type") == kind), None)

    def is_true(self, kind: str) -> bool:
        found = self.get(kind)
        return found is not None and found.get("status") == "True"

    def set(self, kind: str, *, status: bool, reason: str, message: str = "") -> None:
        text = "True" if status else "False"
        found = self.get(kind)
        if found is None:
            found = {"type": kind, "lastTransitionTime": self._stamp}
            self.items.append(found)
        elif found.get("status") != text:
            # The transition time moves only when the status flips, never for a new message.
            found["lastTransitionTime"] = self._stamp
        found.update(status=text, reason=reason, message=message)

    def remove(self, kind: str) -> None:
        self.items = [item for item in self.items if item.get("type") != kind]


def _replica_counts(cluster: RayCluster, pods: Sequence[Pod]) -> JSON:
    groups = worker_groups(cluster)
    workers = [pod for pod in pods if observed.is_worker(pod)]
    counts = {
        "readyWorkerReplicas": sum(1 for pod in workers if observed.is_running_and_ready(pod)),
        "availableWorkerReplicas": sum(
            1 for pod in workers if observed.pod_phase(pod) == "Running"
        ),
        "desiredWorkerReplicas": clamp_int32(sum(desired_group_pods(group) for group in groups)),
        "minWorkerReplicas": clamp_int32(sum(min_group_pods(group) for group in groups)),
        "maxWorkerReplicas": clamp_int32(sum(max_group_pods(group) for group in groups)),
    }
    # KubeRay's fields are `omitempty`: a 0 is no field (None: dropped from the status), so a
    # status KubeRay wrote compares equal (taking over a cluster without workers writes nothing).
    return {name: count or None for name, count in counts.items()}


def _desired_resources(cluster: RayCluster) -> JSON:
    """The head's resources plus `replicas` x `numOfHosts` of each group's (raw `replicas`, as
    KubeRay: the clamped value would hide a spec that asks for more than the bounds allow)."""
    totals = _pod_resources(head_group(cluster))
    for group in worker_groups(cluster):
        if is_group_suspended(group):
            continue
        count = int(group.get("replicas") or 0) * hosts_per_replica(group)
        for name, quantity in _pod_resources(group).items():
            totals[name] = totals.get(name, ZERO) + quantity.times(count)
    gpus = sum_quantities(
        [
            quantity
            for name, quantity in totals.items()
            if is_gpu_resource(name) and not quantity.is_zero()
        ]
    )
    return {
        "desiredCPU": str(totals.get("cpu", ZERO)),
        "desiredMemory": str(totals.get("memory", ZERO)),
        "desiredGPU": str(gpus),
        "desiredTPU": str(totals.get("google.com/tpu", ZERO)),
    }


def _pod_resources(group: GroupSpec) -> dict[str, Quantity]:
    return pod_spec_resources(pod_spec(group))


def _failure_conditions(
    conditions: _Conditions, *, failure: ReplicaFailure | None, invalid_spec: str | None
) -> None:
    if failure is None:
        conditions.remove(REPLICA_FAILURE)
    else:
        conditions.set(REPLICA_FAILURE, status=True, reason=failure.reason, message=failure.message)
    if invalid_spec is None:
        conditions.remove(INVALID_SPEC)
    else:
        conditions.set(
            INVALID_SPEC, status=True, reason=REASON_VALIDATION_FAILED, message=invalid_spec
        )


def _head_pod(pods: Sequence[Pod]) -> Pod | None:
    heads = [pod for pod in pods if observed.is_head(pod)]
    return heads[0] if heads else None


def _head_pod_condition(conditions: _Conditions, head: Pod | None) -> None:
    if head is None:
        conditions.set(
            HEAD_POD_READY,
            status=False,
            reason=REASON_HEAD_POD_NOT_FOUND,
            message="Head Pod not found",
        )
        return
    ready = observed.ready_condition(head)
    if ready is None:
        conditions.set(HEAD_POD_READY, status=False, reason=REASON_UNKNOWN)
        return
    is_ready = ready.get("status") == "True"
    reason = str(
        ready.get("reason") or (REASON_HEAD_POD_RUNNING_AND_READY if is_ready else REASON_UNKNOWN)
    )
    message = str(ready.get("message") or "")
    if reason == "ContainersNotReady":
        # Say which container is waiting or dead, and why: "ContainersNotReady" alone helps no one.
        reason, message = _first_unready_container(head, default=(reason, message))
    conditions.set(HEAD_POD_READY, status=is_ready, reason=reason, message=message)


def _first_unready_container(pod: Pod, *, default: tuple[str, str]) -> tuple[str, str]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        detail = state.get("waiting") or state.get("terminated")
        if detail is not None:
            prefix = f"{default[1]}; " if default[1] else ""
            return str(
                detail.get("reason", "")
            ), f"{prefix}{status.get('name')}: {detail.get('message', '')}"
    return default


def _provisioned_condition(
    conditions: _Conditions, cluster: RayCluster, pods: Sequence[Pod]
) -> None:
    """RayClusterProvisioned: the first time every Pod was ready. Only a suspension withdraws it."""
    if conditions.is_true(PROVISIONED) or conditions.is_true(SUSPENDED):
        return
    if _all_desired_pods_running(cluster, pods):
        message = "All Ray Pods are ready for the first time"
        conditions.set(
            PROVISIONED, status=True, reason=REASON_ALL_PODS_READY_FIRST_TIME, message=message
        )
    else:
        message = "RayCluster Pods are being provisioned for first time"
        conditions.set(PROVISIONED, status=False, reason=REASON_PODS_PROVISIONING, message=message)


def _suspension_conditions(conditions: _Conditions, cluster: RayCluster, *, any_pods: bool) -> None:
    """Suspending (Pods being deleted) → Suspended (none left) → resumed; never both True."""
    wants_suspend = is_suspended(spec(cluster))
    if conditions.is_true(SUSPENDING):
        if not any_pods:
            message = "RayCluster has been suspended"
            conditions.set(
                PROVISIONED, status=False, reason=REASON_PODS_PROVISIONING, message=message
            )
            conditions.set(SUSPENDING, status=False, reason=SUSPENDING)
            message = "All Pods are deleted; the RayCluster is suspended"
            conditions.set(SUSPENDED, status=True, reason=SUSPENDED, message=message)
    elif conditions.is_true(SUSPENDED):
        if not wants_suspend:
            conditions.set(SUSPENDED, status=False, reason=SUSPENDED)
    else:
        conditions.set(SUSPENDED, status=False, reason=SUSPENDED)
        message = "spec.suspend is true: deleting all Pods" if wants_suspend else ""
        conditions.set(SUSPENDING, status=wants_suspend, reason=SUSPENDING, message=message)


def _waiting_condition(conditions: _Conditions, pods: Sequence[Pod]) -> None:
    """PodsWaiting (ours): True with the scheduler's or kubelet's words while a Pod waits; gone
    once none does, so a cluster KubeRay wrote the status of compares equal."""
    found = waiting.pods_waiting(pods)
    if found is None:
        conditions.remove(waiting.PODS_WAITING)
    else:
        conditions.set(
            waiting.PODS_WAITING, status=True, reason=found.reason, message=found.message
        )


def _all_desired_pods_running(cluster: RayCluster, pods: Sequence[Pod]) -> bool:
    """Every Pod runs, and they include the head and every desired worker.

    KubeRay checks only the Pods it happens to see, so a head that is Running before the
    workers appear in its cache can mark the cluster provisioned too early.
    """
    workers = sum(1 for pod in pods if observed.is_worker(pod))
    desired = sum(desired_group_pods(group) for group in worker_groups(cluster))
    has_head = any(observed.is_head(pod) for pod in pods)
    return has_head and workers >= desired and observed.all_running(pods)


def _update_state(new: JSON, cluster: RayCluster, *, pods: Sequence[Pod], failed: bool) -> None:
    # KubeRay only ever sets "ready" (and "suspended"); a state once reached stays until replaced.
    desired = int(new.get("desiredWorkerReplicas") or 0)
    if not failed and len(pods) == desired + 1 and observed.all_running(pods):
        new["state"] = STATE_READY
        new.pop("reason", None)
    if is_suspended(spec(cluster)) and not pods:
        new["state"] = STATE_SUSPENDED


def _head_service(
    cluster: RayCluster, services: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The head Service, found by KubeRay's labels (a custom `headService` may rename it)."""
    wanted = {
        names.CLUSTER_LABEL: (cluster.get("metadata") or {}).get("name"),
        names.NODE_TYPE_LABEL: names.HEAD_NODE,
        names.IDENTIFIER_LABEL: identifier(cluster, names.HEAD_NODE),
    }
    for service in services:
        service_labels = (service.get("metadata") or {}).get("labels") or {}
        if all(service_labels.get(key) == value for key, value in wanted.items()):
            return service
    return None


def _endpoints(previous: Mapping[str, str], service: Mapping[str, Any] | None) -> dict[str, str]:
    """Port name → the port to reach it on: the nodePort when there is one, else the target port."""
    endpoints = dict(previous)
    for port in ((service or {}).get("spec") or {}).get("ports") or []:
        if not port.get("name"):
            continue
        if port.get("nodePort"):
            endpoints[port["name"]] = str(port["nodePort"])
        elif port.get("targetPort") not in (None, 0, ""):
            endpoints[port["name"]] = str(port["targetPort"])
        elif port.get("port"):
            # Not yet defaulted by the API server (targetPort defaults to port).
            endpoints[port["name"]] = str(port["port"])
    return endpoints


def _head_info(head: Pod | None, service: Mapping[str, Any] | None) -> JSON:
    pod_ip = str(head.get("status", {}).get("podIP") or "") if head else ""
    info = {"podIP": pod_ip, "podName": observed.pod_name(head) if head else ""}
    if service is not None:
        cluster_ip = (service.get("spec") or {}).get("clusterIP") or ""
        # A headless head Service has no IP of its own; the head Pod's IP is what clients reach.
        info["serviceIP"] = pod_ip if cluster_ip == "None" else str(cluster_ip)
        info["serviceName"] = str((service.get("metadata") or {}).get("name", ""))
    return {key: value for key, value in info.items() if value}
