"""Computed defaults: what the API server's schema `default:` cannot express, in one place.

The admission webhook stores these in the object (a JSONPatch); the controllers apply the same
functions to what they read, so an operator installed without webhooks behaves identically. Pure:
a manifest (or typed model) in, a defaulted deep copy out; no I/O, never mutates the input.

What is and is not defaulted, and why, is tabled in `docs/webhooks.md`. In short:
every runtime default KubeRay applies to a RayCluster or a RayJob is either already a schema
default of the CRD (replicas, minReplicas, maxReplicas, numOfHosts, submissionMode, backoffLimit,
ttlSecondsAfterFinished, maxSurgePercent) or depends on a field that can later change (storing it
would leave a stale value behind), so only the RayService gets stored defaults.
"""

from ray_operator.defaults.objects import (
    DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS,
    DEFAULT_UPGRADE_TYPE,
    default_object,
    default_raycluster,
    default_rayjob,
    default_rayservice,
)

__all__ = [
    "DEFAULT_RAY_CLUSTER_DELETION_DELAY_SECONDS",
    "DEFAULT_UPGRADE_TYPE",
    "default_object",
    "default_raycluster",
    "default_rayjob",
    "default_rayservice",
]
