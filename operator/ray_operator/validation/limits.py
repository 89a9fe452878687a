"""How large one RayCluster may be: the bound the webhook and the controllers' re-validation share.

One RayCluster must not be able to take the operator (or the Kubernetes cluster) down for every
other tenant (issue 12): `replicas = maxReplicas = 2147483647` used to be admitted and made the
operator build one Pod per missing replica. `ClusterLimits.max_pods_per_cluster` bounds the Pods a
cluster asks for: the head plus, per worker group, its desired replicas (`replicas` clamped into
[`minReplicas`, `maxReplicas`]) and its `minReplicas`, each times `numOfHosts`.

Why 10,000 by default: Kubernetes' own scalability envelope is 150,000 Pods and 5,000 nodes per
cluster, and the largest Ray clusters run in production are a few thousand nodes. 10,000 Pods is
well above any real Ray cluster, yet keeps one cluster to a fifteenth of the largest Kubernetes
cluster and keeps what the operator holds per cluster (cached Pods, a status, a scaling plan)
in the tens of megabytes. Raise it with `--max-pods-per-cluster`
(RAY_OPERATOR_MAX_PODS_PER_CLUSTER).
"""

from __future__ import annotations

import dataclasses

from ray_operator.features import FeatureGates
from ray_operator.validation.identity import OperatorIdentity

DEFAULT_MAX_PODS_PER_CLUSTER = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterLimits:
    """Upper bounds on what one RayCluster (also embedded in a RayJob/RayService) may ask for."""

    max_pods_per_cluster: int = DEFAULT_MAX_PODS_PER_CLUSTER
    """Pods one cluster may want: head + every group's replicas (and minReplicas) x numOfHosts."""

    feature_gates: FeatureGates = dataclasses.field(default_factory=FeatureGates)
    """The operator's `--feature-gates`: a gated field is refused, naming its gate, while the
    gate is off (what a cluster may ask for depends on what the operator was started with)."""

    operator_identity: OperatorIdentity | None = None
    """The operator's own ServiceAccount (`--service-account`): no template in its namespace may
    name it (`validation/identity.py`); None when not known (outside a cluster)."""


DEFAULT_LIMITS = ClusterLimits()
