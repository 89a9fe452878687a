"""Pure decisions from observed state: a RayCluster's status, and how to scale its Pods.

Inputs are the RayCluster (typed or as a mapping, including its current status) and the Pods and
Services the cache holds, as plain dicts; outputs are a new status dict or a `ScalingPlan`. No I/O:
the reconciler reads the store, calls these, and performs what they return.
"""

from ray_operator.status.raycluster import ReplicaFailure, compute_status, status_changed
from ray_operator.status.scaling import GroupPlan, PodDeletion, ScalingPlan, plan_scaling

__all__ = [
    "GroupPlan",
    "PodDeletion",
    "ReplicaFailure",
    "ScalingPlan",
    "compute_status",
    "plan_scaling",
    "status_changed",
]
