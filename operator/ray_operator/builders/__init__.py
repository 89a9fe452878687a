"""Pure builders: a RayCluster in, the Kubernetes objects KubeRay would create for it out.

Nothing in this package does I/O or imports the API client, aiohttp or the runtime: every function
takes the typed RayCluster (or the same object as a mapping) and returns plain dicts, so each can be
tested alone and the reconciler decides what to send. The public entry points are re-exported here.
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
from ray_operator.spec.hashing import pod_template_hash
from ray_operator.spec.object_names import (
    head_pod_name,
    head_service_fqdn,
    head_service_name,
    headless_service_name,
    random_suffix,
    replica_group_name,
    serve_service_name,
    worker_pod_name,
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
    "head_pod_name",
    "head_ports",
    "head_service_fqdn",
    "head_service_name",
    "headless_service_name",
    "needs_gcs_storage_pvc",
    "needs_headless_service",
    "pod_template_hash",
    "random_suffix",
    "replica_group_name",
    "serve_service_name",
    "wants_serve_service",
    "worker_pod_name",
]
