"""Fixtures for the robustness tests: a real operator process per test, and a tidy namespace after.

Each test starts `ray-operator run` (the real command and controllers, no leader election) for
its own namespace. Afterwards every Ray object of the namespace is deleted, the operator gets a
bounded time to delete their Pods, then it is stopped and whatever Pods remain are deleted with
one delete-collection (namespaces are never deleted: their objects are evidence).

These tests run on the control plane without a garbage collector (`control_plane` below): a
hostile cluster's Pods are gone after its deletion only because the operator deleted them, in
bounded batches, and no other controller competes for the API server while health is measured.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.conftest import Kubectl
from tests.robustness.observe import ApiServer, OperatorUnderTest
from tests.webhooks.conftest import wait_until_intercepted

CLUSTER_PODS = "ray.io/cluster"
"""Selects every Pod of every RayCluster (the label exists on all of them)."""
CLEANUP_SECONDS = 60.0
RAY_KINDS = "rayservegraphs,raycronjobs,rayservices,rayjobs,rayclusters"
"""Every kind whose objects end up as a RayCluster's Pods, owners first."""
# The names `ray-operator run` registers its webhook configurations under (URL mode, defaults).
WEBHOOK_CONFIGURATIONS = (
    ("validatingwebhookconfiguration", "ray-operator-validating-webhook-configuration"),
    ("mutatingwebhookconfiguration", "ray-operator-mutating-webhook-configuration"),
)


@pytest.fixture(scope="session")
def control_plane(control_plane_without_gc: LocalControlPlane) -> LocalControlPlane:
    """This package's plane: no garbage collector (see the module docstring)."""
    return control_plane_without_gc


class StartOperator(Protocol):
    """Starts `ray-operator run` for the test's namespace; returns once it is ready."""

    def __call__(
        self,
        *,
        webhooks: bool = False,
        extra_args: tuple[str, ...] = (),
        all_namespaces: bool = False,
        env: Mapping[str, str] | None = None,
        command_prefix: Sequence[str] = (),
    ) -> OperatorUnderTest: ...


@pytest.fixture(scope="session")
def api_server(control_plane: LocalControlPlane) -> Iterator[ApiServer]:
    server = ApiServer(control_plane.kubeconfig)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def start_operator(
    control_plane: LocalControlPlane, namespace: str, kubectl: Kubectl, tmp_path: Path
) -> Iterator[StartOperator]:
    """Start an operator process for this test's namespace, or every namespace with
    `all_namespaces=True` (ready when returned; only this test's namespace is tidied after)."""
    started: list[OperatorUnderTest] = []

    def start(
        *,
        webhooks: bool = False,
        extra_args: tuple[str, ...] = (),
        all_namespaces: bool = False,
        env: Mapping[str, str] | None = None,
        command_prefix: Sequence[str] = (),
    ) -> OperatorUnderTest:
        replica = OperatorUnderTest(
            kubeconfig=control_plane.kubeconfig,
            namespace=None if all_namespaces else namespace,
            log_dir=tmp_path,
            name=f"robust-{len(started)}",
            webhooks=webhooks,
            extra_args=extra_args,
            env=env,
            command_prefix=command_prefix,
        )
        started.append(replica)
        replica.wait_ready()
        return replica

    try:
        yield start
    finally:
        # Owners first in the same call: a RayService or RayServeGraph left behind would make
        # its cluster anew while the wait below counts its Pods.
        kubectl("delete", RAY_KINDS, "--all", "-n", namespace, "--wait=false")
        running = [replica for replica in started if replica.alive()]
        if running:
            _wait_for_no_cluster_pods(kubectl, namespace, timeout=CLEANUP_SECONDS)
        for replica in started:
            replica.stop()
        kubectl("delete", "pods", "-l", CLUSTER_PODS, "-n", namespace, "--wait=false", check=False)


@pytest.fixture
def operator_with_webhooks(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str
) -> Iterator[OperatorUnderTest]:
    """An operator serving its webhooks, registered and intercepting this test's namespace."""
    with serving_webhooks(start_operator, kubectl, namespace) as operator:
        yield operator


@contextlib.contextmanager
def serving_webhooks(
    start_operator: StartOperator,
    kubectl: Kubectl,
    namespace: str,
    *,
    env: Mapping[str, str] | None = None,
) -> Iterator[OperatorUnderTest]:
    """`start_operator(webhooks=True, env=env)`, once its webhooks intercept `namespace`.

    Its configurations intercept every namespace with `failurePolicy: Fail`: they are deleted
    afterwards even if the process could not delete them itself.
    """
    operator = start_operator(webhooks=True, env=env)
    try:
        wait_until_intercepted(kubectl, namespace, timeout=30)
        yield operator
    finally:
        operator.stop()  # first: a running operator would register them again
        for kind, name in WEBHOOK_CONFIGURATIONS:
            kubectl("delete", kind, name, "--ignore-not-found")


def _wait_for_no_cluster_pods(kubectl: Kubectl, namespace: str, *, timeout: float) -> None:
    """Give the operator a bounded time to delete the Pods of deleted clusters (no failure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not kubectl("get", "pods", "-l", CLUSTER_PODS, "-n", namespace, "-o", "name").strip():
            return
        time.sleep(0.25)  # a few Pods go within a reconcile: a second's poll mostly waited
