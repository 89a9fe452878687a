"""Watching a takeover: a dashboard that never answers, and knowing when the operator is done.

DeadDashboard        every cluster's "dashboard": records each request line, then hangs up
                     without answering (as an unreachable head would, but countable)
wait_until_settled   every custom resource reconciled, then no write for a quiet period
"""

from __future__ import annotations

import http.client
import socketserver
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tests.robustness.observe import OperatorUnderTest
from tests.runtime.processes import wait_until

WRITE_VERBS = frozenset({"create", "update", "patch", "apply", "delete"})
RECONCILE_TOTAL = "ray_operator_reconcile_total"
API_REQUESTS_TOTAL = "ray_operator_api_requests_total"


class DeadDashboard:
    """A TCP server on 127.0.0.1 standing in for every Ray dashboard: it reads a request's first
    line, records it, and closes the connection unanswered."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        lock = threading.Lock()
        recorded = self.requests

        class Handler(socketserver.StreamRequestHandler):
            timeout = 5.0

            def handle(self) -> None:
                try:
                    line = self.rfile.readline(4096).decode(errors="replace").strip()
                except OSError:
                    return
                if line:
                    with lock:
                        recorded.append(line)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> DeadDashboard:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def writes(self) -> list[str]:
        """Request lines that would change something on a Ray head (submit, deploy, stop)."""
        return [line for line in self.requests if not line.startswith(("GET ", "HEAD "))]


@dataclass(frozen=True)
class Settled:
    """What the operator had done when it settled."""

    quiet: bool
    """Whether a quiet period came before the timeout."""
    seconds: float
    """From its start until the last change of a watched object."""
    reconciles: Mapping[str, float]
    """Reconciles by kind."""
    writes: Mapping[str, float]
    """API writes by verb (Events included)."""


def wait_until_settled(
    operator: OperatorUnderTest,
    *,
    expected: Mapping[str, int],
    last_change: Callable[[], float],
    quiet_seconds: float,
    timeout: float,
) -> Settled:
    """Until every kind has had at least `expected[kind]` reconciles and nothing changed for
    `quiet_seconds` (`last_change`: when a watched object last changed, monotonic), or `timeout`
    (then `quiet` is False: the tests say what changed). Events are not watched objects: a
    RayJob waiting for a cluster that does not exist repeats its Warning, as KubeRay's does."""
    started = time.monotonic()
    process = _MetricsReader(operator)

    def every_object_reconciled() -> bool:
        reconciles = process.by_label(RECONCILE_TOTAL, "kind")
        return all(reconciles.get(kind, 0) >= count for kind, count in expected.items())

    wait_until(
        every_object_reconciled, timeout=timeout, interval=0.5, what="every object reconciled"
    )

    def quiet() -> bool:
        return time.monotonic() - max(last_change(), started) >= quiet_seconds

    try:
        wait_until(quiet, timeout=timeout, interval=0.5, what=f"{quiet_seconds}s without a change")
    except AssertionError:
        settled = False
    else:
        settled = True
    return Settled(
        quiet=settled,
        seconds=max(last_change(), started) - started,
        reconciles=process.by_label(RECONCILE_TOTAL, "kind"),
        writes=process.writes(),
    )


class _MetricsReader:
    def __init__(self, operator: OperatorUnderTest) -> None:
        self._operator = operator

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        connection = http.client.HTTPConnection("127.0.0.1", self._operator.port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            body = connection.getresponse().read().decode()
        finally:
            connection.close()
        return [
            (sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(body)
            for sample in family.samples
        ]

    def by_label(self, name: str, label: str) -> dict[str, float]:
        totals: dict[str, float] = {}
        for sample, labels, value in self.samples():
            if sample == name:
                totals[labels[label]] = totals.get(labels[label], 0.0) + value
        return totals

    def writes(self) -> dict[str, float]:
        return {
            verb: count
            for verb, count in self.by_label(API_REQUESTS_TOTAL, "verb").items()
            if verb in WRITE_VERBS
        }
