"""Pure decisions from observed state: each kind's status, conditions and state machine.

Inputs are the object (typed or as a mapping, including its current status) and the Pods and
Services the cache holds, as plain dicts; outputs are a new status dict or the next step. No I/O:
the reconciler reads the store, calls these, and performs what they return. How to scale a
cluster's Pods and repair what we own is planned beside this package, in `planning/`.
"""

from ray_operator.status.raycluster import ReplicaFailure, compute_status, status_changed

__all__ = [
    "ReplicaFailure",
    "compute_status",
    "status_changed",
]
