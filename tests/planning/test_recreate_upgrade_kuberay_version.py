"""Specification: `upgradeStrategy.type: Recreate` compares hashes only with a head Pod stamped by
the same KubeRay version as ours (KubeRay's `shouldRecreatePodsForUpgrade`): a head another
version stamped may hash differently only because that version's Go types write the spec
differently, so it is never recreated for that."""

from __future__ import annotations

from ray_operator.planning.scaling import plan_scaling
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.hashing import pod_template_hash

from tests.builders.clusters import raycluster
from tests.status.observed import head, pod


def _head(*, recorded: str, version: str | None) -> dict[str, object]:
    annotations = {names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION: recorded}
    if version is not None:
        annotations[names.KUBERAY_VERSION_ANNOTATION] = version
    return head(metadata={"annotations": annotations})


def _recreates(cluster: dict[str, object], head_pod: dict[str, object]) -> bool:
    plan = plan_scaling(cluster, pods=[head_pod, pod("w0")])
    return plan.delete_all_reason is not None


def test_a_stale_hash_from_our_kuberay_version_recreates_the_pods() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    assert _recreates(cluster, _head(recorded="OLD", version=names.KUBERAY_VERSION))
    assert _recreates(cluster, _head(recorded="OLD", version=None))


def test_a_hash_stamped_by_another_kuberay_version_recreates_nothing() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    assert not _recreates(cluster, _head(recorded="OLD", version="v1.4.2"))


def test_the_current_hash_recreates_nothing() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    current = pod_template_hash(cluster)
    assert not _recreates(cluster, _head(recorded=current, version=names.KUBERAY_VERSION))


def test_a_spec_go_could_not_decode_recreates_nothing() -> None:
    # KubeRay cannot hash it either: it logs the error and skips the comparison.
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    cluster["spec"]["workerGroupSpecs"][0]["numOfHosts"] = 2**31  # beyond Go's int32
    assert not _recreates(cluster, _head(recorded="OLD", version=names.KUBERAY_VERSION))
