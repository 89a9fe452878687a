"""Why a cluster's Pods wait: the scheduler's and the kubelet's own words, aggregated and bounded.

KubeRay's most repeated complaint is a RayJob "stuck in Initializing" with nothing saying why
(a nodeSelector no node matches, an image that cannot be pulled, a container that crash-loops):
the reason is on the Pod, never on the RayCluster. Here the observed Pods become one `Waiting`
(a condition reason such as `Unschedulable` or `ImagePullFailed,CrashLoop`, and one message naming
the Pods) that the RayCluster, and the RayJob and RayService above it, carry as the `PodsWaiting`
condition (an addition of ours: KubeRay has no such condition) while some Pod waits; it is
removed once none does.

Pod statuses are written by the scheduler and the kubelet but their messages can be long and
there can be thousands of Pods: the message lists at most `PODS_PER_MESSAGE` Pods per distinct
text, `MESSAGES_PER_REASON` texts per reason, each text cut to `TEXT_LENGTH`, the whole to
`MESSAGE_LENGTH` (what an Event holds).

`news(old_conditions, new_conditions)` says when a controller should tell it in an Event: when the
set of reasons changes (not on every reconcile, nor whenever a Pod name in the message changes).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from ray_operator.spec import pods as observed
from ray_operator.status.conditions import set_condition

if TYPE_CHECKING:
    from ray_io.v1_views import ContainerStatus, Pod

PODS_WAITING: Final = "PodsWaiting"
"""The condition type, on RayCluster, RayJob and RayService."""
UNSCHEDULABLE: Final = "Unschedulable"
IMAGE_PULL_FAILED: Final = "ImagePullFailed"
CONTAINER_CONFIG_FAILED: Final = "ContainerConfigFailed"
CRASH_LOOP: Final = "CrashLoop"
REASONS: Final = (UNSCHEDULABLE, IMAGE_PULL_FAILED, CONTAINER_CONFIG_FAILED, CRASH_LOOP)
"""The reasons, in the order a message tells them (the first blocks the others)."""

EVENT_REASON: Final = PODS_WAITING
RECOVERED_EVENT_REASON: Final = "PodsNoLongerWaiting"

# The kubelet's waiting reasons (kubelet/images and kuberuntime) for an image it cannot use.
IMAGE_PULL_WAITING_REASONS: Final = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
    }
)
# The kubelet's waiting reasons for a container it cannot create from the Pod's spec: most often a
# ConfigMap or Secret (or a key of one) that an env var or volume names and that does not exist.
CONTAINER_CONFIG_WAITING_REASONS: Final = frozenset(
    {"CreateContainerConfigError", "CreateContainerError"}
)
CRASH_LOOP_WAITING_REASONS: Final = frozenset({"CrashLoopBackOff"})

PODS_PER_MESSAGE: Final = 3
MESSAGES_PER_REASON: Final = 3
TEXT_LENGTH: Final = 256
MESSAGE_LENGTH: Final = 1024

_HEADLINES: Final = {
    UNSCHEDULABLE: ("Pod cannot be scheduled", "Pods cannot be scheduled"),
    IMAGE_PULL_FAILED: ("Pod cannot pull its image", "Pods cannot pull their image"),
    CONTAINER_CONFIG_FAILED: (
        "Pod cannot create its container",
        "Pods cannot create their containers",
    ),
    CRASH_LOOP: ("Pod is crash-looping", "Pods are crash-looping"),
}


@dataclasses.dataclass(frozen=True)
class WaitingPod:
    """One Pod that waits, why (one of REASONS), and the scheduler's or kubelet's text."""

    name: str
    reason: str
    text: str


@dataclasses.dataclass(frozen=True)
class Waiting:
    """What the PodsWaiting condition says: `reason` (REASONS joined by commas) and `message`."""

    reason: str
    message: str


def waiting_pod(pod: Pod) -> WaitingPod | None:
    """Why `pod` waits (the first reason in REASONS order), or None when it does not."""
    if observed.is_terminating(pod):
        return None
    name = observed.pod_name(pod)
    for condition in pod.get("status", {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return WaitingPod(name, UNSCHEDULABLE, str(condition.get("message") or ""))
    statuses = _container_statuses(pod)
    for reason, kubelet_reasons in (
        (IMAGE_PULL_FAILED, IMAGE_PULL_WAITING_REASONS),
        (CONTAINER_CONFIG_FAILED, CONTAINER_CONFIG_WAITING_REASONS),
        (CRASH_LOOP, CRASH_LOOP_WAITING_REASONS),
    ):
        for status in statuses:
            state = (status.get("state") or {}).get("waiting") or {}
            if state.get("reason") in kubelet_reasons:
                text = (
                    f"{status.get('name', '')}: {state.get('reason')}: {state.get('message', '')}"
                )
                return WaitingPod(name, reason, text)
    return None


def _container_statuses(pod: Pod) -> list[ContainerStatus]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def pods_waiting(pods: Iterable[Pod]) -> Waiting | None:
    """The aggregated PodsWaiting reason and message of `pods`, or None when none waits."""
    found = [waiting for pod in pods if (waiting := waiting_pod(pod)) is not None]
    if not found:
        return None
    by_reason = {reason: [w for w in found if w.reason == reason] for reason in REASONS}
    present = [reason for reason in REASONS if by_reason[reason]]
    message = "; ".join(_tell(reason, by_reason[reason]) for reason in present)
    return Waiting(",".join(present), bounded(message, MESSAGE_LENGTH))


def _tell(reason: str, waiting: Sequence[WaitingPod]) -> str:
    """`2 Pods cannot be scheduled: a, b: <text>; c: <text>` (Pods with the same text together)."""
    singular, plural = _HEADLINES[reason]
    headline = f"{len(waiting)} {singular if len(waiting) == 1 else plural}"
    by_text: dict[str, list[str]] = {}
    for pod in sorted(waiting, key=lambda w: w.name):
        by_text.setdefault(bounded(pod.text, TEXT_LENGTH), []).append(pod.name)
    parts = [
        f"{_names(pod_names)}: {text}" if text else _names(pod_names)
        for text, pod_names in list(by_text.items())[:MESSAGES_PER_REASON]
    ]
    untold = sum(len(pod_names) for pod_names in list(by_text.values())[MESSAGES_PER_REASON:])
    if untold:
        parts.append(f"{untold} more with other messages")
    return f"{headline}: {'; '.join(parts)}"


def _names(pod_names: Sequence[str]) -> str:
    shown = ", ".join(bounded(name, 80) for name in pod_names[:PODS_PER_MESSAGE])
    more = len(pod_names) - PODS_PER_MESSAGE
    return f"{shown} and {more} more" if more > 0 else shown


def bounded(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters (an ellipsis says it was cut)."""
    text = " ".join(text[: limit * 2].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def condition_of(conditions: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The PodsWaiting condition among `conditions`, if any."""
    return next((c for c in conditions if c.get("type") == PODS_WAITING), None)


@dataclasses.dataclass(frozen=True)
class News:
    """An Event to record about a change of the PodsWaiting condition."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def news(
    old_conditions: Iterable[Mapping[str, Any]], new_conditions: Iterable[Mapping[str, Any]]
) -> News | None:
    """The Event this status change deserves: a Warning with the condition's message when its
    set of reasons appeared or changed, a Normal RECOVERED_EVENT_REASON when it went, else None."""
    old = condition_of(old_conditions)
    new = condition_of(new_conditions)
    if new is not None and (old is None or old.get("reason") != new.get("reason")):
        return News("Warning", EVENT_REASON, str(new.get("message") or new.get("reason") or ""))
    if new is None and old is not None:
        was = old.get("reason") or "waiting"
        return News("Normal", RECOVERED_EVENT_REASON, f"No Pod waits any more (was: {was})")
    return None


def with_clusters_waiting(
    status: Mapping[str, Any],
    clusters: Iterable[Mapping[str, Any] | None],
    *,
    now: datetime.datetime,
    generation: int,
    mirror_message: bool = False,
) -> dict[str, Any]:
    """The status of a RayJob or RayService with the PodsWaiting condition of its `clusters`
    (None: no cluster), each message prefixed with its RayCluster's name; removed when none
    waits. `mirror_message`: also in `message` (a RayJob in Initializing, where KubeRay leaves
    it empty), and a message put there by it goes once no Pod waits."""
    new = dict(status)
    conditions = list(status.get("conditions") or [])
    old = condition_of(conditions)
    told = [
        (str(cluster["metadata"].get("name", "")), found)
        for cluster in clusters
        if cluster is not None
        and (found := condition_of((cluster.get("status") or {}).get("conditions") or ()))
    ]
    if not told:
        if old is not None:
            kept = [c for c in conditions if c.get("type") != PODS_WAITING]
            new["conditions"] = kept
            if not kept:
                del new["conditions"]
            if new.get("message") == old.get("message"):
                new.pop("message", None)
        return new
    reasons = {reason for _, found in told for reason in str(found.get("reason", "")).split(",")}
    message = bounded(
        "; ".join(f"RayCluster {name}: {found.get('message', '')}" for name, found in told),
        MESSAGE_LENGTH,
    )
    new["conditions"] = set_condition(
        conditions,
        PODS_WAITING,
        status="True",
        reason=",".join(reason for reason in REASONS if reason in reasons) or UNSCHEDULABLE,
        message=message,
        now=now,
        generation=generation,
    )
    if mirror_message:
        new["message"] = message
    return new
