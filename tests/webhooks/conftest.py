"""One real webhook server for the webhook tests, registered with the real API server.

It runs in the URL mode (`https://127.0.0.1:<port>`, like `make run`) with its self-managed
certificate in a namespace of its own. Its configurations are cluster-scoped, so they intercept
only namespaces carrying `WEBHOOK_TEST_LABEL` (other tests sharing the control plane never meet
them), and they are deleted when the session ends.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.webhooks import WebhookOptions

from tests.conftest import Kubectl
from tests.webhooks.server import WebhookThread, free_port

WEBHOOK_TEST_LABEL = "ray-operator.io/webhook-test"
SAMPLES = Path(__file__).resolve().parents[2] / "samples"
_numbers = itertools.count()


@pytest.fixture(scope="session")
def webhook_server(control_plane: LocalControlPlane) -> Iterator[WebhookThread]:
    """The webhooks, serving and registered, for the whole session."""
    with serving_webhooks(control_plane) as server:
        yield server


@contextlib.contextmanager
def serving_webhooks(
    control_plane: LocalControlPlane, *, limits: ClusterLimits = DEFAULT_LIMITS
) -> Iterator[WebhookThread]:
    """Webhooks with `limits` (and its feature gates), registered for namespaces of their own
    label; their configurations are deleted on exit."""
    kubectl = Kubectl(control_plane.kubeconfig)
    system = f"webhook-system-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", system)
    port = free_port()
    run = uuid.uuid4().hex[:6]
    options = WebhookOptions(
        enabled=True,
        port=port,
        namespace=system,
        url_base=f"https://127.0.0.1:{port}",
        validating_configuration=f"ray-operator-test-{run}-validating",
        mutating_configuration=f"ray-operator-test-{run}-mutating",
        namespace_selector={"matchLabels": {WEBHOOK_TEST_LABEL: run}},
        check_interval=0.5,
        certificate_validity=datetime.timedelta(days=1),
    )
    server = WebhookThread(control_plane.kubeconfig, options, limits=limits).start()
    try:
        yield server
    finally:
        server.stop()  # deletes the configurations (URL mode)
        for kind, name in (
            ("validatingwebhookconfiguration", options.validating_configuration),
            ("mutatingwebhookconfiguration", options.mutating_configuration),
        ):
            kubectl("delete", kind, name, "--ignore-not-found")


@pytest.fixture
def webhook_namespace(kubectl: Kubectl, namespace: str, webhook_server: WebhookThread) -> str:
    """The test's namespace, intercepted by the webhooks (waits until they take effect)."""
    return intercepted(kubectl, namespace, webhook_server)


@pytest.fixture(scope="session")
def kubectl_session(control_plane: LocalControlPlane) -> Kubectl:
    """kubectl for session- and module-scoped fixtures."""
    return Kubectl(control_plane.kubeconfig)


@pytest.fixture(scope="session")
def shared_webhook_namespace(
    control_plane: LocalControlPlane, webhook_server: WebhookThread
) -> str:
    """One intercepted namespace for tests that create nothing in it (refused manifests)."""
    kubectl = Kubectl(control_plane.kubeconfig)
    name = f"webhook-shared-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    return intercepted(kubectl, name, webhook_server)


def intercepted(kubectl: Kubectl, namespace: str, webhook_server: WebhookThread) -> str:
    selector = webhook_server.options.namespace_selector or {}
    [(key, value)] = selector["matchLabels"].items()
    kubectl("label", "namespace", namespace, f"{key}={value}")
    wait_until_intercepted(kubectl, namespace)
    return namespace


def wait_until_intercepted(kubectl: Kubectl, namespace: str, timeout: float = 20.0) -> None:
    """The API server learns of labels and configurations through informers: wait for them."""
    probe = load_sample("ray-cluster.mini.yaml")
    group = probe["spec"]["workerGroupSpecs"][0]
    group["minReplicas"], group["maxReplicas"] = 5, 3  # only the webhook refuses this
    deadline = time.monotonic() + timeout
    while True:
        result = kubectl.run(
            "create",
            "--dry-run=server",
            "-n",
            namespace,
            "-f",
            "-",
            input_text=yaml.safe_dump(probe),
        )
        if result.returncode != 0 and "must be less than or equal to maxReplicas" in result.stderr:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the webhooks never intercepted {namespace}: {result.stderr}")
        time.sleep(0.2)


def load_sample(file_name: str, kind: str | None = None) -> dict[str, Any]:
    """The first Ray object (of `kind`, if given) in samples/<file_name>."""
    for document in yaml.safe_load_all((SAMPLES / file_name).read_text()):
        if document and document["kind"].startswith("Ray") and kind in (None, document["kind"]):
            return dict(document)
    raise LookupError(f"no {kind or 'Ray object'} in {file_name}")


def unique_name(stem: str) -> str:
    return f"{stem}-{next(_numbers)}"
