"""The operator rides out a kube-apiserver restart: watches resume, nothing is missed, no crash.

Uses a control plane of its own (not the session one), since it stops its API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.conftest import Kubectl, running_control_plane
from tests.runtime.processes import OperatorProcess, wait_until
from tests.runtime.test_operator_process import ray_cluster, reconciled_by

NAMESPACE = "restart"


@pytest.fixture(scope="module")
def own_control_plane() -> Iterator[LocalControlPlane]:
    with running_control_plane() as plane:
        yield plane


def test_watches_resume_after_an_apiserver_restart_and_see_what_changed_meanwhile(
    own_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    kubectl = Kubectl(own_control_plane.kubeconfig)
    kubectl("create", "namespace", NAMESPACE)
    replica = OperatorProcess(
        kubeconfig=own_control_plane.kubeconfig,
        namespace=NAMESPACE,
        replica="steadfast",
        log_dir=tmp_path,
    )
    try:
        wait_until(replica.is_ready, timeout=30, what="ready")
        for name in ("before", "doomed"):
            kubectl("apply", "-n", NAMESPACE, "-f", "-", input_text=ray_cluster(name))
            wait_until(
                lambda name=name: reconciled_by(kubectl, NAMESPACE, name) == "steadfast",
                timeout=15,
                what=f"{name} reconciled",
            )

        own_control_plane.stop_apiserver()
        own_control_plane.start_apiserver()
        # Changed as soon as the API server is back, likely before the operator reconnects.
        kubectl("apply", "-n", NAMESPACE, "-f", "-", input_text=ray_cluster("after"))
        kubectl("delete", "raycluster", "doomed", "-n", NAMESPACE)

        wait_until(
            lambda: reconciled_by(kubectl, NAMESPACE, "after") == "steadfast",
            timeout=30,
            what="the RayCluster created after the restart to be reconciled",
        )
        wait_until(
            lambda: replica.metric("ray_operator_cache_objects", kind="RayCluster") == 2,
            timeout=30,
            what="the deletion during the restart to reach the cache",
        )
        assert replica.alive(), replica.log()
        assert replica.is_ready()
        assert replica.get("/healthz")[0] == 200
        assert replica.metric("ray_operator_watch_restarts_total", kind="RayCluster") >= 1
        # The new API server's window starts after our resume points (the Lease was renewed
        # meanwhile): at least one watcher got 410 Gone and relisted, diffing against its cache.
        assert replica.metric("ray_operator_watch_restarts_total", reason="gone") >= 1
        assert "Traceback" not in replica.log(), replica.log()
    finally:
        replica.stop()
