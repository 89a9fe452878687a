"""Specification: `operator_kubeconfig` gives a kubeconfig that authenticates as the operator's
ServiceAccount (a TokenRequest token, not the admin certificate), so the operator can run
against the control plane with exactly the rights of config/rbac: allowed in its scope,
forbidden elsewhere — through kubectl and through the operator's own API client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.runtime.errors import Forbidden
from ray_operator.spec.kinds import POD, RAY_CLUSTER

from tests.conftest import Kubectl
from tests.deploy.conftest import TenantInstall
from tests.deploy.manifests import DEFAULT_NAMESPACE, operator_kubeconfig, service_account_user


@pytest.fixture
def operator_kubectl(default_install: object, kubectl: Kubectl, tmp_path: Path) -> Kubectl:
    """kubectl as the cluster-wide operator's ServiceAccount."""
    path = operator_kubeconfig(
        kubectl, tmp_path / "operator.kubeconfig", namespace=DEFAULT_NAMESPACE
    )
    return Kubectl(path)


@pytest.fixture
def tenant_kubectl(tenant_install: TenantInstall, kubectl: Kubectl, tmp_path: Path) -> Kubectl:
    """kubectl as the namespaced operator's ServiceAccount."""
    path = operator_kubeconfig(
        kubectl, tmp_path / "tenant.kubeconfig", namespace=tenant_install.tenant
    )
    return Kubectl(path)


def test_operator_kubeconfig_authenticates_as_the_service_account(
    operator_kubectl: Kubectl,
) -> None:
    review = json.loads(operator_kubectl("auth", "whoami", "-o", "json"))
    assert review["status"]["userInfo"]["username"] == service_account_user(DEFAULT_NAMESPACE)
    assert "system:masters" not in review["status"]["userInfo"]["groups"]


def test_operator_kubeconfig_holds_a_bearer_token_readable_only_by_its_owner(
    operator_kubectl: Kubectl,
) -> None:
    assert operator_kubectl.kubeconfig.stat().st_mode & 0o077 == 0
    assert "token: " in operator_kubectl.kubeconfig.read_text()
    assert "client-key-data" not in operator_kubectl.kubeconfig.read_text()


def test_operator_kubeconfig_lists_pods_in_every_namespace_but_no_secrets(
    operator_kubectl: Kubectl, namespace: str
) -> None:
    operator_kubectl("get", "pods", "-n", namespace)
    operator_kubectl("get", "rayclusters", "--all-namespaces")
    refused = operator_kubectl.run("get", "secrets", "-n", namespace)
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr


def test_tenant_kubeconfig_lists_pods_in_its_namespace_only(
    tenant_kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    tenant_kubectl("get", "pods", "-n", tenant_install.tenant)
    for args in (["-n", tenant_install.neighbour], ["--all-namespaces"]):
        refused = tenant_kubectl.run("get", "pods", *args)
        assert refused.returncode != 0
        assert "forbidden" in refused.stderr


async def test_operator_api_client_runs_on_the_tenant_kubeconfig(
    tenant_install: TenantInstall, kubectl: Kubectl, tmp_path: Path
) -> None:
    path = operator_kubeconfig(
        kubectl, tmp_path / "tenant.kubeconfig", namespace=tenant_install.tenant
    )
    api = await load_api_client(path)
    try:
        client = KubeClient(api, metrics=Metrics())
        clusters = await client.list(RAY_CLUSTER, namespace=tenant_install.tenant)
        assert clusters.items == []
        with pytest.raises(Forbidden):
            await client.list(POD, namespace=tenant_install.neighbour)
    finally:
        await api.close()
