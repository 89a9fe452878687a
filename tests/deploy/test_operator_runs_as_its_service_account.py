"""Specification: the real operator process runs on nothing but its ServiceAccount's rights
(a token kubeconfig, never admin): it lists and watches every kind it caches, wins its Lease and
reconciles samples/ray-cluster.mini.yaml to `ready`, cluster-wide with config/default's RBAC and
in one namespace with config/namespaced's."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Kubectl
from tests.deploy.conftest import TenantInstall
from tests.deploy.manifests import DEFAULT_NAMESPACE, LEASE_NAME, operator_kubeconfig
from tests.deploy.mini_sample import reconciles_mini_sample
from tests.deploy.process import running_operator


def lease_holder(kubectl: Kubectl, namespace: str) -> str:
    result = kubectl.run(
        "get", "lease", LEASE_NAME, "-n", namespace, "-o", "jsonpath={.spec.holderIdentity}"
    )
    return result.stdout.strip() if result.returncode == 0 else ""


def test_namespaced_operator_syncs_and_leads_with_only_its_namespace_rights(
    tenant_install: TenantInstall, kubectl: Kubectl, tmp_path: Path
) -> None:
    tenant = tenant_install.tenant
    kubeconfig = operator_kubeconfig(kubectl, tmp_path / "kubeconfig", namespace=tenant)
    with running_operator(
        kubeconfig,
        tmp_path / "operator.log",
        f"--namespace={tenant}",
        f"--lease-namespace={tenant}",
        f"--lease-name={LEASE_NAME}",
    ) as operator:
        operator.wait_until(lambda: lease_holder(kubectl, tenant) != "", "Lease held", 30)
        reconciles_mini_sample(kubectl, tenant)


def test_cluster_wide_operator_syncs_and_leads_with_only_its_rbac(
    default_install: object, kubectl: Kubectl, tmp_path: Path, namespace: str
) -> None:
    kubeconfig = operator_kubeconfig(kubectl, tmp_path / "kubeconfig", namespace=DEFAULT_NAMESPACE)
    with running_operator(
        kubeconfig,
        tmp_path / "operator.log",
        f"--lease-namespace={DEFAULT_NAMESPACE}",
        f"--lease-name={LEASE_NAME}",
    ) as operator:
        operator.wait_until(
            lambda: lease_holder(kubectl, DEFAULT_NAMESPACE) != "", "Lease held", 30
        )
        reconciles_mini_sample(kubectl, namespace)
