"""For every RayCluster that KubeRay publishes as a sample, we build what KubeRay would build.

Expected values are written out (derived from KubeRay's rules in common/pod.go and service.go), not
computed: the `ray start` line is compared byte for byte, including KubeRay's double spaces.
"""

from __future__ import annotations

from typing import Any

import pytest
from ray_io.v1 import RayCluster
from ray_operator.builders import build_head_pod, build_head_service, build_worker_pod

from tests.builders.clusters import env_of
from tests.builders.kuberay_expectations import (
    _STANDARD_HEAD,
    EXPECTED_HEAD_SERVICE,
    EXPECTED_RAY_START,
)
from tests.builders.samples import raycluster_samples

SAMPLES = raycluster_samples()


def test_every_raycluster_sample_has_expectations() -> None:
    assert set(SAMPLES) == set(EXPECTED_RAY_START) == set(EXPECTED_HEAD_SERVICE)


def _typed(file_name: str) -> RayCluster:
    return RayCluster.model_validate(SAMPLES[file_name])


def _generated_command(pod: dict[str, Any]) -> str:
    return str(env_of(pod["spec"]["containers"][0])["KUBERAY_GEN_RAY_START_CMD"])


@pytest.mark.parametrize("file_name", sorted(EXPECTED_RAY_START))
def test_head_ray_start_command_matches_kuberay(file_name: str) -> None:
    head = build_head_pod(_typed(file_name), suffix="abcde")
    assert _generated_command(head) == EXPECTED_RAY_START[file_name][0]


@pytest.mark.parametrize("file_name", sorted(EXPECTED_RAY_START))
def test_worker_ray_start_commands_match_kuberay(file_name: str) -> None:
    cluster = _typed(file_name)
    built = {
        group: _generated_command(build_worker_pod(cluster, group, suffix="abcde", replica_index=0))
        for group in EXPECTED_RAY_START[file_name][1]
    }
    assert built == EXPECTED_RAY_START[file_name][1]
    assert {g.group_name for g in cluster.spec.worker_group_specs or []} == set(built)  # type: ignore[union-attr]


@pytest.mark.parametrize("file_name", sorted(EXPECTED_RAY_START))
def test_pods_carry_kuberay_labels(file_name: str) -> None:
    cluster = _typed(file_name)
    name = SAMPLES[file_name]["metadata"]["name"]
    head = build_head_pod(cluster, suffix="abcde")
    assert head["metadata"]["name"] == f"{name}-head-abcde"
    expected_head = {
        "ray.io/cluster": name,
        "ray.io/node-type": "head",
        "ray.io/group": "headgroup",
        "ray.io/identifier": f"{name}-head",
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "ray-operator",
    }
    assert expected_head.items() <= head["metadata"]["labels"].items()
    for group in EXPECTED_RAY_START[file_name][1]:
        worker = build_worker_pod(cluster, group, suffix="fghij", replica_index=0)
        assert worker["metadata"]["name"] == f"{name}-{group}-worker-fghij"
        expected = {
            **expected_head,
            "ray.io/node-type": "worker",
            "ray.io/group": group,
            "ray.io/identifier": f"{name}-worker",
        }
        assert expected.items() <= worker["metadata"]["labels"].items()


@pytest.mark.parametrize("file_name", sorted(EXPECTED_HEAD_SERVICE))
def test_head_service_ports_and_type_match_kuberay(file_name: str) -> None:
    service = build_head_service(_typed(file_name))
    expected_type, expected_ports = EXPECTED_HEAD_SERVICE[file_name]
    assert service["spec"]["type"] == expected_type
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == expected_ports


@pytest.mark.parametrize("file_name", sorted(EXPECTED_RAY_START))
def test_ray_containers_expose_the_metrics_port(file_name: str) -> None:
    cluster = _typed(file_name)
    pods = [build_head_pod(cluster, suffix="abcde")]
    pods += [
        build_worker_pod(cluster, g, suffix="abcde", replica_index=0)
        for g in EXPECTED_RAY_START[file_name][1]
    ]
    for pod in pods:
        ports = {p.get("name"): p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
        assert ports["metrics"] == 8080


def test_head_command_sample_runs_user_command_before_ray_start() -> None:
    head = build_head_pod(_typed("ray-cluster.head-command.yaml"), suffix="abcde")
    container = head["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-c", "--"]
    expected = (
        " echo 123  456  && ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; " + _STANDARD_HEAD
    )
    assert container["args"] == [expected]


def test_overwrite_command_sample_keeps_the_users_command() -> None:
    sample = SAMPLES["ray-cluster.overwrite-command.yaml"]
    head = build_head_pod(_typed("ray-cluster.overwrite-command.yaml"), suffix="abcde")
    original = sample["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["spec"]["containers"][0]["args"] == original["args"]
    assert head["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"


def test_tpu_multihost_sample_needs_a_headless_service() -> None:
    from ray_operator.builders import build_headless_service, needs_headless_service

    cluster = _typed("ray-cluster.tpu-v4-multihost.yaml")
    assert needs_headless_service(cluster)
    service = build_headless_service(cluster)
    assert service["metadata"]["name"] == "raycluster-tpu-v4-multihost-headless"
    assert service["spec"]["clusterIP"] == "None"
