"""Fixtures of the deploy tests: config/default and config/namespaced really applied (RBAC and
all) to the session's control plane, once per module that asks.

What is never applied for real: the CRDs (the session fixture already installed them) and the
webhook configurations — no operator serves them here, and they fail closed, so every other
test's RayClusters would be refused.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.conftest import Kubectl
from tests.deploy.manifests import (
    CONFIG,
    WEBHOOK_CONFIGURATIONS,
    Manifest,
    apply_server_side,
    build,
    ensure_namespace,
)

NOT_APPLIED = {"CustomResourceDefinition", *WEBHOOK_CONFIGURATIONS}


@dataclass(frozen=True)
class TenantInstall:
    """config/namespaced installed into `tenant`; `neighbour` is a namespace it must not touch."""

    tenant: str
    neighbour: str
    manifests: list[Manifest]


@pytest.fixture(scope="module")
def admin(control_plane: LocalControlPlane) -> Kubectl:
    """kubectl with the admin kubeconfig, for module-scoped fixtures."""
    return Kubectl(control_plane.kubeconfig)


@pytest.fixture(scope="module")
def default_install(admin: Kubectl) -> list[Manifest]:
    """config/default applied as a user would (less CRDs and webhook configurations)."""
    manifests = build(CONFIG / "default")
    apply_server_side(admin, [m for m in manifests if m["kind"] not in NOT_APPLIED], dry_run=False)
    return manifests


@pytest.fixture(scope="module")
def tenant_install(admin: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> TenantInstall:
    """config/namespaced installed the documented way: its `namespace:` line set to the tenant's."""
    tenant, neighbour = "deploy-tenant", "deploy-neighbour"
    for name in (tenant, neighbour):
        ensure_namespace(admin, name)
    manifests = build(_namespaced_overlay_for(tenant, tmp_path_factory.mktemp("config")))
    apply_server_side(admin, manifests, dry_run=False)
    return TenantInstall(tenant=tenant, neighbour=neighbour, manifests=manifests)


def _namespaced_overlay_for(namespace: str, directory: Path) -> Path:
    """A copy of config/ whose namespaced overlay installs into `namespace`."""
    copy = directory / "config"
    shutil.copytree(CONFIG, copy)
    kustomization = copy / "namespaced" / "kustomization.yaml"
    text, count = re.subn(
        r"^namespace: .*$", f"namespace: {namespace}", kustomization.read_text(), flags=re.M
    )
    assert count == 1, "config/namespaced/kustomization.yaml must have one `namespace:` line"
    kustomization.write_text(text)
    return copy / "namespaced"
