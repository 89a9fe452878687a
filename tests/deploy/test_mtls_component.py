"""Specification: config/mtls, the kustomize component of mutual TLS for RayClusters, is off in
config/default (no gate, no grant on cert-manager objects or on reading Secrets); turned on the
documented way it adds `--feature-gates=RayClusterMTLS=true` and grants on cert-manager's Issuers
and Certificates and `get`/`patch` on Secrets, nothing else, and the API server accepts it."""

from __future__ import annotations

from collections.abc import Iterator

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

OPERATOR = service_account_user(DEFAULT_NAMESPACE)
MTLS_NEEDS = [
    *[
        (verb, resource, None)
        for resource in ("issuers.cert-manager.io", "certificates.cert-manager.io")
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    ],
    ("get", "secrets", None),
    ("patch", "secrets", None),
]
# Changes are patches; Secrets are read by name only; cert-manager's other kinds are none of the
# operator's business.
MTLS_NEVER = [
    ("update", "certificates.cert-manager.io", None),
    ("list", "secrets", None),
    ("watch", "secrets", None),
    ("create", "clusterissuers.cert-manager.io", None),
    ("create", "certificaterequests.cert-manager.io", None),
]


@pytest.fixture(scope="module")
def with_mtls(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    """config/default with config/mtls turned on as its comment says."""
    return build(default_with_component(tmp_path_factory.mktemp("mtls"), "mtls"))


def test_the_default_install_has_no_mtls_gate_and_no_grant_for_it() -> None:
    default = build(CONFIG / "default")
    assert not any("RayClusterMTLS" in arg for arg in manager_container(default)["args"])
    groups = {
        group
        for role in of_kind(default, "ClusterRole")
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups") or []
    }
    assert "cert-manager.io" not in groups


def test_the_component_adds_the_gate_and_its_grants(with_mtls: list[Manifest]) -> None:
    args = manager_container(with_mtls)["args"]
    assert parse_run_arguments(args).feature_gates.enabled("RayClusterMTLS")
    binding = the(with_mtls, "ClusterRoleBinding", "ray-operator-mtls")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ray-operator", "namespace": DEFAULT_NAMESPACE}
    ]


def test_the_api_server_accepts_the_install_with_the_component(
    with_mtls: list[Manifest], kubectl: Kubectl
) -> None:
    apply_server_side(kubectl, of_kind(with_mtls, "Namespace"), dry_run=False)
    output = apply_server_side(kubectl, with_mtls, dry_run=True)
    assert output.count("(server dry run)") == len(with_mtls)


@pytest.fixture
def mtls_grants_withdrawn_afterwards(kubectl: Kubectl) -> Iterator[None]:
    """The component's grants go to the operator's real ServiceAccount on the shared plane: left
    bound, they would answer for every later RBAC test (which checks Secrets are out of reach)."""
    yield
    kubectl("delete", "clusterrolebinding,clusterrole", "ray-operator-mtls", "--ignore-not-found")


@pytest.mark.usefixtures("mtls_grants_withdrawn_afterwards")
def test_the_operator_may_manage_cert_manager_objects_and_read_secrets_by_name_only(
    with_mtls: list[Manifest], kubectl: Kubectl, namespace: str
) -> None:
    grant_to_the_operator(kubectl, with_mtls, "ray-operator-mtls", "ray-operator-manager")
    answers = authorized(kubectl, OPERATOR, [*MTLS_NEEDS, *MTLS_NEVER], namespace=namespace)
    assert [case for case, allowed in answers.items() if not allowed] == [
        f"{verb} {resource}" for verb, resource, _ in MTLS_NEVER
    ]
