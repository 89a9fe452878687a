"""Pure builders: a RayCluster in, the Kubernetes objects KubeRay would create for it out.

Nothing in this package does I/O or imports the API client, aiohttp or the runtime: every function
takes the typed RayCluster (or the same object as a mapping) and returns plain dicts, so each can be
tested alone and the reconciler decides what to send. The public entry points are re-exported here;
the names and hashes of what they build are the spec floor's (`spec.object_names`, `spec.hashing`).
"""

from ray_operator.builders.fault_tolerance import build_gcs_storage_pvc, needs_gcs_storage_pvc
from ray_operator.builders.pods import PodOptions, build_head_pod, build_worker_pod
from ray_operator.builders.services import (
    NoServePortError,
    build_head_service,
    build_headless_service,
    build_serve_service,
    head_ports,
    needs_headless_service,
    wants_serve_service,
)

__all__ = [
    "NoServePortError",
    "PodOptions",
    "build_gcs_storage_pvc",
    "build_head_pod",
    "build_head_service",
    "build_headless_service",
    "build_serve_service",
    "build_worker_pod",
    "head_ports",
    "needs_gcs_storage_pvc",
    "needs_headless_service",
    "wants_serve_service",
]
