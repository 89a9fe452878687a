"""Drift repair of what KubeRay made: a takeover writes nothing but what a real difference needs.

Against the objects KubeRay's own operator created for its samples (`kuberay-created/`): the only
patch is the head Service's selector losing `created-by=kuberay-operator` (ours does not require
either operator's value, so a head Pod we create later is selected); `created-by` is never a
reason to write, and labels KubeRay left off are not added.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.builders.rbac import (
    build_autoscaler_role,
    build_autoscaler_role_binding,
    build_autoscaler_service_account,
)
from ray_operator.builders.services import build_head_service, build_headless_service
from ray_operator.planning.drift import repair_patch

from tests.takeover.staging import fixture_files, load_fixture

CREATED_BY = "app.kubernetes.io/created-by"


def _cluster_and_objects(file_name: str) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
    objects = load_fixture(file_name)
    [cluster] = [
        obj
        for obj in objects
        if obj["kind"] == "RayCluster" and not obj["metadata"].get("ownerReferences")
    ] or [obj for obj in objects if obj["kind"] == "RayCluster"]
    uid = "uid-of-the-cluster"
    cluster["metadata"]["uid"] = uid
    owned = {}
    for obj in objects:
        references = obj["metadata"].get("ownerReferences") or ()
        if any(ref["name"] == cluster["metadata"]["name"] for ref in references):
            for ref in references:
                ref["uid"] = uid
            owned[(obj["kind"], obj["metadata"]["name"])] = obj
    return cluster, owned


def _files_with(kind: str, name_suffix: str = "") -> list[str]:
    return [
        file_name
        for file_name in fixture_files()
        if any(
            obj["kind"] == kind
            and obj["metadata"]["name"].endswith(name_suffix)
            and any(r["kind"] == "RayCluster" for r in obj["metadata"].get("ownerReferences", ()))
            for obj in load_fixture(file_name)
        )
    ]


@pytest.mark.parametrize("file_name", _files_with("Service", "-head-svc"))
def test_kuberays_head_service_only_loses_created_by_from_its_selector(file_name: str) -> None:
    cluster, owned = _cluster_and_objects(file_name)
    desired = build_head_service(cluster)
    existing = owned[("Service", desired["metadata"]["name"])]
    _assert_only_created_by_leaves_the_selector(repair_patch(desired, existing), existing)


@pytest.mark.parametrize("file_name", _files_with("Service", "-headless"))
def test_kuberays_headless_worker_service_is_left_as_it_is(file_name: str) -> None:
    cluster, owned = _cluster_and_objects(file_name)
    desired = build_headless_service(cluster)
    existing = owned[("Service", desired["metadata"]["name"])]
    # It carries only `ray.io/headless-worker-svc`: ours adds `ray.io/cluster` and `created-by`.
    assert set(existing["metadata"]["labels"]) < set(desired["metadata"]["labels"])
    assert repair_patch(desired, existing) is None


@pytest.mark.parametrize("file_name", _files_with("Role"))
def test_kuberays_autoscaler_rbac_is_left_as_it_is(file_name: str) -> None:
    cluster, owned = _cluster_and_objects(file_name)
    for build in (
        build_autoscaler_service_account,
        build_autoscaler_role,
        build_autoscaler_role_binding,
    ):
        desired = build(cluster)
        existing = owned[(desired["kind"], desired["metadata"]["name"])]
        assert existing["metadata"]["labels"][CREATED_BY] == "kuberay-operator"
        assert repair_patch(desired, existing) is None, desired["kind"]


def test_a_head_service_whose_ports_kuberay_ordered_differently_has_no_drift() -> None:
    cluster, owned = _cluster_and_objects("ray-cluster.custom-head-service.yaml")
    desired = build_head_service(cluster)
    existing = owned[("Service", desired["metadata"]["name"])]
    names = [port["name"] for port in existing["spec"]["ports"]]
    assert names != sorted(names)  # KubeRay appends the defaults in its own order
    _assert_only_created_by_leaves_the_selector(repair_patch(desired, existing), existing)


def test_a_changed_port_is_still_restored_whatever_the_order() -> None:
    cluster, owned = _cluster_and_objects("ray-cluster.custom-head-service.yaml")
    desired = build_head_service(cluster)
    existing = copy.deepcopy(owned[("Service", desired["metadata"]["name"])])
    existing["spec"]["selector"].pop(CREATED_BY)
    dashboard = next(p for p in existing["spec"]["ports"] if p["name"] == "dashboard")
    dashboard["port"] = 9999
    patch = repair_patch(desired, existing)
    assert patch is not None
    assert {p["name"]: p["port"] for p in patch["spec"]["ports"]}["dashboard"] == 8265


def test_a_label_of_ours_that_someone_changed_is_restored_but_created_by_never() -> None:
    cluster, _ = _cluster_and_objects("ray-cluster.sample.yaml")
    desired = build_head_service(cluster)
    ours = copy.deepcopy(desired)
    ours["metadata"]["labels"].update({"ray.io/node-type": "worker", CREATED_BY: "someone"})
    assert repair_patch(desired, ours) == {"metadata": {"labels": {"ray.io/node-type": "head"}}}
    del ours["metadata"]["labels"][CREATED_BY]
    assert repair_patch(desired, ours) == {"metadata": {"labels": {"ray.io/node-type": "head"}}}


def test_a_label_we_set_that_was_removed_from_our_object_is_restored() -> None:
    cluster, _ = _cluster_and_objects("ray-cluster.sample.yaml")
    desired = build_head_service(cluster)
    ours = copy.deepcopy(desired)
    del ours["metadata"]["labels"]["ray.io/node-type"]
    assert repair_patch(desired, ours) == {"metadata": {"labels": {"ray.io/node-type": "head"}}}


def _assert_only_created_by_leaves_the_selector(
    patch: dict[str, Any] | None, existing: dict[str, Any]
) -> None:
    """`patch` touches only the selector, and merged leaves it as KubeRay's minus `created-by`."""
    assert patch is not None
    assert list(patch) == ["spec"]
    assert list(patch["spec"]) == ["selector"]
    merged = {**existing["spec"]["selector"], **patch["spec"]["selector"]}
    kuberays = dict(existing["spec"]["selector"])
    assert kuberays.pop(CREATED_BY) == "kuberay-operator"
    assert {key: value for key, value in merged.items() if value is not None} == kuberays


def test_a_label_we_find_services_by_is_restored_even_on_kuberays() -> None:
    """Without `ray.io/node-type` KubeRay's head Service would fall out of our cache: every
    reconcile would try to create it and get a 409."""
    cluster, owned = _cluster_and_objects("ray-cluster.sample.yaml")
    desired = build_head_service(cluster)
    kuberays = copy.deepcopy(owned[("Service", desired["metadata"]["name"])])
    kuberays["spec"]["selector"].pop(CREATED_BY)
    del kuberays["metadata"]["labels"]["ray.io/node-type"]
    assert repair_patch(desired, kuberays) == {"metadata": {"labels": {"ray.io/node-type": "head"}}}
