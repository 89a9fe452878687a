"""Head, headless and serve Services."""

from __future__ import annotations

import copy

import pytest
from ray_operator.builders import (
    NoServePortError,
    build_head_service,
    build_headless_service,
    build_serve_service,
    head_ports,
    needs_headless_service,
)

from tests.builders.clusters import raycluster, worker_group


def _with_head_ports(ports: list[dict]) -> dict:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] = ports
    return cluster


def test_head_service_is_named_after_the_cluster_and_headless_by_default() -> None:
    service = build_head_service(raycluster())
    assert service["metadata"]["name"] == "demo-head-svc"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_head_service_without_container_ports_exposes_kuberay_defaults_sorted() -> None:
    ports = build_head_service(raycluster())["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in ports] == [
        ("client", 10001),
        ("dashboard", 8265),
        ("gcs-server", 6379),
        ("metrics", 8080),
        ("serve", 8000),
    ]
    assert all(p["appProtocol"] == "tcp" for p in ports)


def test_head_service_uses_container_ports_and_always_adds_metrics() -> None:
    cluster = _with_head_ports([{"name": "gcs", "containerPort": 6379}, {"containerPort": 9000}])
    ports = {p["name"]: p["port"] for p in build_head_service(cluster)["spec"]["ports"]}
    assert ports == {"gcs": 6379, "9000-port": 9000, "metrics": 8080}


def test_head_service_selects_the_head_pod_by_kuberay_labels() -> None:
    selector = build_head_service(raycluster())["spec"]["selector"]
    assert selector["ray.io/cluster"] == "demo"
    assert selector["ray.io/node-type"] == "head"
    assert selector["ray.io/identifier"] == "demo-head"


@pytest.mark.parametrize("service_type", ["NodePort", "LoadBalancer"])
def test_head_service_type_follows_service_type(service_type: str) -> None:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["serviceType"] = service_type
    service = build_head_service(cluster)
    assert service["spec"]["type"] == service_type
    assert "clusterIP" not in service["spec"]


def test_head_service_annotations_are_applied() -> None:
    cluster = raycluster(headServiceAnnotations={"cloud/lb": "internal"})
    assert build_head_service(cluster)["metadata"]["annotations"] == {"cloud/lb": "internal"}


def test_clusterip_head_service_can_be_non_headless() -> None:
    assert "clusterIP" not in build_head_service(raycluster(), headless=False)["spec"]


def test_user_head_service_is_completed_not_replaced() -> None:
    cluster = raycluster(headServiceAnnotations={"a": "from-field"})
    cluster["spec"]["headGroupSpec"]["headService"] = {
        "metadata": {
            "name": "custom",
            "annotations": {"a": "mine", "b": "mine"},
            "labels": {"x": "y"},
        },
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"name": "extra", "port": 1234}],
            "selector": {"ignored": "yes"},
        },
    }
    service = build_head_service(cluster)
    assert service["metadata"]["name"] == "custom"
    assert service["metadata"]["annotations"] == {"a": "from-field", "b": "mine"}
    assert service["metadata"]["labels"]["x"] == "y"
    assert "ignored" not in service["spec"]["selector"]
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"][0] == {"name": "extra", "port": 1234}
    assert "gcs-server" in {p["name"] for p in service["spec"]["ports"]}


def test_headless_service_exists_only_for_multi_host_groups() -> None:
    assert not needs_headless_service(raycluster())
    cluster = raycluster(groups=[worker_group(numOfHosts=4)])
    assert needs_headless_service(cluster)
    service = build_headless_service(cluster)
    assert service["metadata"]["name"] == "demo-headless"
    assert service["spec"]["selector"] == {"ray.io/cluster": "demo", "ray.io/node-type": "worker"}
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_serve_service_exposes_serve_ports_of_the_head() -> None:
    cluster = _with_head_ports(
        [
            {"name": "serve", "containerPort": 8000},
            {"name": "serve-grpc", "containerPort": 9000},
            {"name": "dashboard", "containerPort": 8265},
        ]
    )
    service = build_serve_service(cluster)
    assert service["metadata"]["name"] == "demo-serve-svc"
    assert {p["name"] for p in service["spec"]["ports"]} == {"serve", "serve-grpc"}
    assert service["spec"]["selector"] == {"ray.io/cluster": "demo"}


def test_serve_service_needs_a_serve_port() -> None:
    with pytest.raises(NoServePortError):
        build_serve_service(_with_head_ports([{"name": "gcs", "containerPort": 6379}]))


def test_services_carry_the_created_by_label_the_runtime_watches() -> None:
    cluster = raycluster(groups=[worker_group(numOfHosts=2)])
    for service in (
        build_head_service(cluster),
        build_headless_service(cluster),
        build_serve_service(cluster),
    ):
        assert service["metadata"]["labels"]["app.kubernetes.io/created-by"] == "ray-operator"


def test_head_ports_are_read_from_the_cluster_without_changing_it() -> None:
    cluster = _with_head_ports([{"name": "gcs", "containerPort": 6379}])
    before = copy.deepcopy(cluster)
    ports = head_ports(cluster)
    ports["gcs"] = 1
    assert cluster == before
    assert head_ports(cluster)["gcs"] == 6379
