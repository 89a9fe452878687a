"""Specification: /metrics is written by our own Prometheus text format writer, byte for byte what
prometheus_client's `generate_latest` writes, so that serving it needs none of the HTTP, WSGI and
ASGI servers that prometheus_client's exposition module imports (0.6 MiB at rest)."""

from __future__ import annotations

import re
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from ray_operator.metrics import Metrics, text_format

HOSTILE_TEXT = st.text(
    alphabet=st.sampled_from(['"', "\\", "\n", "a", "é", "{", "}", "=", ",", " ", "\t", "\u2028"]),
    max_size=12,
)
VALUES = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**60), 2**60)


def without_process_values(text: bytes) -> list[str]:
    """The exposition's lines, the values of the process collector's samples (which change
    between two scrapes) blanked."""
    return [
        re.sub(r" \S+$", " <value>", line) if line.startswith("process_") else line
        for line in text.decode().splitlines()
    ]


def test_every_operator_metric_is_written_as_prometheus_client_writes_it() -> None:
    metrics = Metrics()
    metrics.reconcile_duration_seconds.labels(kind='Ray"Job\\\n').observe(0.02)
    metrics.reconcile_errors_total.labels(kind="RayCluster", error="Conflict").inc()
    metrics.queue_wait_seconds.observe(7.5)
    ours, theirs = text_format(metrics.registry), generate_latest(metrics.registry)
    assert b"ray_operator_" in ours
    assert without_process_values(ours) == without_process_values(theirs)


@settings(max_examples=200, deadline=None)
@given(
    label=HOSTILE_TEXT,
    documentation=HOSTILE_TEXT.map(lambda text: text or "doc"),
    value=VALUES,
    observations=st.lists(st.floats(-1e12, 1e12), max_size=5),
)
def test_any_label_value_help_text_and_number_is_written_as_prometheus_client_writes_it(
    label: str, documentation: str, value: float, observations: list[float]
) -> None:
    registry = CollectorRegistry()
    Counter("requests", documentation, ["path"], registry=registry).labels(label).inc(abs(value))
    Gauge("level", documentation, ["path"], registry=registry).labels(label).set(value)
    histogram = Histogram("latency_seconds", documentation, ["path"], registry=registry)
    for observation in observations:
        histogram.labels(label).observe(observation)
    Info("build", documentation, registry=registry).info({"version": label})
    Enum("phase", documentation, states=["a", "b"], registry=registry).state("b")
    family = GaugeMetricFamily("objects", documentation, labels=["name"])
    family.add_metric([label], value, timestamp=1_700_000_000.123)
    registry.register(StaticCollector(family))
    assert text_format(registry) == generate_latest(registry)


class StaticCollector:
    def __init__(self, family: GaugeMetricFamily) -> None:
        self.family = family

    def collect(self) -> list[GaugeMetricFamily]:
        return [self.family]


def test_the_operators_metrics_load_no_exposition_server() -> None:
    probe = (
        "import sys\n"
        "from ray_operator.lean_imports import defer_unneeded_imports\n"
        "defer_unneeded_imports()\n"
        "from ray_operator.metrics import Metrics\n"
        "Metrics().exposition()\n"
        "print(sorted(name for name in sys.modules if name.startswith(("
        "'prometheus_client.exposition', 'prometheus_client.asgi', 'http.server', 'wsgiref'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "[]"
