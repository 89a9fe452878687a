"""Big AdmissionReviews sent to the operator process leave its /healthz answering (finding 7).

Before the fix, a 3.4 MB review took 2.0 s to validate on the event loop and eight at once pushed
/healthz to 7 s. Here eight ~3 MB reviews go at once, over TLS, to the webhook port of a real
`ray-operator run` process (its certificate verified with the caBundle it registered), while
/healthz is probed every 100 ms from a thread of the test process.
"""

from __future__ import annotations

import base64
import concurrent.futures
import http.client
import json
import ssl
import time
from typing import Any

from tests.conftest import Kubectl
from tests.robustness.conftest import WEBHOOK_CONFIGURATIONS
from tests.robustness.manifests import ray_cluster
from tests.robustness.observe import HealthProbe, OperatorUnderTest

CONCURRENT_REVIEWS = 8
GROUPS = 60
ENV_PER_GROUP = 800
REVIEW_TIMEOUT = 30.0  # the most the API server would wait for a webhook


def big_review(uid: str, namespace: str) -> bytes:
    """A ~3 MB AdmissionReview of a valid RayCluster: 60 groups of 800 env vars each."""
    cluster = ray_cluster("big-review")
    template = cluster["spec"]["workerGroupSpecs"][0]
    groups = []
    for index in range(GROUPS):
        group = json.loads(json.dumps(template))
        group["groupName"] = f"group-{index}"
        group["template"]["spec"]["containers"][0]["env"] = [
            {"name": f"VARIABLE_{number}", "value": "x" * 30} for number in range(ENV_PER_GROUP)
        ]
        groups.append(group)
    cluster["spec"]["workerGroupSpecs"] = groups
    cluster["metadata"]["namespace"] = namespace
    request = {
        "uid": uid,
        "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
        "resource": {"group": "ray.io", "version": "v1", "resource": "rayclusters"},
        "operation": "CREATE",
        "name": "big-review",
        "namespace": namespace,
        "object": cluster,
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


def registered_ca(kubectl: Kubectl) -> ssl.SSLContext:
    """Trust what the operator told the API server to trust (its self-managed CA)."""
    kind, name = WEBHOOK_CONFIGURATIONS[0]
    bundle = kubectl("get", kind, name, "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
    return ssl.create_default_context(cadata=base64.b64decode(bundle).decode())


def post_review(port: int, context: ssl.SSLContext, body: bytes) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPSConnection(
        "127.0.0.1", port, timeout=REVIEW_TIMEOUT, context=context
    )
    try:
        connection.request(
            "POST",
            "/validate-ray-io-v1-raycluster",
            body=body,
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_eight_big_reviews_at_once_leave_the_process_healthz_within_a_second(
    operator_with_webhooks: OperatorUnderTest, kubectl: Kubectl, namespace: str
) -> None:
    operator = operator_with_webhooks
    context = registered_ca(kubectl)
    bodies = [big_review(f"uid-{index}", namespace) for index in range(CONCURRENT_REVIEWS)]
    assert all(2_500_000 < len(body) < 4_000_000 for body in bodies)

    with (
        HealthProbe(operator.health_url) as probe,
        concurrent.futures.ThreadPoolExecutor(CONCURRENT_REVIEWS) as pool,
    ):
        started = time.monotonic()
        answers = list(
            pool.map(lambda body: post_review(operator.webhook_port, context, body), bodies)
        )
        elapsed = time.monotonic() - started

    print(
        f"\n{CONCURRENT_REVIEWS} reviews of {len(bodies[0]) / 1e6:.1f} MB answered in "
        f"{elapsed:.1f} s; healthz {probe.summary()}"
    )
    assert all(status == 200 for status, _ in answers)
    assert all(answer["response"]["allowed"] for _, answer in answers), answers[0]
    assert len(probe.latencies) >= 5
    assert not probe.failures, probe.failures[:5]
    assert probe.max_latency < 1.0, probe.summary()
