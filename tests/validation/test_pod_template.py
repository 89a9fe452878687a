"""Kubernetes' own Pod rules on the templates we turn into Pods: what the API server would refuse at
Pod creation is refused at admission (or reported by the controller), every violation at once,
with the API server's wording and the full field path."""

from __future__ import annotations

from typing import Any

import pytest
from ray_operator.validation import validate_raycluster
from ray_operator.validation.pod_template import MAX_ERRORS_PER_TEMPLATE, pod_template_errors
from ray_operator.validation.rayjob import validate_rayjob
from ray_operator.validation.rayservice import validate_rayservice

from tests.builders.clusters import ray_container, raycluster
from tests.cpu_time import cpu_time

HEAD = "spec.headGroupSpec.template.spec"
WORKER = "spec.workerGroupSpecs[0].template.spec"


def _template(*containers: dict[str, Any], **pod_spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(containers), **pod_spec}}


def _messages(template: dict[str, Any]) -> list[str]:
    return [str(error) for error in pod_template_errors("t", template)]


def _head(cluster: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][
        0
    ]
    return container


def test_a_valid_template_has_no_errors() -> None:
    ports = [{"name": "gcs", "containerPort": 6379}, {"containerPort": 8265, "protocol": "TCP"}]
    env = [{"name": "my.env-name", "value": "x"}, {"name": "1 weird but legal", "value": "y"}]
    assert _messages(_template(ray_container(ports=ports, env=env))) == []


def test_a_missing_image_is_refused_as_the_api_server_would() -> None:
    cluster = raycluster()
    del _head(cluster)["image"]
    assert [str(e) for e in validate_raycluster(cluster)] == [
        f"{HEAD}.containers[0].image: Required value"
    ]


def test_every_container_rule_is_reported_at_once() -> None:
    container = ray_container(
        "Ray_Head",
        image=" rayproject/ray ",
        ports=[
            {"name": "dashboard-port-too-long", "containerPort": 0},
            {"name": "gcs", "containerPort": 70000, "hostPort": -1, "protocol": "HTTP"},
            {"name": "gcs", "containerPort": 6379},
        ],
        env=[{"name": "A=B", "value": "1"}, {"name": "", "value": "2"}],
        envFrom=[{"prefix": "A=_"}],
    )
    assert _messages(_template(container, initContainers=[ray_container("ray-head")])) == [
        't.spec.containers[0].name: Invalid value: "Ray_Head": a lowercase RFC 1123 label must '
        "consist of lower case alphanumeric characters or '-', and must start and end with an "
        "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        't.spec.containers[0].image: Invalid value: " rayproject/ray ": must not have leading or '
        "trailing whitespace",
        "t.spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and "
        "65535, inclusive",
        't.spec.containers[0].ports[0].name: Invalid value: "dashboard-port-too-long": must be no '
        "more than 15 characters",
        "t.spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and "
        "65535, inclusive",
        "t.spec.containers[0].ports[1].hostPort: Invalid value: -1: must be between 0 and 65535, "
        "inclusive",
        't.spec.containers[0].ports[1].protocol: Unsupported value: "HTTP": supported values: '
        '"SCTP", "TCP", "UDP"',
        't.spec.containers[0].ports[2].name: Duplicate value: "gcs"',
        't.spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name '
        "must consist only of printable ASCII characters other than '='",
        "t.spec.containers[0].env[1].name: Required value",
        't.spec.containers[0].envFrom[0].prefix: Invalid value: "A=_": a valid environment '
        "variable name must consist only of printable ASCII characters other than '='",
    ]


def test_container_names_are_unique_across_init_containers_and_containers() -> None:
    template = _template(
        ray_container("ray-head"),
        ray_container("sidecar"),
        initContainers=[ray_container("sidecar")],
    )
    assert _messages(template) == ['t.spec.containers[1].name: Duplicate value: "sidecar"']


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("UPPER", "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"),
        ("8080", "must contain at least one letter (a-z)"),
        ("a--b", "must not contain consecutive hyphens"),
        ("-ab", "must not begin or end with a hyphen"),
    ],
)
def test_port_names_follow_iana_svc_name(name: str, detail: str) -> None:
    template = _template(ray_container(ports=[{"name": name, "containerPort": 1}]))
    assert f't.spec.containers[0].ports[0].name: Invalid value: "{name}": {detail}' in _messages(
        template
    )


def test_a_quantity_out_of_range_is_refused_with_its_path_and_problem() -> None:
    cluster = raycluster()
    _head(cluster)["resources"]["limits"]["cpu"] = "1e10000000"
    with cpu_time() as spent:
        messages = [str(e) for e in validate_raycluster(cluster)]
    assert spent.seconds < 0.05  # was seconds: a ten-million-digit number
    assert messages == [
        f'{HEAD}.containers[0].resources.limits[cpu]: Invalid value: "1e10000000": out of range: '
        "a quantity may be at most 9223372036854775807 (2^63-1), the largest Kubernetes holds"
    ]


