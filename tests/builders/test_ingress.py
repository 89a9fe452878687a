"""The head's Ingress of `enableIngress`, as KubeRay's `BuildIngressForHeadService` builds it."""

from __future__ import annotations

from typing import Any

from ray_operator.builders.ingress import (
    build_head_ingress,
    head_ingress_name,
    ingress_annotation_patch,
    wants_ingress,
)

from tests.builders.clusters import ray_container, raycluster


def _with_ingress(*, options: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    cluster = raycluster()
    head = cluster["spec"]["headGroupSpec"]
    head["enableIngress"] = True
    if options is not None:
        head["ingressOptions"] = options
    cluster["metadata"].update(metadata)
    return cluster


def test_ingress_is_wanted_only_when_enabled() -> None:
    assert wants_ingress(_with_ingress())
    assert not wants_ingress(raycluster())


def test_one_rule_sends_every_path_to_the_dashboard_of_the_head_service() -> None:
    ingress = build_head_ingress(_with_ingress())
    assert ingress["metadata"]["name"] == "demo-head-ingress"
    assert ingress["spec"] == {
        "rules": [
            {
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {
                                "service": {"name": "demo-head-svc", "port": {"number": 8265}}
                            },
                        }
                    ]
                }
            }
        ]
    }


def test_labels_are_kuberays_and_the_cluster_owns_it() -> None:
    ingress = build_head_ingress(_with_ingress())
    assert ingress["metadata"]["labels"] == {
        "ray.io/cluster": "demo",
        "ray.io/identifier": "demo-head",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "ray-operator",
    }
    owner = ingress["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("RayCluster", "uid-1", True)


def test_cluster_annotations_are_copied_and_the_class_annotation_becomes_the_class() -> None:
    annotations = {
        "kubernetes.io/ingress.class": "nginx",
        "nginx.ingress.kubernetes.io/rewrite-target": "/$1",
    }
    ingress = build_head_ingress(_with_ingress(annotations=annotations))
    assert ingress["metadata"]["annotations"] == {
        "nginx.ingress.kubernetes.io/rewrite-target": "/$1"
    }
    assert ingress["spec"]["ingressClassName"] == "nginx"


def test_no_class_is_chosen_without_the_annotation() -> None:
    assert "ingressClassName" not in build_head_ingress(_with_ingress())["spec"]


def test_ingress_options_set_host_path_path_type_and_tls() -> None:
    tls = [{"hosts": ["ray.example.com"], "secretName": "ray-tls"}]
    options = {"host": "ray.example.com", "path": "/ray", "pathType": "Exact", "tls": tls}
    ingress = build_head_ingress(_with_ingress(options=options))
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "ray.example.com"
    assert rule["http"]["paths"][0]["path"] == "/ray"
    assert rule["http"]["paths"][0]["pathType"] == "Exact"
    assert ingress["spec"]["tls"] == tls


def test_dashboard_port_follows_the_head_containers_named_port() -> None:
    cluster = _with_ingress()
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head["containers"] = [
        ray_container("ray-head", ports=[{"name": "dashboard", "containerPort": 9999}])
    ]
    ingress = build_head_ingress(cluster)
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["port"] == {"number": 9999}


def test_backend_follows_a_renamed_head_service() -> None:
    cluster = _with_ingress()
    cluster["spec"]["headGroupSpec"]["headService"] = {"metadata": {"name": "my-head"}}
    ingress = build_head_ingress(cluster)
    assert (
        ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "my-head"
    )


def test_a_long_cluster_name_is_clipped_as_kuberay_clips_names() -> None:
    cluster = raycluster(name="x" * 60)
    assert head_ingress_name(cluster) == ("x" * 60 + "-head-ingress")[-50:]


def test_changed_cluster_annotations_are_written_and_others_kept() -> None:
    desired = build_head_ingress(_with_ingress(annotations={"a": "1", "b": "2"}))
    existing = {"metadata": {"annotations": {"a": "1", "b": "old", "controller/added": "x"}}}
    assert ingress_annotation_patch(desired, existing) == {"metadata": {"annotations": {"b": "2"}}}
    existing["metadata"]["annotations"]["b"] = "2"
    assert ingress_annotation_patch(desired, existing) is None
