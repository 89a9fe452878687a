"""AdmissionReviews for the webhook tests: a RayCluster's review as bytes, sent straight to the
webhook server past the API server (a TLS context that skips the certificate, tested elsewhere; a
POST that times the answer), and the process ids of the review worker pool."""

from __future__ import annotations

import http.client
import json
import ssl
import time
from typing import Any

from ray_operator.webhooks.review import ADMISSION_KINDS
from ray_operator.webhooks.workers import ReviewWorkers


def insecure_context() -> ssl.SSLContext:
    # The certificate is the webhook's own, tested elsewhere; here only the load matters.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def post_review(port: int, body: bytes) -> tuple[int, float, dict[str, Any]]:
    started = time.monotonic()
    connection = http.client.HTTPSConnection(
        "127.0.0.1", port, timeout=120, context=insecure_context()
    )
    try:
        connection.request(
            "POST",
            "/validate-ray-io-v1-raycluster",
            body=body,
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        answer = response.read()
    finally:
        connection.close()
    return response.status, time.monotonic() - started, json.loads(answer)


RAYCLUSTER = ADMISSION_KINDS[0]


def review_bytes(cluster: dict[str, Any]) -> bytes:
    """The AdmissionReview of creating `cluster`, as the API server sends it."""
    request = {"uid": "u-1", "kind": {"kind": "RayCluster"}, "operation": "CREATE"}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {**request, "object": cluster},
    }
    return json.dumps(review).encode()


def pool_pids(workers: ReviewWorkers) -> list[int]:
    """The process ids of the pool's live worker processes."""
    pool = workers._current_pool()
    return [process.pid for process in pool._processes.values() if process.pid is not None]
