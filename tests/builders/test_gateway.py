"""The Gateway, HTTPRoute and per-cluster Serve Services of an incremental upgrade are KubeRay's:
names, parents, backends with their weights, owners; and what the Gateway API reports back is
read as KubeRay reads it."""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders.gateway import (
    Backend,
    build_cluster_serve_service,
    build_gateway,
    build_httproute,
    gateway_differs,
    gateway_ready,
    httproute_differs,
    httproute_ready,
    route_weights,
)

RAYSERVICE: dict[str, Any] = {
    "apiVersion": "ray.io/v1",
    "kind": "RayService",
    "metadata": {"name": "fruit", "namespace": "shop", "uid": "svc-uid"},
    "spec": {
        "upgradeStrategy": {
            "type": "NewClusterWithIncrementalUpgrade",
            "clusterUpgradeOptions": {
                "gatewayClassName": "istio",
                "stepSizePercent": 10,
                "intervalSeconds": 30,
                "maxSurgePercent": 20,
            },
        },
        "serveService": {"metadata": {"name": "custom"}, "spec": {"type": "NodePort"}},
        "rayClusterConfig": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {
                "serviceType": "ClusterIP",
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}},
            },
        },
    },
}


def cluster(name: str, *, serve_port: int | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "ray-head", "image": "ray"}
    if serve_port is not None:
        container["ports"] = [{"name": "serve", "containerPort": serve_port}]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "shop", "uid": f"{name}-uid"},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": [container]}}}},
    }


OWNED_BY_SERVICE = [
    {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "name": "fruit",
        "uid": "svc-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
]


def test_the_gateway_has_one_http_listener_on_port_80_of_the_class_asked_for() -> None:
    gateway = build_gateway(RAYSERVICE)
    assert gateway["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert gateway["kind"] == "Gateway"
    assert gateway["metadata"]["name"] == "fruit-gateway"
    assert gateway["metadata"]["namespace"] == "shop"
    assert gateway["metadata"]["ownerReferences"] == OWNED_BY_SERVICE
    assert gateway["spec"] == {
        "gatewayClassName": "istio",
        "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}],
    }


def test_the_route_splits_everything_under_slash_between_the_clusters_serve_services() -> None:
    route = build_httproute(
        RAYSERVICE,
        [Backend(cluster("fruit-aaaaa"), 70), Backend(cluster("fruit-bbbbb", serve_port=9000), 30)],
    )
    assert route["kind"] == "HTTPRoute"
    assert route["metadata"]["name"] == "fruit-httproute"
    assert route["metadata"]["ownerReferences"] == OWNED_BY_SERVICE
    assert route["spec"] == {
        "parentRefs": [{"name": "fruit-gateway", "namespace": "shop"}],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [
                    {
                        "name": "fruit-aaaaa-serve-svc",
                        "namespace": "shop",
                        "port": 8000,
                        "weight": 70,
                    },
                    {
                        "name": "fruit-bbbbb-serve-svc",
                        "namespace": "shop",
                        "port": 9000,
                        "weight": 30,
                    },
                ],
            }
        ],
    }


def test_each_cluster_has_a_serve_service_of_its_own_owned_by_it() -> None:
    service = build_cluster_serve_service(RAYSERVICE, cluster("fruit-aaaaa", serve_port=8000))
    assert service["metadata"]["name"] == "fruit-aaaaa-serve-svc"
    assert service["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "fruit-aaaaa",
            "uid": "fruit-aaaaa-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    labels = service["metadata"]["labels"]
    assert labels["ray.io/originated-from-cr-name"] == "fruit-aaaaa"
    assert labels["ray.io/originated-from-crd"] == "RayService"
    assert labels["ray.io/serve"] == "fruit-aaaaa-serve"
    # The custom serveService does not apply: the route names this Service.
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {"ray.io/cluster": "fruit-aaaaa", "ray.io/serve": "true"}
    assert service["spec"]["ports"] == [{"name": "serve", "port": 8000}]
    assert RAYSERVICE["spec"]["serveService"]["metadata"] == {"name": "custom"}


def condition(kind: str, status: str = "True") -> dict[str, str]:
    return {"type": kind, "status": status}


def test_a_gateway_is_ready_once_accepted_and_programmed() -> None:
    gateway = build_gateway(RAYSERVICE)
    assert not gateway_ready(gateway)
    assert not gateway_ready(None)
    gateway["status"] = {"conditions": [condition("Accepted")]}
    assert not gateway_ready(gateway)
    gateway["status"]["conditions"].append(condition("Programmed"))
    assert gateway_ready(gateway)
    gateway["status"]["conditions"][1]["status"] = "False"
    assert not gateway_ready(gateway)


def test_a_route_is_ready_once_our_gateway_accepted_it_with_its_references_resolved() -> None:
    gateway = build_gateway(RAYSERVICE)
    route = build_httproute(RAYSERVICE, [Backend(cluster("fruit-aaaaa"), 100)])
    assert not httproute_ready(gateway, route)
    other = {
        "parentRef": {"name": "another"},
        "conditions": [condition("Accepted"), condition("ResolvedRefs")],
    }
    route["status"] = {"parents": [other]}
    assert not httproute_ready(gateway, route)
    ours = copy.deepcopy(other)
    ours["parentRef"] = {"name": "fruit-gateway", "namespace": "shop"}
    ours["conditions"][1]["status"] = "False"
    route["status"]["parents"].append(ours)
    assert not httproute_ready(gateway, route)
    ours["conditions"][1]["status"] = "True"
    assert httproute_ready(gateway, route)


def test_the_weights_are_read_from_the_route_by_service_name() -> None:
    route = build_httproute(
        RAYSERVICE, [Backend(cluster("fruit-aaaaa"), 60), Backend(cluster("fruit-bbbbb"), 40)]
    )
    assert route_weights(route, active="fruit-aaaaa", pending="fruit-bbbbb") == (60, 40)
    assert route_weights(route, active="fruit-aaaaa", pending="") == (60, None)
    assert route_weights(None, active="fruit-aaaaa", pending="fruit-bbbbb") == (None, None)
    # A cluster whose name is a prefix of another's is not mistaken for it.
    assert route_weights(route, active="fruit-a", pending="fruit-bbbbb") == (None, 40)


def test_defaults_added_by_the_api_server_do_not_count_as_differences() -> None:
    route = build_httproute(RAYSERVICE, [Backend(cluster("fruit-aaaaa"), 100)])
    stored = copy.deepcopy(route)
    stored["spec"]["parentRefs"][0].update(group="gateway.networking.k8s.io", kind="Gateway")
    stored["spec"]["rules"][0]["backendRefs"][0].update(group="", kind="Service")
    stored["status"] = {"parents": []}
    assert not httproute_differs(stored, route)
    stored["spec"]["rules"][0]["backendRefs"][0]["weight"] = 90
    assert httproute_differs(stored, route)
    gateway = build_gateway(RAYSERVICE)
    stored_gateway = copy.deepcopy(gateway)
    stored_gateway["spec"]["listeners"][0]["allowedRoutes"] = {"namespaces": {"from": "Same"}}
    assert not gateway_differs(stored_gateway, gateway)
    stored_gateway["spec"]["gatewayClassName"] = "envoy"
    assert gateway_differs(stored_gateway, gateway)
