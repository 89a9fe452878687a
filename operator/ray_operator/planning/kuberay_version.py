"""Head Pods stamped by another KubeRay version, re-stamped rather than recreated.

With `upgradeStrategy.type: Recreate`, KubeRay compares the head Pod's
`ray.io/upgrade-strategy-recreate-hash` with the spec's. A head stamped by another version
(`ray.io/kuberay-version` set and not ours, e.g. `v1.5.1` after a takeover from KubeRay v1.5) may
carry a hash its own Go types wrote, different for the same spec; KubeRay's
`shouldRecreatePodsForUpgrade` then recreates nothing and rewrites both annotations to its own
values, so only a later change of the spec recreates the Pods. `head_pod_restamps` says which
merge patch goes to which head Pod for that; `planning.scaling` meanwhile plans no recreate for such
a head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ray_operator.spec import kuberay_names as names
from ray_operator.spec import pods as observed
from ray_operator.spec.hashing import GoDecodeError, pod_template_hash

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster


Object = Mapping[str, Any]
JSON = dict[str, Any]


def head_pod_restamps(cluster: RayCluster, pods: Sequence[Pod]) -> list[tuple[str, JSON]]:
    """(head Pod name, merge patch) for each live head Pod another KubeRay version stamped, when
    the cluster's upgrade strategy is Recreate; empty otherwise (or when the spec cannot be
    hashed: KubeRay then skips the comparison altogether)."""
    strategy = cluster.get("spec", {}).get("upgradeStrategy", {}).get("type")
    if strategy != "Recreate":
        return []
    stamped_by_others = [
        pod
        for pod in pods
        if observed.is_head(pod) and not observed.is_terminating(pod) and _other_version(pod)
    ]
    if not stamped_by_others:
        return []
    try:
        expected = pod_template_hash(cluster)
    except GoDecodeError:
        return []
    patch = {
        "metadata": {
            "annotations": {
                names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION: expected,
                names.KUBERAY_VERSION_ANNOTATION: names.KUBERAY_VERSION,
            }
        }
    }
    return [(observed.pod_name(pod), patch) for pod in stamped_by_others]


def _other_version(pod: Pod) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    version = annotations.get(names.KUBERAY_VERSION_ANNOTATION, "")
    return bool(version) and version != names.KUBERAY_VERSION
