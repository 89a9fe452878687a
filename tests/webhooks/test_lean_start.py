"""The operator starts without the modules it does not need yet (issue 16).

kubernetes-asyncio's ~900 generated API and model modules are never needed (the client speaks
plain JSON), and the pydantic models of our kinds only once an admission review arrives. Each is
several MiB of an idle budget of 50 MiB, so the real `ray-operator run` is asked, through a
test-only `sitecustomize` (tests/webhooks/module_list/), for its `sys.modules` at readiness and
after a first review.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.webhooks.conftest import load_sample
from tests.webhooks.operator_process import WebhookOperator, operator_with_webhooks, wait_for
from tests.webhooks.reviews import post_review, review_bytes

MODULE_LIST_DIR = Path(__file__).parent / "module_list"

NOT_AT_START = (
    "kubernetes_asyncio.client.models.v1_pod",
    "kubernetes_asyncio.client.api.core_v1_api",
    "pydantic",
    "ray_io.v1",
    "ray_operator_io.v1alpha1.models",
    "ray_io.v1_views",
    # prometheus_client's exposition module and the servers it imports: /metrics is written by
    # our own text format writer (issue 32).
    "prometheus_client.exposition",
    "http.server",
    "wsgiref.simple_server",
)
"""Modules a ready operator has not imported before its first admission review (the TypedDict
views not even after it: they are types for mypy only)."""


def _modules(running: WebhookOperator, listing: Path) -> set[str]:
    listing.unlink(missing_ok=True)
    os.kill(running.pid, signal.SIGUSR1)
    wait_for(listing.exists, "the operator's module list", 10)
    return set(listing.read_text().split())


def test_a_ready_operator_has_loaded_neither_the_generated_client_nor_the_models(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    listing = tmp_path / "modules.txt"
    python_path = os.pathsep.join(
        filter(None, [str(MODULE_LIST_DIR), os.environ.get("PYTHONPATH")])
    )
    env = {**os.environ, "PYTHONPATH": python_path, "MODULE_LIST_FILE": str(listing)}
    log = tmp_path / "operator.log"
    with operator_with_webhooks(control_plane.kubeconfig, namespace, log, env=env) as running:
        at_start = _modules(running, listing)
        status, _, answer = post_review(
            running.webhook_port, review_bytes(load_sample("ray-cluster.mini.yaml"))
        )
        after_review = _modules(running, listing)
    assert "ray_operator.app" in at_start
    assert "kubernetes_asyncio.config.kube_config" in at_start  # credentials: still theirs
    assert [module for module in NOT_AT_START if module in at_start] == []
    assert status == 200
    assert answer["response"]["allowed"]
    assert {"pydantic", "ray_io.v1"} <= after_review  # the first review loads them
    assert "kubernetes_asyncio.client.models.v1_pod" not in after_review
    assert "ray_io.v1_views" not in after_review
