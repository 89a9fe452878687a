"""Readings of observed Pods (plain dicts from the cache): readiness, health, membership.

Shared by the status computation and the scaling decision, so both judge a Pod the same way.
The rules are KubeRay's: a worker is *ready* when Running with condition Ready=True and *available*
when Running; a Pod must be replaced when it reached a terminal phase, or when its Ray container
terminated and the restart policy is Never (`raycluster_controller.go: shouldDeletePod`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ray_operator.spec import kuberay_names as names

if TYPE_CHECKING:
    # Cached Pods are projections (`runtime/projection.POD_FIELDS`): the same paths, fewer of them.
    from ray_io.v1_views import ContainerStateTerminated, Pod, PodCondition


def pod_name(pod: Pod) -> str:
    return str(pod.get("metadata", {}).get("name", ""))


def pod_labels(pod: Pod) -> Mapping[str, str]:
    return pod.get("metadata", {}).get("labels") or {}


def pod_phase(pod: Pod) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def is_terminating(pod: Pod) -> bool:
    """Deletion was requested; the Pod counts neither as present nor as a deletion candidate."""
    return pod.get("metadata", {}).get("deletionTimestamp") is not None


def is_head(pod: Pod) -> bool:
    return pod_labels(pod).get(names.NODE_TYPE_LABEL) == names.HEAD_NODE


def is_worker(pod: Pod) -> bool:
    return pod_labels(pod).get(names.NODE_TYPE_LABEL) == names.WORKER_NODE


def in_group(pod: Pod, group_name: str) -> bool:
    return is_worker(pod) and pod_labels(pod).get(names.GROUP_LABEL) == group_name


def ready_condition(pod: Pod) -> PodCondition | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return None


def is_running_and_ready(pod: Pod) -> bool:
    condition = ready_condition(pod)
    return (
        pod_phase(pod) == "Running" and condition is not None and condition.get("status") == "True"
    )


def all_running(pods: Iterable[Pod]) -> bool:
    """KubeRay's `CheckAllPodsRunning`: some Pods, all Running, none with Ready=False."""
    pods = list(pods)
    if not pods:
        return False
    for pod in pods:
        condition = ready_condition(pod)
        if pod_phase(pod) != "Running" or (
            condition is not None and condition.get("status") != "True"
        ):
            return False
    return True


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a Pod must be deleted (and replaced), and why, in words for an Event."""

    delete: bool
    reason: str


def replacement_verdict(pod: Pod) -> Verdict:
    """KubeRay's `shouldDeletePod`: terminal Pods, and dead Ray containers that will not restart."""
    kind = "head" if is_head(pod) else "worker"
    phase = pod_phase(pod)
    if phase in ("Failed", "Succeeded"):
        return Verdict(
            True, f"The {kind} Pod {pod_name(pod)} status is {phase} which is a terminal state."
        )
    terminated = ray_container_terminated(pod)
    if phase == "Running" and terminated is not None:
        policy = pod.get("spec", {}).get("restartPolicy", "Always")
        if policy == "Never":
            return Verdict(
                True,
                f"The Ray container of the {kind} Pod {pod_name(pod)} terminated "
                f"({terminated.get('reason', 'unknown reason')}) and restartPolicy Never keeps it "
                "from restarting.",
            )
    return Verdict(
        False,
        f"The {kind} Pod {pod_name(pod)} is healthy enough to keep (phase {phase or 'unknown'}).",
    )


def ray_container_terminated(pod: Pod) -> ContainerStateTerminated | None:
    """The Ray container's `terminated` state, matched by name (status order is not spec order)."""
    containers = pod.get("spec", {}).get("containers") or []
    if not containers:
        return None
    ray_name = containers[0].get("name")
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == ray_name:
            return status.get("state", {}).get("terminated")
    return None
