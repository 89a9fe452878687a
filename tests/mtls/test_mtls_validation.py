"""Specification: `spec.tlsOptions` is refused while the RayClusterMTLS gate is off, with the flag
that turns it on; with the gate on, our sample and KubeRay's are valid, and every template entry
that would clash with what mTLS injects is refused with its own field path (KubeRay's rules, all
at once), while `tlsOptions.enabled: false` leaves hand-made TLS alone."""

from __future__ import annotations

from typing import Any

from ray_operator.features import FeatureGates, gate_off_detail
from ray_operator.validation.limits import ClusterLimits
from ray_operator.validation.mtls import tls_options_errors
from ray_operator.validation.raycluster import validate_raycluster

from tests.builders.samples import load_sample
from tests.mtls.samples import mtls_cluster

GATE_ON = ClusterLimits(feature_gates=FeatureGates({"RayClusterMTLS": True}))


def problems(cluster: dict[str, Any], limits: ClusterLimits = GATE_ON) -> list[str]:
    return [str(error) for error in validate_raycluster(cluster, limits=limits)]


def test_with_the_gate_off_the_field_is_refused_naming_the_flag() -> None:
    assert problems(mtls_cluster(), ClusterLimits()) == [
        f"spec.tlsOptions: Forbidden: {gate_off_detail('RayClusterMTLS')}"
    ]
    assert "--feature-gates=RayClusterMTLS=true" in gate_off_detail("RayClusterMTLS")


def test_with_the_gate_on_the_sample_is_valid() -> None:
    assert problems(mtls_cluster()) == []


def test_every_clash_with_the_managed_tls_is_named_at_its_field() -> None:
    cluster = mtls_cluster()
    cluster["spec"]["enableInTreeAutoscaling"] = True
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][0]["env"] = [
        {"name": "OK", "value": "1"},
        {"name": "RAY_USE_TLS", "value": "0"},
    ]
    head["containers"][0]["volumeMounts"] = [{"name": "ray-tls", "mountPath": "/certs"}]
    head["volumes"] = [{"name": "ray-tls", "emptyDir": {}}]
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["containers"][0]["env"] = [{"name": "RAY_TLS_CA_CERT", "value": "/mine/ca.crt"}]
    worker["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": "/etc/ray/tls/"}]
    worker["volumes"] = [{"name": "mine", "emptyDir": {}}]
    worker["initContainers"] = [{"name": "wait-for-tls-ip-san", "image": "busybox"}]
    cluster["spec"]["autoscalerOptions"] = {
        "env": [{"name": "RAY_TLS_SERVER_KEY", "value": "/k"}],
        "volumeMounts": [{"name": "x", "mountPath": "/etc/ray/tls"}],
    }
    fields = [p.split(": ", 1)[0] for p in problems(cluster)]
    assert fields == [
        "spec.headGroupSpec.template.spec.containers[0].env[1].name",
        "spec.headGroupSpec.template.spec.containers[0].volumeMounts[0].name",
        "spec.headGroupSpec.template.spec.volumes[0].name",
        "spec.workerGroupSpecs[0].template.spec.containers[0].env[0].name",
        "spec.workerGroupSpecs[0].template.spec.containers[0].volumeMounts[0].mountPath",
        "spec.workerGroupSpecs[0].template.spec.initContainers[0].name",
        "spec.autoscalerOptions.env[0].name",
        "spec.autoscalerOptions.volumeMounts[0].mountPath",
    ]
    assert all("tlsOptions.enabled" in p for p in problems(cluster))


def test_tls_options_disabled_leave_hand_made_tls_alone() -> None:
    cluster = load_sample("ray-cluster.tls.yaml")
    cluster["spec"]["tlsOptions"] = {"enabled": False}
    assert problems(cluster) == []
    cluster["spec"]["tlsOptions"] = {"enabled": True}
    assert problems(cluster)  # its own RAY_USE_TLS and ray-tls mount clash with the managed ones


def test_hostile_shapes_are_left_to_the_schema_without_a_crash() -> None:
    cluster = mtls_cluster()
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][0]["env"] = "not a list"
    head["containers"][0]["volumeMounts"] = [None, 3, {"mountPath": 7}]
    cluster["spec"]["workerGroupSpecs"][0]["template"] = None
    cluster["spec"]["autoscalerOptions"] = ["nope"]
    assert list(tls_options_errors(cluster, limits=GATE_ON)) == []  # type: ignore[arg-type]


def test_many_clashes_cost_one_pass() -> None:
    cluster = mtls_cluster()
    env = [{"name": "RAY_USE_TLS", "value": "1"}] * 20_000
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = env
    assert len(list(tls_options_errors(cluster, limits=GATE_ON))) == 20_000  # type: ignore[arg-type]
