"""What counts as drift of an owned object, and the merge patch that repairs it (pure)."""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders.services import build_head_service
from ray_operator.planning.drift import owner_description, repair_patch, selector_patch

from tests.builders.clusters import raycluster as minimal_cluster


def _as_the_api_server_returns_it(service: dict[str, Any]) -> dict[str, Any]:
    """The built Service plus what the API server defaults and allocates."""
    served = copy.deepcopy(service)
    served["metadata"].update(
        uid="u-1", resourceVersion="7", labels={**served["metadata"]["labels"], "team": "a"}
    )
    served["spec"].update(
        clusterIP="None",
        clusterIPs=["None"],
        ipFamilies=["IPv4"],
        ipFamilyPolicy="SingleStack",
        sessionAffinity="None",
        internalTrafficPolicy="Cluster",
    )
    for port in served["spec"]["ports"]:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port["port"])
    served["status"] = {"loadBalancer": {}}
    return served


def test_a_service_with_only_server_defaults_and_extra_labels_has_no_drift() -> None:
    desired = build_head_service(minimal_cluster())
    assert repair_patch(desired, _as_the_api_server_returns_it(desired)) is None


def test_an_edited_selector_is_restored_and_an_added_selector_key_removed() -> None:
    desired = build_head_service(minimal_cluster())
    actual = _as_the_api_server_returns_it(desired)
    actual["spec"]["selector"]["ray.io/node-type"] = "worker"
    actual["spec"]["selector"]["extra"] = "x"
    patch = repair_patch(desired, actual)
    assert patch == {"spec": {"selector": {**desired["spec"]["selector"], "extra": None}}}


def test_a_removed_port_replaces_the_port_list_and_a_removed_label_is_put_back() -> None:
    desired = build_head_service(minimal_cluster())
    actual = _as_the_api_server_returns_it(desired)
    del actual["spec"]["ports"][0]
    del actual["metadata"]["labels"]["ray.io/cluster"]
    patch = repair_patch(desired, actual)
    assert patch is not None
    assert patch["spec"] == {"ports": desired["spec"]["ports"]}
    assert patch["metadata"] == {
        "labels": {"ray.io/cluster": desired["metadata"]["labels"]["ray.io/cluster"]}
    }


def test_allocated_and_immutable_fields_are_never_compared() -> None:
    desired = build_head_service(minimal_cluster())
    desired["spec"]["clusterIP"] = "10.0.0.9"
    actual = _as_the_api_server_returns_it(desired)
    actual["spec"]["clusterIP"] = "10.0.0.1"
    assert repair_patch(desired, actual) is None
    binding = {"kind": "RoleBinding", "roleRef": {"name": "a"}, "subjects": [{"name": "s"}]}
    assert repair_patch(binding, {**binding, "roleRef": {"name": "b"}}) is None
    assert repair_patch(binding, {**binding, "subjects": []}) == {"subjects": [{"name": "s"}]}


def test_the_owner_is_named_in_a_conflict_message() -> None:
    owned = {
        "metadata": {
            "ownerReferences": [
                {"kind": "RayCluster", "name": "b", "uid": "u2", "controller": True}
            ]
        }
    }
    assert owner_description(owned) == "belongs to RayCluster b (uid u2)"
    assert owner_description({"metadata": {}}) == "is not owned by any object"


def _service_selecting(selector: dict[str, str]) -> dict[str, object]:
    return {"kind": "Service", "spec": {"selector": selector}}


def test_a_selector_patch_removes_the_keys_we_do_not_select_by() -> None:
    ours = {"ray.io/cluster": "c", "ray.io/node-type": "head"}
    kuberays = {**ours, "app.kubernetes.io/created-by": "kuberay-operator"}
    patch = selector_patch(_service_selecting(ours), _service_selecting(kuberays))
    assert patch == {"spec": {"selector": {"app.kubernetes.io/created-by": None}}}


def test_a_selector_patch_moves_the_service_to_another_cluster() -> None:
    old = {"ray.io/cluster": "c-1", "ray.io/node-type": "head"}
    new = {"ray.io/cluster": "c-2", "ray.io/node-type": "head"}
    patch = selector_patch(_service_selecting(new), _service_selecting(old))
    assert patch == {"spec": {"selector": {"ray.io/cluster": "c-2"}}}


def test_an_exact_selector_needs_no_patch() -> None:
    selector = {"ray.io/cluster": "c", "ray.io/node-type": "head"}
    assert selector_patch(_service_selecting(selector), _service_selecting(dict(selector))) is None
