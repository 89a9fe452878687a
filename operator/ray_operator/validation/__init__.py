"""Semantic validation shared by the RayCluster controller and the admission webhook.

Pure: a RayCluster in, the list of every violation out, each a Kubernetes-style `FieldError`
(field path, kind, value, detail). The webhook turns the list into a 422 with causes; the
controller reports `summarize(errors)` in a Warning event and a condition instead of retrying.
"""

from ray_operator.validation.errors import ErrorType, FieldError, summarize
from ray_operator.validation.raycluster import (
    MAX_CLUSTER_NAME_LENGTH,
    raycluster_warnings,
    validate_raycluster,
    validate_raycluster_status,
)

__all__ = [
    "MAX_CLUSTER_NAME_LENGTH",
    "ErrorType",
    "FieldError",
    "raycluster_warnings",
    "summarize",
    "validate_raycluster",
    "validate_raycluster_status",
]
