"""Specification: config/legacy, the kustomize component that serves legacy `cluster.ray.io/v1`
RayClusters, is off in config/default; turned on the documented way (un-commenting its line) it
adds the legacy CRD, `--legacy-clusters` and grants on that one group only, and the API server
accepts the result."""

from __future__ import annotations

import pytest

from tests.conftest import Kubectl
from tests.deploy.manager import manager_container, parse_run_arguments
from tests.deploy.manifests import (
    CONFIG,
    DEFAULT_NAMESPACE,
    Manifest,
    apply_server_side,
    authorized,
    build,
    default_with_component,
    grant_to_the_operator,
    of_kind,
    service_account_user,
    the,
)

LEGACY_CRD = "rayclusters.cluster.ray.io"
OPERATOR = service_account_user(DEFAULT_NAMESPACE)

LEGACY_NEEDS = [
    *[(verb, LEGACY_CRD, None) for verb in ("get", "list", "watch", "update", "patch")],
    *[(verb, LEGACY_CRD, "status") for verb in ("get", "update", "patch")],
    ("update", LEGACY_CRD, "finalizers"),
]
# Users create and delete legacy clusters; the operator only serves them.
LEGACY_NEVER = [("create", LEGACY_CRD, None), ("delete", LEGACY_CRD, None)]


@pytest.fixture(scope="module")
def with_legacy(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    """config/default with config/legacy turned on as its comment says."""
    return build(default_with_component(tmp_path_factory.mktemp("legacy"), "legacy"))


def test_the_default_install_serves_no_legacy_clusters() -> None:
    default = build(CONFIG / "default")
    crds = {m["metadata"]["name"] for m in of_kind(default, "CustomResourceDefinition")}
    assert LEGACY_CRD not in crds
    assert "--legacy-clusters" not in manager_container(default)["args"]
    assert not [m for m in default if "legacy" in m["metadata"]["name"]]


def test_the_component_adds_the_crd_the_flag_and_its_grants(with_legacy: list[Manifest]) -> None:
    crds = {m["metadata"]["name"] for m in of_kind(with_legacy, "CustomResourceDefinition")}
    assert LEGACY_CRD in crds
    assert parse_run_arguments(manager_container(with_legacy)["args"]).legacy_clusters is True
    binding = the(with_legacy, "ClusterRoleBinding", "ray-operator-legacy-clusters")
    # config/default's namespace follows into the component's binding.
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ray-operator", "namespace": DEFAULT_NAMESPACE}
    ]
    role = the(with_legacy, "ClusterRole", "ray-operator-legacy-clusters")
    assert {group for rule in role["rules"] for group in rule["apiGroups"]} == {"cluster.ray.io"}


def test_the_api_server_accepts_the_install_with_the_component(
    with_legacy: list[Manifest], kubectl: Kubectl
) -> None:
    apply_server_side(kubectl, of_kind(with_legacy, "Namespace"), dry_run=False)
    output = apply_server_side(kubectl, with_legacy, dry_run=True)
    assert output.count("(server dry run)") == len(with_legacy)


def test_the_operator_may_serve_legacy_clusters_and_nothing_more_of_them(
    with_legacy: list[Manifest], kubectl: Kubectl, namespace: str
) -> None:
    grant_to_the_operator(kubectl, with_legacy, "ray-operator-legacy-clusters")
    answers = authorized(kubectl, OPERATOR, [*LEGACY_NEEDS, *LEGACY_NEVER], namespace=namespace)
    assert [case for case, allowed in answers.items() if not allowed] == [
        f"{verb} {resource}" for verb, resource, _ in LEGACY_NEVER
    ]
