"""Admission work never stalls the event loop it shares with the probes (issue 12, finding 7).

The real webhook listener (HTTPS, the session's `webhook_server`) and a probes server run on ONE
event loop, as in the operator; and the real `ray-operator run`, whose worker pool has not started
yet. Before, a 3.4 MB AdmissionReview took 2.0 s to validate on that loop and eight at once pushed
/healthz to 7 s; now reviews above `INLINE_REVIEW_BYTES` are answered in worker processes
(started by the first of them), and /healthz must answer every poll within a second while eight
~3 MB reviews are being answered, the pool's cold start included. The listener's read limits
(header and body timeouts, the 7 MiB cap) are checked here at their real defaults, over TLS.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.server import Heartbeat, probe_routes, serve
from ray_operator.webhooks.handlers import MAX_REVIEW_BYTES, REVIEW_READ_LIMITS

from tests.conftest import Kubectl
from tests.webhooks.conftest import load_sample
from tests.webhooks.operator_process import operator_with_webhooks
from tests.webhooks.reviews import insecure_context, post_review
from tests.webhooks.server import WebhookThread, free_port

CONCURRENT_REVIEWS = 8
SLACK = 3.0


def big_review(uid: str, *, group_count: int = 60) -> bytes:
    """An AdmissionReview of a valid RayCluster of `group_count` worker groups of 800 env vars
    each (~3 MB for 60)."""
    cluster = load_sample("ray-cluster.mini.yaml")
    cluster["metadata"]["namespace"] = "default"
    template = cluster["spec"]["workerGroupSpecs"][0]
    groups = []
    for index in range(group_count):
        group = copy.deepcopy(template)
        group["groupName"] = f"group-{index}"
        group["template"]["spec"]["containers"][0]["env"] = [
            {"name": f"VARIABLE_{number}", "value": "x" * 30} for number in range(800)
        ]
        groups.append(group)
    cluster["spec"]["workerGroupSpecs"] = groups
    request = {
        "uid": uid,
        "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
        "operation": "CREATE",
        "name": cluster["metadata"]["name"],
        "namespace": "default",
        "object": cluster,
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


@pytest.fixture(scope="module")
def probes_beside_webhooks(webhook_server: WebhookThread) -> Iterator[int]:
    """A /healthz server on the webhooks' own event loop; its port."""
    port = free_port()
    tasks: list[asyncio.Task[Any]] = []

    async def start() -> None:
        heartbeat = Heartbeat()
        routes = probe_routes(heartbeat=heartbeat, synced=list)
        tasks.append(asyncio.create_task(heartbeat.run()))
        tasks.append(asyncio.create_task(serve([(f"127.0.0.1:{port}", routes, "--health-addr")])))

    async def stop() -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    webhook_server.call(start())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            break
        time.sleep(0.05)
    try:
        yield port
    finally:
        webhook_server.call(stop())


def healthz_seconds(port: int) -> float:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        assert response.status == 200
    finally:
        connection.close()
    return time.monotonic() - started


def test_eight_big_reviews_at_once_leave_healthz_answering_within_a_second(
    webhook_server: WebhookThread, probes_beside_webhooks: int
) -> None:
    answers, latencies = big_reviews_under_healthz_polls(
        webhook_server.options.port, probes_beside_webhooks
    )
    assert all(status == 200 for status, _, _ in answers)
    assert all(answer["response"]["allowed"] for _, _, answer in answers)
    assert len(latencies) >= 5
    assert max(latencies) < 1.0


