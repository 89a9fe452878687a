"""Fixtures for the adversarial suite: a tenant attacks, a separate operator process defends.

Each test plays one principal of the threat model (../shared/DESIGN.md, docs/security.md):
a namespace editor (`namespace`, the attacker's namespace, and `other_namespace`, a victim's),
or a caller that can only reach the operator's ports. The operator is `ray-operator run` in its
own process (`start_operator`, shared with tests/robustness), so a crash, a hang or a memory
blow-up shows as what it is, and /healthz and RSS are measured from outside.

The plane has no garbage collector and no other controllers (as in tests/robustness): what the
operator does, and how healthy it stays meanwhile, is all that moves.
"""

from __future__ import annotations

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.conftest import Kubectl
from tests.robustness.conftest import api_server, operator_with_webhooks, start_operator

__all__ = ["api_server", "operator_with_webhooks", "start_operator"]


@pytest.fixture(scope="session")
def control_plane(control_plane_without_gc: LocalControlPlane) -> LocalControlPlane:
    """This package's plane: no garbage collector (see the module docstring)."""
    return control_plane_without_gc


@pytest.fixture
def other_namespace(kubectl: Kubectl, namespace: str) -> str:
    """A second tenant's namespace, beside the attacker's `namespace`."""
    name = f"{namespace[:55]}-v"
    kubectl("create", "namespace", name)
    return name
