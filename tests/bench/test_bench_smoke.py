"""The benchmark harness runs end to end with tiny sizes and prints a number for every metric.

Benchmarks are not timed tests: nothing here judges a figure against its target. The smoke run
uses the suite's control plane (`--kubeconfig`), so the operator under test watches only the run's
own namespaces and the run wipes them afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray_operator.bench.operator_process import MetricsSnapshot
from ray_operator.bench.report import Figure, Machine, Report, Target, percentile
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.bench.conftest import run_bench_json

REPO_ROOT = Path(__file__).resolve().parents[2]
METRICS = ("M1", "M2", "M3", "M4", "M5", "M6")
SMOKE_SIZES = (
    "--clusters",
    "3",
    "--trials",
    "5",
    "--scale-steps",
    "1,3",
    "--trial-gap",
    "0.05",
    "--large-trials",
    "1",
    "--fairness-replicas",
    "10",
    "--fairness-trials",
    "5",
    "--workers",
    "2",
    "--idle-seconds",
    "1",
    "--unrelated-pods",
    "20",
    "--quiet-seconds",
    "0.5",
    "--timeout",
    "60",
)


@pytest.fixture(scope="module")
def smoke_run(
    control_plane: LocalControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """One tiny benchmark run against the suite's control plane, as JSON."""
    return run_bench_json(
        "--kubeconfig",
        str(control_plane.kubeconfig),
        *SMOKE_SIZES,
        work_dir=tmp_path_factory.mktemp("bench"),
        timeout=180,
    )


def test_every_metric_is_printed_with_a_number(smoke_run: dict[str, Any]) -> None:
    figures = smoke_run["figures"]
    failed = [f for f in figures if not isinstance(f["value"], int | float)]
    assert not failed, failed
    assert {f["metric"] for f in figures} == set(METRICS)


def test_the_smoke_run_creates_no_duplicate_pods(smoke_run: dict[str, Any]) -> None:
    duplicates = [f for f in smoke_run["figures"] if "duplicate" in f["name"]]
    assert duplicates
    assert all(f["value"] == 0 for f in duplicates), duplicates


def test_the_report_names_the_machine(smoke_run: dict[str, Any]) -> None:
    machine = smoke_run["machine"]
    assert machine["cpus"] >= 1
    assert machine["python"]
    assert machine["kube_apiserver"].startswith("v")


def test_a_target_is_met_or_missed_and_a_figure_without_one_is_neither() -> None:
    assert Figure("M1", "seconds", 2.5, "s", Target("<=", 3, "s")).met is True
    assert Figure("M1", "share", 60, "%", Target(">=", 75, "%")).met is False
    assert Figure("M1", "rate", 900, "objects/s").met is None
    assert Figure("M1", "failed", None, "s", Target("<=", 3, "s")).met is None


def test_percentiles_interpolate_like_numpy() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.99) == pytest.approx(99.01)
    assert percentile([7.0], 0.99) == 7.0


def test_metrics_snapshot_sums_samples_by_label() -> None:
    snapshot = MetricsSnapshot.parse(
        "# HELP ray_operator_api_requests_total Requests.\n"
        "# TYPE ray_operator_api_requests_total counter\n"
        'ray_operator_api_requests_total{code="201",verb="create"} 5.0\n'
        'ray_operator_api_requests_total{code="409",verb="create"} 1.0\n'
        'ray_operator_api_requests_total{code="200",verb="patch"} 2.0\n'
        'ray_operator_cluster_info{name="a",namespace="n",owner_kind="None"} 1.0\n'
    )
    assert snapshot.total("ray_operator_api_requests_total") == 8
    assert snapshot.total("ray_operator_api_requests_total", code="409") == 1
    assert snapshot.by_label("ray_operator_api_requests_total", "verb") == {"create": 6, "patch": 2}


def test_the_table_and_markdown_show_targets_and_verdicts() -> None:
    machine = Machine(
        cpus=2, memory_gib=8.0, cpu_model="cpu", kernel="6", python="3.11", kube_apiserver="v1.34.4"
    )
    report = Report(machine, settings={"clusters": "100"})
    report.add(Figure("M6", "restart: writes", 0, "", Target("==", 0)))
    report.add(Figure("M4", "RSS idle", 93.7, "MB", Target("<=", 50, "MB")))
    assert "met" in report.table()
    assert "MISSED" in report.table()
    markdown = report.markdown()
    assert "| M4 | RSS idle | ≤ 50 MB | 93.7 MB | MISSED |" in markdown
    assert "`nproc` 2" in markdown
