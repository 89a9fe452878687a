"""Specification: config/network-policy, the kustomize component of KubeRay's
RayClusterNetworkPolicy gate, is off in config/default (no flag, no rights on NetworkPolicies);
turned on the documented way it adds the gate and grants on NetworkPolicies only — KubeRay's
verbs, nothing more — and the API server accepts the result."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ray_operator.features import RAY_CLUSTER_NETWORK_POLICY

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

NETWORK_POLICIES = "networkpolicies.networking.k8s.io"
OPERATOR = service_account_user(DEFAULT_NAMESPACE)
ROLE = "ray-operator-network-policies"

NEEDS = [(verb, NETWORK_POLICIES, None) for verb in ("get", "list", "watch", "create", "update")]
NEEDS.append(("delete", NETWORK_POLICIES, None))
# Updates are whole-object (resourceVersion-guarded), never patches; no bulk deletes.
NEVER = [("patch", NETWORK_POLICIES, None), ("deletecollection", NETWORK_POLICIES, None)]


@pytest.fixture(scope="module")
def with_component(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    """config/default with config/network-policy turned on as its comment says."""
    return build(
        default_with_component(tmp_path_factory.mktemp("network-policy"), "network-policy")
    )


def test_the_default_install_has_the_gate_off_and_no_rights_on_network_policies() -> None:
    default = build(CONFIG / "default")
    arguments = parse_run_arguments(manager_container(default)["args"])
    assert not arguments.feature_gates.enabled(RAY_CLUSTER_NETWORK_POLICY)
    granted = {
        resource
        for role in of_kind(default, "ClusterRole", "Role")
        for rule in role.get("rules") or ()
        for resource in rule.get("resources") or ()
    }
    assert "networkpolicies" not in granted


def test_the_component_turns_the_gate_on_and_grants_network_policies_only(
    with_component: list[Manifest],
) -> None:
    arguments = parse_run_arguments(manager_container(with_component)["args"])
    assert arguments.feature_gates.enabled(RAY_CLUSTER_NETWORK_POLICY)
    binding = the(with_component, "ClusterRoleBinding", ROLE)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ray-operator", "namespace": DEFAULT_NAMESPACE}
    ]
    role = the(with_component, "ClusterRole", ROLE)
    assert role["rules"] == [
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["networkpolicies"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        }
    ]


def test_the_api_server_accepts_the_install_with_the_component(
    with_component: list[Manifest], kubectl: Kubectl
) -> None:
    apply_server_side(kubectl, of_kind(with_component, "Namespace"), dry_run=False)
    output = apply_server_side(kubectl, with_component, dry_run=True)
    assert output.count("(server dry run)") == len(with_component)


@pytest.fixture
def network_policy_grants_withdrawn_afterwards(kubectl: Kubectl) -> Iterator[None]:
    """The component's grants go to the operator's real ServiceAccount on the shared plane: left
    bound, they would answer for every later RBAC test."""
    yield
    kubectl("delete", "clusterrolebinding,clusterrole", ROLE, "--ignore-not-found")


@pytest.mark.usefixtures("network_policy_grants_withdrawn_afterwards")
def test_the_operator_may_manage_network_policies_with_the_component_and_nothing_more(
    with_component: list[Manifest], kubectl: Kubectl, namespace: str
) -> None:
    grant_to_the_operator(kubectl, with_component, ROLE)
    answers = authorized(kubectl, OPERATOR, [*NEEDS, *NEVER], namespace=namespace)
    assert [case for case, allowed in answers.items() if not allowed] == [
        f"{verb} {resource}" for verb, resource, _ in NEVER
    ]