def test_eight_big_reviews_on_an_operator_without_workers_leave_healthz_within_a_second(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    log = tmp_path / "operator.log"
    with operator_with_webhooks(control_plane.kubeconfig, namespace, log) as running:
        assert running.child_pids() == []  # the pool starts with the first big review
        answers, latencies = big_reviews_under_healthz_polls(
            running.webhook_port, running.health_port
        )
        assert running.child_pids() != []
    assert all(status == 200 for status, _, _ in answers)
    assert all(answer["response"]["allowed"] for _, _, answer in answers)
    assert len(latencies) >= 5
    assert max(latencies) < 1.0


def test_a_big_raycluster_is_admitted_through_the_api_server_by_an_operator_without_workers(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    cluster = json.loads(big_review("uid", group_count=40))["request"]["object"]
    cluster["metadata"]["namespace"] = namespace
    manifest = json.dumps(cluster)
    kubectl = Kubectl(control_plane.kubeconfig)
    log = tmp_path / "operator.log"
    with operator_with_webhooks(control_plane.kubeconfig, namespace, log) as running:
        assert running.child_pids() == []
        started = time.monotonic()
        # Mutating then validating webhook, each within the registered timeoutSeconds (5 s):
        # the first pays for the worker's start.
        result = kubectl.run("create", "--dry-run=server", "-f", "-", input_text=manifest)
        seconds = time.monotonic() - started
        assert running.child_pids() != []
    print(f"\na {len(manifest) / 1e6:.1f} MB RayCluster admitted on a cold pool in {seconds:.1f}s")
    assert result.returncode == 0, result.stderr[-2000:]


def big_reviews_under_healthz_polls(
    webhook_port: int, health_port: int
) -> tuple[list[tuple[int, float, dict[str, Any]]], list[float]]:
    """Post `CONCURRENT_REVIEWS` big reviews at once while polling /healthz: the answers
    (status, seconds, review) and the /healthz latencies (the figures printed for the record)."""
    bodies = [big_review(f"uid-{index}") for index in range(CONCURRENT_REVIEWS)]
    assert all(2_500_000 < len(body) < 4_000_000 for body in bodies)
    latencies: list[float] = []
    stop = threading.Event()

    def poll_healthz() -> None:
        while not stop.is_set():
            latencies.append(healthz_seconds(health_port))
            time.sleep(0.05)

    poller = threading.Thread(target=poll_healthz)
    poller.start()
    started = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(CONCURRENT_REVIEWS) as pool:
            answers = list(pool.map(lambda body: post_review(webhook_port, body), bodies))
    finally:
        stop.set()
        poller.join()
    elapsed = time.monotonic() - started
    review_seconds = sorted(seconds for _, seconds, _ in answers)
    print(  # the figures for the record (pytest -s)
        f"\n{CONCURRENT_REVIEWS} reviews of {len(bodies[0]) / 1e6:.1f} MB: all answered in "
        f"{elapsed:.1f}s (each {review_seconds[0]:.1f}-{review_seconds[-1]:.1f}s); /healthz "
        f"{len(latencies)} polls, max {max(latencies) * 1000:.0f} ms, "
        f"median {sorted(latencies)[len(latencies) // 2] * 1000:.0f} ms"
    )
    return answers, latencies


def test_a_review_over_the_cap_is_refused_unread(webhook_server: WebhookThread) -> None:
    connection = http.client.HTTPSConnection(
        "127.0.0.1", webhook_server.options.port, timeout=10, context=insecure_context()
    )
    try:
        connection.putrequest("POST", "/validate-ray-io-v1-raycluster")
        connection.putheader("Content-Length", str(MAX_REVIEW_BYTES + 1))
        connection.endheaders()
        assert connection.getresponse().status == 413
    finally:
        connection.close()


def test_a_tls_client_dripping_its_headers_is_closed_after_the_header_timeout(
    webhook_server: WebhookThread,
) -> None:
    raw = socket.create_connection(("127.0.0.1", webhook_server.options.port))
    with insecure_context().wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        sock.settimeout(0.2)
        started = time.monotonic()
        request = b"POST /validate-ray-io-v1-raycluster HTTP/1.1\r\nHost: x\r\nX-Slow: " + (
            b"a" * 10_000
        )
        closed_after = None
        for byte in request:
            with contextlib.suppress(OSError):
                sock.send(bytes([byte]))
            try:
                if sock.recv(1) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except OSError:
                closed_after = time.monotonic() - started
                break
            if time.monotonic() - started > REVIEW_READ_LIMITS.header_seconds + 2 * SLACK:
                break
    assert closed_after is not None, "the dripping connection was never closed"
    assert closed_after < REVIEW_READ_LIMITS.header_seconds + SLACK
