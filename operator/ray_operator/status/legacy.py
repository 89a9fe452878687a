"""A legacy `cluster.ray.io/v1` RayCluster's status, computed purely from what its conversion
and the ray.io/v1 RayCluster serving it say.

The legacy operator's own fields come first, since scripts read them:
- `phase`: `Running` once the RayCluster is ready, `Error` when the spec cannot be converted (or
  the API refuses the result, or a RayCluster not ours has the name) or the RayCluster reports a
  failure, `Pending` otherwise (being created, or taking up a new spec);
- `autoscalerRetries`: kept as found (the legacy operator counted its autoscaler restarts; the
  autoscaler now runs in the head Pod, where Kubernetes restarts it).

Beside them: `rayClusterName`, `observedGeneration`, and two conditions, so that
`kubectl wait --for=condition=Ready rayclusters.cluster.ray.io/<name>` works:
- `Converted`: True once the spec converts into a RayCluster the API accepted; False with
  `InvalidSpec` (the conversion's problems, each with its field path), `RayClusterRefused` (the
  API server refused what the conversion built) or `RayClusterExists` (a RayCluster of that name
  exists and is not ours);
- `Ready`: the RayCluster's readiness, mirrored.

`status_changed` ignores only `lastTransitionTime`, as for RayServeGraphs: a reconcile that finds
nothing new writes nothing. Pure: no I/O.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ray_operator.status.raycluster import (
    HEAD_POD_READY,
    INVALID_SPEC,
    REPLICA_FAILURE,
    STATE_READY,
)
from ray_operator.status.rayservegraph import (
    ConditionState,
    condition,
    status_changed,
    with_condition,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

JSON = dict[str, Any]

CONVERTED: Final = "Converted"
READY: Final = "Ready"

RUNNING: Final = "Running"
PENDING: Final = "Pending"
ERROR: Final = "Error"

# Reasons of `Converted` (InvalidSpec is the RayCluster status's own reason string).
CONVERTED_REASON: Final = "Converted"
RAY_CLUSTER_REFUSED: Final = "RayClusterRefused"
RAY_CLUSTER_EXISTS: Final = "RayClusterExists"
# Reasons of `Ready`.
RAY_CLUSTER_READY: Final = "RayClusterReady"
RAY_CLUSTER_NOT_READY: Final = "RayClusterNotReady"
RAY_CLUSTER_UPDATING: Final = "RayClusterUpdating"
RAY_CLUSTER_FAILED: Final = "RayClusterFailed"
NO_RAY_CLUSTER: Final = "NoRayCluster"


@dataclass(frozen=True, slots=True)
class Observed:
    """What one reconcile of a legacy cluster found."""

    generation: int
    """The legacy object's `metadata.generation`."""
    cluster_name: str
    """The name of the RayCluster that serves it (its own)."""
    converted: ConditionState
    """Whether its spec converted into a RayCluster the API accepted (`converted_condition`)."""
    cluster: RayCluster | None = None
    """That RayCluster as last seen (None: it does not exist, or is not ours)."""


def converted_condition(
    problem: str | None = None, *, reason: str = INVALID_SPEC
) -> ConditionState:
    """`Converted`: True without a problem, else False with `reason` and the problem."""
    if problem is None:
        return ConditionState("True", CONVERTED_REASON, "the spec converts into a RayCluster")
    return ConditionState("False", reason, problem)


def ready_condition(cluster: RayCluster | None, *, name: str) -> ConditionState:
    """`Ready`, mirrored from the RayCluster: True when its state is `ready`, its head Pod is
    ready and it has taken up its current spec."""
    if cluster is None:
        return ConditionState("False", NO_RAY_CLUSTER, f"the RayCluster {name} does not exist")
    status = cluster.get("status", {})
    failure = condition(status, REPLICA_FAILURE) or condition(status, INVALID_SPEC)
    if failure is not None and failure.get("status") == "True":
        return ConditionState(
            "False", RAY_CLUSTER_FAILED, f"RayCluster {name}: {failure.get('message', '')}"
        )
    generation = int(cluster["metadata"].get("generation") or 0)
    if int(status.get("observedGeneration") or 0) < generation:
        return ConditionState(
            "False", RAY_CLUSTER_UPDATING, f"RayCluster {name} has not taken up its new spec yet"
        )
    head = condition(status, HEAD_POD_READY)
    if status.get("state") != STATE_READY or head is None or head.get("status") != "True":
        detail = (head or {}).get("message") or "its Pods are not all ready yet"
        return ConditionState("False", RAY_CLUSTER_NOT_READY, f"RayCluster {name}: {detail}")
    return ConditionState("True", RAY_CLUSTER_READY, f"RayCluster {name} is ready")


def compute_status(old: Mapping[str, Any], observed: Observed, *, now: datetime.datetime) -> JSON:
    """The new status: `old` with what was observed (its `autoscalerRetries` kept)."""
    status: JSON = copy.deepcopy(dict(old))
    status["observedGeneration"] = observed.generation
    status["rayClusterName"] = observed.cluster_name
    status.setdefault("autoscalerRetries", 0)
    ready = ready_condition(observed.cluster, name=observed.cluster_name)
    conditions: list[JSON] = list(status.get("conditions") or [])
    for kind, state in ((CONVERTED, observed.converted), (READY, ready)):
        conditions = with_condition(
            conditions, kind, state, now=now, generation=observed.generation
        )
    status["conditions"] = conditions
    status["phase"] = phase(observed.converted, ready)
    return status


def phase(converted: ConditionState, ready: ConditionState) -> str:
    """The legacy `status.phase`: Error, Running or Pending."""
    if converted.status != "True" or ready.reason == RAY_CLUSTER_FAILED:
        return ERROR
    return RUNNING if ready.status == "True" else PENDING


__all__ = [
    "CONVERTED",
    "ERROR",
    "PENDING",
    "READY",
    "RUNNING",
    "Observed",
    "compute_status",
    "converted_condition",
    "phase",
    "ready_condition",
    "status_changed",
]