def test_resources_must_be_valid_non_negative_and_requests_within_limits() -> None:
    container = ray_container(cpu="2", memory="1Gi")
    container["resources"]["requests"] = {"cpu": "3", "memory": "-1", "nvidia.com/gpu": "lots"}
    assert _messages(_template(container)) == [
        't.spec.containers[0].resources.requests[memory]: Invalid value: "-1": must be greater '
        "than or equal to 0",
        't.spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "lots": '
        "quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        't.spec.containers[0].resources.requests: Invalid value: "3": must be less than or equal '
        "to cpu limit of 2",
    ]


def test_extended_resources_are_whole_and_requested_exactly_at_their_limit() -> None:
    # The API server refuses these Pods: a device-plugin resource is never overcommitted and is
    # counted in whole units (999999Ti is whole, but its milli-units overflow Kubernetes' int64).
    container = ray_container(cpu="1", memory="1Gi")
    container["resources"]["limits"]["nvidia.com/gpu"] = "999999Ti"
    container["resources"]["limits"]["google.com/tpu"] = "4"
    container["resources"]["requests"] = {"google.com/tpu": "2", "example.com/fpga": "1"}
    assert _messages(_template(container)) == [
        't.spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "999999Ti": '
        "must be an integer",
        't.spec.containers[0].resources.requests: Invalid value: "2": must be equal to '
        "google.com/tpu limit of 4",
        "t.spec.containers[0].resources.limits[example.com/fpga]: Required value: Limit must be "
        "set for non overcommitable resources",
    ]


def test_whole_extended_resources_at_their_limit_are_valid() -> None:
    container = ray_container(cpu="1", memory="1Gi")
    container["resources"]["limits"]["nvidia.com/gpu"] = "8"
    container["resources"]["requests"] = {"nvidia.com/gpu": "8", "cpu": "500m"}
    assert _messages(_template(container)) == []


def test_group_resources_quantities_are_checked_too() -> None:
    cluster = raycluster()
    cluster["spec"]["workerGroupSpecs"][0]["resources"] = {"CPU": "1e-10000000"}
    assert [str(e) for e in validate_raycluster(cluster)] == [
        'spec.workerGroupSpecs[0].resources[CPU]: Invalid value: "1e-10000000": out of range: a '
        "non-zero quantity must be at least 1n (10^-9), the smallest Kubernetes holds"
    ]


def test_worker_templates_are_checked_like_the_head() -> None:
    cluster = raycluster()
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    worker["name"] = "ray worker"
    assert [e.field for e in validate_raycluster(cluster)] == [f"{WORKER}.containers[0].name"]


def test_errors_per_template_are_bounded_and_values_cut_short() -> None:
    huge_name = "x=" + "y" * 1_000_000  # one string, shared by every entry
    env = [{"name": huge_name, "value": ""} for _ in range(10_000)]
    errors = pod_template_errors("t", _template(ray_container(env=env)))
    assert len(errors) == MAX_ERRORS_PER_TEMPLATE
    assert all(len(str(error)) < 300 for error in errors)


def test_a_template_of_any_shape_gives_errors_not_exceptions() -> None:
    for template in (None, [], {"spec": []}, {"spec": {"containers": [None, "x", {"ports": 5}]}}):
        pod_template_errors("t", template)


def test_rayjob_submitter_template_is_checked_and_needs_a_container() -> None:
    rayjob = _rayjob()
    rayjob["spec"]["submitterPodTemplate"] = _template(ray_container("Submitter"))
    assert [e.field for e in validate_rayjob(rayjob)] == [
        "spec.submitterPodTemplate.spec.containers[0].name"
    ]
    rayjob["spec"]["submitterPodTemplate"] = {"spec": {"restartPolicy": "Never"}}
    assert [str(e) for e in validate_rayjob(rayjob)] == [
        "spec.submitterPodTemplate.spec.containers: Required value: the submitter Pod needs a "
        "container"
    ]


def test_embedded_cluster_templates_are_checked_under_the_owners_field() -> None:
    rayjob = _rayjob()
    del rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    assert [e.field for e in validate_rayjob(rayjob)] == [
        "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].image"
    ]
    rayservice = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "svc", "namespace": "ns1"},
        "spec": {"rayClusterConfig": raycluster()["spec"], "serveConfigV2": "applications: []\n"},
    }
    _head({"spec": rayservice["spec"]["rayClusterConfig"]})["env"] = [{"name": "", "value": "1"}]
    assert [e.field for e in validate_rayservice(rayservice)] == [
        "spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].env[0].name"
    ]


def _rayjob() -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job", "namespace": "ns1"},
        "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": raycluster()["spec"]},
    }
