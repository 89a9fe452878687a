"""Specification: an install without the RayServeGraph CRD (the operator upgraded, its new CRD
not applied, as Helm does with CRDs) still manages every ray.io kind; it says which CRD is
missing instead of waiting forever for a RayServeGraph cache that can never list."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_operator.app import served_kinds, watched_kinds
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.settings import Settings
from ray_operator.spec.kinds import (
    CONFIG_MAP,
    LEGACY_RAY_CLUSTER,
    OPTIONAL_KINDS,
    RAY_SERVE_GRAPH,
    WATCHED_KINDS,
)

from tests.conftest import Kubectl, running_control_plane
from tests.robustness.observe import OperatorUnderTest
from tests.runtime.processes import wait_until

SERVE_GRAPH_CRD = "rayservegraphs.ray-operator.io"

MINI_CLUSTER = """
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: mini, namespace: default}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers: [{name: ray-head, image: rayproject/ray:2.52.0}]
"""


@pytest.fixture(scope="module")
def plane_without_serve_graphs() -> Iterator[LocalControlPlane]:
    """A control plane of its own (the shared one keeps every CRD), the RayServeGraph CRD
    removed."""
    with running_control_plane() as plane:
        Kubectl(plane.kubeconfig)("delete", "crd", SERVE_GRAPH_CRD, "--wait=true")
        yield plane


def test_the_operator_runs_every_ray_kind_and_names_the_missing_crd(
    plane_without_serve_graphs: LocalControlPlane, tmp_path: Path
) -> None:
    kubectl = Kubectl(plane_without_serve_graphs.kubeconfig)
    operator = OperatorUnderTest(
        kubeconfig=plane_without_serve_graphs.kubeconfig, namespace=None, log_dir=tmp_path
    )
    try:
        operator.wait_ready()
        kubectl("apply", "-f", "-", input_text=MINI_CLUSTER)

        def head_created() -> bool:
            return bool(kubectl("get", "pods", "-l", "ray.io/cluster=mini", "-o", "name"))

        wait_until(head_created, timeout=30, interval=0.2, what="the head Pod of mini")
        log = operator.log()
    finally:
        operator.stop()
    assert f"CustomResourceDefinition {SERVE_GRAPH_CRD} is not installed" in log
    assert "watch:RayServeGraph" not in log
    assert "watch:ConfigMap" not in log


async def test_served_kinds_drops_only_the_missing_optional_kind_and_its_companions(
    plane_without_serve_graphs: LocalControlPlane, control_plane: LocalControlPlane
) -> None:
    for plane, expected in (
        (control_plane, list(WATCHED_KINDS)),
        (
            plane_without_serve_graphs,
            [kind for kind in WATCHED_KINDS if kind not in (RAY_SERVE_GRAPH, CONFIG_MAP)],
        ),
    ):
        api = await load_api_client(plane.kubeconfig)
        try:
            assert await served_kinds(KubeClient(api, metrics=Metrics()), WATCHED_KINDS) == expected
        finally:
            await api.close()


async def test_legacy_clusters_asked_for_without_their_crd_are_left_out_and_named(
    control_plane: LocalControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    # The shared plane has every CRD but the legacy one, which is installed only on request.
    assert LEGACY_RAY_CLUSTER not in watched_kinds(Settings())
    wanted = watched_kinds(Settings(legacy_clusters=True))
    assert wanted == (*WATCHED_KINDS, LEGACY_RAY_CLUSTER)
    api = await load_api_client(control_plane.kubeconfig)
    try:
        assert await served_kinds(KubeClient(api, metrics=Metrics()), wanted) == list(WATCHED_KINDS)
    finally:
        await api.close()
    assert "rayclusters.cluster.ray.io is not installed" in caplog.text
    assert "apply crd/legacy/" in caplog.text


async def test_an_optional_kind_the_operator_may_not_list_is_left_out_and_named(
    control_plane: LocalControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    # A gate turned on without its kustomize component: the watch would answer 403 forever and
    # keep every cache from syncing. Played by an identity that holds no grant at all.
    wanted = watched_kinds(Settings())
    api = await load_api_client(control_plane.kubeconfig)
    api.set_default_header("Impersonate-User", "system:serviceaccount:default:no-grants")
    try:
        kinds = await served_kinds(KubeClient(api, metrics=Metrics()), wanted)
    finally:
        await api.close()
    left_out = [kind for kind in wanted if kind in OPTIONAL_KINDS]
    assert left_out, "the default kinds include optional ones"
    assert kinds == [
        kind for kind in wanted if kind not in OPTIONAL_KINDS and kind is not CONFIG_MAP
    ]
    for kind in left_out:
        assert (
            f"the operator may not list {kind.api_version} {kind.kind} (Forbidden)" in caplog.text
        )
