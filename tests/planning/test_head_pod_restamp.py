"""Specification: which head Pods get our Recreate hash and KubeRay version by a merge patch
(KubeRay's `shouldRecreatePodsForUpgrade` re-stamp), and which Go-undecodable fields the
controllers report as invalid specs (`validation.go_decoding`)."""

from __future__ import annotations

from typing import Any

from ray_operator.planning.kuberay_version import head_pod_restamps
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.hashing import pod_template_hash
from ray_operator.validation.go_decoding import raycluster_go_decode_errors
from ray_operator.validation.raycluster import validate_raycluster
from ray_operator.validation.rayjob import validate_rayjob
from ray_operator.validation.rayservice import validate_rayservice

from tests.builders.clusters import raycluster
from tests.status.observed import head, pod

UNDECODABLE = "1e99999999999999999999"


def _head(version: str | None, **metadata: Any) -> dict[str, Any]:
    annotations = {names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION: "OLD"}
    if version is not None:
        annotations[names.KUBERAY_VERSION_ANNOTATION] = version
    return head(metadata={"annotations": annotations, **metadata})


def test_a_head_stamped_by_another_version_gets_our_hash_and_version() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    restamps = head_pod_restamps(cluster, [_head("v1.5.1"), pod("w0")])
    assert restamps == [
        (
            "demo-head-aaaaa",
            {
                "metadata": {
                    "annotations": {
                        names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION: pod_template_hash(cluster),
                        names.KUBERAY_VERSION_ANNOTATION: names.KUBERAY_VERSION,
                    }
                }
            },
        )
    ]


def test_heads_of_our_version_or_without_one_are_left_to_the_recreate_rule() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    assert head_pod_restamps(cluster, [_head(names.KUBERAY_VERSION)]) == []
    assert head_pod_restamps(cluster, [_head(None)]) == []
    assert head_pod_restamps(cluster, [_head("")]) == []


def test_only_the_recreate_strategy_restamps() -> None:
    assert head_pod_restamps(raycluster(), [_head("v1.5.1")]) == []
    none = raycluster(upgradeStrategy={"type": "None"})
    assert head_pod_restamps(none, [_head("v1.5.1")]) == []


def test_a_terminating_head_is_not_patched() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    going = _head("v1.5.1", deletionTimestamp="2026-01-01T00:00:00Z")
    assert head_pod_restamps(cluster, [going]) == []


def test_an_undecodable_spec_restamps_nothing_as_kuberay_skips_it() -> None:
    cluster = raycluster(upgradeStrategy={"type": "Recreate"})
    cluster["spec"]["workerGroupSpecs"][0]["numOfHosts"] = 2**31  # beyond Go's int32
    assert head_pod_restamps(cluster, [_head("v1.5.1")]) == []


def _with_undecodable_volume(spec: dict[str, Any]) -> None:
    pod_spec = spec["headGroupSpec"]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "v", "emptyDir": {"sizeLimit": UNDECODABLE}}]


def test_the_undecodable_field_of_a_raycluster_is_named_with_its_value() -> None:
    cluster = raycluster()
    assert raycluster_go_decode_errors(cluster) == []
    _with_undecodable_volume(cluster["spec"])
    (error,) = raycluster_go_decode_errors(cluster)
    assert error.field == "spec.headGroupSpec.template.spec.volumes[0].emptyDir.sizeLimit"
    assert error.value == UNDECODABLE
    assert "cannot decode" in error.detail


def test_admission_refuses_a_raycluster_go_cannot_decode() -> None:
    cluster = raycluster()
    _with_undecodable_volume(cluster["spec"])
    (error,) = validate_raycluster(cluster)
    assert error.field == "spec.headGroupSpec.template.spec.volumes[0].emptyDir.sizeLimit"


def test_the_undecodable_field_of_a_rayservice_is_named_under_its_cluster_config() -> None:
    cluster = raycluster()
    service = {"metadata": {"name": "s"}, "spec": {"rayClusterConfig": cluster["spec"]}}
    assert validate_rayservice(service) == []
    _with_undecodable_volume(cluster["spec"])
    (error,) = validate_rayservice(service)
    assert error.field == (
        "spec.rayClusterConfig.headGroupSpec.template.spec.volumes[0].emptyDir.sizeLimit"
    )
    assert error.value == UNDECODABLE


def test_the_undecodable_field_of_a_rayjob_is_named_under_its_cluster_spec() -> None:
    cluster = raycluster()
    _with_undecodable_volume(cluster["spec"])
    rayjob = {
        "metadata": {"name": "j"},
        "spec": {"entrypoint": "python x.py", "rayClusterSpec": cluster["spec"]},
    }
    (error,) = validate_rayjob(rayjob)
    assert error.field == (
        "spec.rayClusterSpec.headGroupSpec.template.spec.volumes[0].emptyDir.sizeLimit"
    )


def test_a_map_key_in_the_path_is_followed_to_the_value() -> None:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": UNDECODABLE}
    }
    (error,) = raycluster_go_decode_errors(cluster)
    assert error.field.endswith("containers[0].resources.limits[cpu]")
    assert error.value == UNDECODABLE
