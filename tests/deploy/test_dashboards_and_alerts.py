"""Specification: the Grafana dashboard (config/grafana/ray-operator.json) and the Prometheus
objects (config/prometheus: ServiceMonitor, PodMonitor, alert rules) show and alert on what the
operator really serves. Every metric a panel, a template variable or an alert rule names is in a
live operator's /metrics while a RayCluster, a RayJob, a RayCronJob and a RayServeGraph exist; the
dashboard is valid against Grafana's own dashboard schema (the Grafana Foundation SDK's generated
Go types, decoded strictly, built from the Go module proxy: a Grafana server is AGPL and far too
heavy to build here); the rules pass `promtool check rules` and `promtool test rules`. The
PodMonitor selects the Ray Pods and port our builders make; the `release` label is settable in
kustomize and in the chart, which ships the same files."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_operator.builders.containers import ensure_metrics_port
from ray_operator.localcluster.binaries import ensure_go_program, ensure_promtool
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.runtime.queue import WorkQueue
from ray_operator.spec import kuberay_names as names

from tests.conftest import Kubectl
from tests.deploy.helm import CHART, helm, render
from tests.deploy.manifests import CONFIG, build, of_kind, the
from tests.webhooks.conftest import load_sample, wait_until_intercepted
from tests.webhooks.operator_process import WebhookOperator, operator_with_webhooks

DASHBOARD = CONFIG / "grafana" / "ray-operator.json"
RULES = CONFIG / "prometheus" / "rules.yaml"
SCHEMA_CHECK_SOURCE = Path(__file__).parent / "grafana_schema"
RAY_KINDS = "rayservegraphs,raycronjobs,rayservices,rayjobs,rayclusters"
# Recorded by Prometheus itself for every target, never served by one.
SYNTHETIC = {"up"}
# Served (declared in /metrics) but with samples only after some history: a cluster whose Pods
# all became ready, a RayJob that ended, a RayCronJob that ran on schedule or succeeded, a watch
# that expired or broke (a minute's run may see none).
NEEDS_HISTORY = {
    "ray_operator_watch_restarts_total",
    "ray_operator_cluster_provisioned_duration_seconds",
    "ray_operator_job_execution_duration_seconds",
    "ray_operator_cronjob_last_schedule_timestamp_seconds",
    "ray_operator_cronjob_last_successful_timestamp_seconds",
}

# --- reading metric names out of PromQL ---------------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_LABEL_LISTS = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_OFFSETS = re.compile(r"\boffset\s+-?[\w$]+", re.IGNORECASE)
_IDENTIFIERS = re.compile(r"(?<![\w$.:])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "inf", "nan", "offset", "by", "without", "on"}


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are neither functions nor
    aggregations (followed by `(`), keywords, label names (in matchers and by/on lists), nor in
    strings, ranges or Grafana's `$variables`."""
    text = _STRINGS.sub('""', expression)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _LABEL_LISTS.sub(" ", text)
    text = _OFFSETS.sub(" ", text)
    return {name for name in _IDENTIFIERS.findall(text) if name.lower() not in _KEYWORDS}


def variable_metric_names(variable: dict[str, Any]) -> set[str]:
    """The metric a Grafana query variable reads (`label_values(metric, label)` or a query)."""
    query = variable.get("query")
    text = query.get("query", "") if isinstance(query, dict) else str(query or "")
    found = re.fullmatch(r"\s*label_values\(\s*(.*?)\s*,\s*[\w]+\s*\)\s*", text)
    return metric_names(found.group(1) if found else text)


def test_metric_names_are_read_from_promql_without_functions_labels_or_keywords() -> None:
    expression = (
        'histogram_quantile(0.99, sum by (kind, le) (rate(a_bucket{kind=~"x|y", le!="1"}'
        "[$__rate_interval]))) / on (kind) group_left(le) b_total offset 5m"
        ' or absent(up{job="c"} == 1) unless count without (pod) (d:recorded)'
        " and time() - e > bool 600"
    )
    assert metric_names(expression) == {"a_bucket", "b_total", "up", "d:recorded", "e"}
    assert variable_metric_names({"query": {"query": "label_values(f{x='1'}, namespace)"}}) == {"f"}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", ())


def dashboard_expressions() -> dict[str, set[str]]:
    """Metric names by where they are used: `panel <title>` or `variable <name>`."""
    board = dashboard()
    used = {}
    for panel in panels(board):
        for target in panel.get("targets", ()):
            used[f"panel {panel['title']!r} {target['refId']}"] = metric_names(target["expr"])
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            used[f"variable {variable['name']}"] = variable_metric_names(variable)
    return used


def rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load(RULES.read_text())
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def alert_expressions() -> dict[str, set[str]]:
    return {f"alert {rule['alert']}": metric_names(rule["expr"]) for rule in rules()}


# --- the names are served -------------------------------------------------------------------


def exposition_names(text: str) -> tuple[set[str], set[str]]:
    """(declared, sampled): the names /metrics declares (its TYPE lines, with the sample names
    each type implies) and the names it has samples of."""
    declared, sampled = set(), set()
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
    }
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            base = name.removesuffix("_total") if kind == "counter" else name
            declared |= {base, *(base + suffix for suffix in suffixes.get(kind, ()))}
        elif line and not line.startswith("#"):
            sampled.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return declared, sampled


@pytest.fixture(scope="module")
def scraped(
    control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """/metrics of `ray-operator run` (webhooks on) once a RayCluster, a RayJob, a RayService, a
    RayCronJob and a RayServeGraph exist and were reconciled, after a refused admission review."""
    kubectl = Kubectl(control_plane.kubeconfig)
    namespace = "dashboards-and-alerts"
    kubectl("create", "namespace", namespace)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    try:
        with operator_with_webhooks(control_plane.kubeconfig, namespace, log) as operator:
            wait_until_intercepted(kubectl, namespace, timeout=30)  # a denied review
            for document in observed_objects():
                kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(document))
            try:
                yield wait_for_every_object(operator)
            finally:
                # While the operator runs: it removes its finalizers (else the namespace would
                # stay Terminating), owners first.
                kubectl(
                    "delete", RAY_KINDS, "--all", "-n", namespace, "--timeout=60s", check=False
                )  # fmt: skip
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def observed_objects() -> list[dict[str, Any]]:
    """A RayCluster, a RayJob, a RayService, a RayCronJob that runs every minute, and a
    RayServeGraph whose document the operator refuses to fetch (a loopback URL: no server is
    needed for an outcome)."""
    cluster = load_sample("ray-cluster.mini.yaml", "RayCluster")
    job = load_sample("ray-job.sample.yaml", "RayJob")
    service = load_sample("ray-service.sample.yaml", "RayService")
    cron_job = load_sample("ray-cronjob.sample.yaml", "RayCronJob")
    cron_job["spec"]["schedule"] = "* * * * *"
    graph = load_sample("ray-serve-graph.sample.yaml", "RayServeGraph")
    graph["spec"]["source"] = {"url": "https://127.0.0.1:9/graph.pb", "timeoutSeconds": 5}
    return [cluster, job, service, cron_job, graph]


def wait_for_every_object(operator: WebhookOperator, timeout: float = 90.0) -> str:
    """/metrics once it has samples of every metric the dashboard and the rules use (but those
    that need history), or as it is at `timeout` (the tests then say what is missing)."""
    used = {*_union(dashboard_expressions().values()), *_union(alert_expressions().values())}
    wanted = used - NEEDS_HISTORY - SYNTHETIC
    url = f"{operator.operator.health_url}/metrics"
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        if wanted <= exposition_names(text)[1] or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def _union(sets: Iterable[set[str]]) -> set[str]:
    return set().union(*sets)


def unserved(used: dict[str, set[str]], served: set[str]) -> dict[str, list[str]]:
    missing = {where: sorted(found - served - SYNTHETIC) for where, found in used.items()}
    return {where: names for where, names in missing.items() if names}


def test_every_metric_the_dashboard_names_is_served(scraped: str) -> None:
    declared, sampled = exposition_names(scraped)
    used = dashboard_expressions()
    assert sum(map(len, used.values())) > 50  # the parser found the panels' metrics
    assert unserved(used, declared) == {}
    assert unserved(used, sampled | NEEDS_HISTORY) == {}


def test_every_metric_the_alert_rules_name_is_served(scraped: str) -> None:
    declared, sampled = exposition_names(scraped)
    used = alert_expressions()
    assert len(used) >= 6
    assert all(used.values())
    assert unserved(used, declared) == {}
    assert unserved(used, sampled | NEEDS_HISTORY) == {}


def test_the_operator_serves_its_process_rss_and_cpu_and_each_review_answer(scraped: str) -> None:
    _, sampled = exposition_names(scraped)
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total"} <= sampled
    # The probe of `wait_until_intercepted` was refused; every object applied was admitted.
    assert review_count(scraped, "validate", "RayCluster", "denied") >= 1
    for kind in ("RayCluster", "RayJob", "RayService", "RayCronJob", "RayServeGraph"):
        for webhook in ("validate", "mutate"):
            assert review_count(scraped, webhook, kind, "allowed") >= 1, (webhook, kind)


def review_count(text: str, webhook: str, kind: str, result: str) -> float:
    labels = f'kind="{kind}",result="{result}",webhook="{webhook}"'
    found = re.search(rf"^ray_operator_admission_reviews_total\{{{labels}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


# --- the dashboard is Grafana's -------------------------------------------------------------


@functools.cache
def schema_check() -> Path:
    """The dashboard checker (tests/deploy/grafana_schema), built once per version of it."""
    return ensure_go_program(SCHEMA_CHECK_SOURCE, "grafana-dashboard-check")


def schema_errors(path: Path) -> str:
    result = subprocess.run(
        [str(schema_check()), str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


def test_dashboard_is_valid_against_grafanas_dashboard_schema() -> None:
    assert schema_errors(DASHBOARD) == ""


def test_the_schema_check_refuses_an_unknown_field_and_a_wrong_type(tmp_path: Path) -> None:
    board = dashboard()
    board["panels"][1]["descripton"] = "a misspelt description"
    broken = tmp_path / "broken.json"
    board["panels"][2]["options"]["reduceOptions"]["calcs"] = "lastNotNull"  # not a list
    broken.write_text(json.dumps(board))
    errors = schema_errors(broken)
    assert "unexpected field 'descripton'" in errors
    assert "reduceOptions" in errors


def test_every_panel_queries_the_datasource_variable_as_grafana_exports_it() -> None:
    board = dashboard()
    (source,) = (v for v in board["templating"]["list"] if v["type"] == "datasource")
    assert (source["name"], source["query"]) == ("datasource", "prometheus")
    expected = {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"] == expected, panel["title"]
            assert all(t["datasource"] == expected for t in panel["targets"]), panel["title"]
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))


# --- the alert rules are Prometheus's ----------------------------------------------------------


@functools.cache
def promtool() -> Path:
    return ensure_promtool()


def rule_groups(tmp_path: Path) -> Path:
    """rules.yaml's groups as a plain Prometheus rule file (what the Prometheus Operator loads)."""
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": yaml.safe_load(RULES.read_text())["spec"]["groups"]}))
    return path


def test_alert_rules_pass_promtool_check_rules(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(promtool()), "check", "rules", str(rule_groups(tmp_path))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_cluster_whose_head_is_not_ready_for_15_minutes_fires_its_alert(tmp_path: Path) -> None:
    head = 'ray_operator_cluster_condition{namespace="a",name="c",type="HeadPodReady",status="%s"}'
    state = 'ray_operator_cluster_state{namespace="a",name="%s",state="%s"}'
    input_series = [
        {"series": head % "False", "values": "1x30"},
        {"series": state % ("c", "ready"), "values": "1x30"},
        # Suspended: no head on purpose, never alerted on.
        {"series": state % ("s", "suspended"), "values": "1x30"},
        {"series": head.replace('"c"', '"s"') % "False", "values": "1x30"},
    ]
    fired = {
        "summary": "RayCluster a/c is not ready for 15 minutes.",
        "description": _annotation("RayClusterNotReady", "description", namespace="a", name="c"),
    }
    assert_promtool_unit_test_passes(tmp_path, input_series, [
        {"eval_time": "10m", "alertname": "RayClusterNotReady", "exp_alerts": []},
        {"eval_time": "20m", "alertname": "RayClusterNotReady", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "a", "name": "c"},
            "exp_annotations": fired,
        }]},
    ])  # fmt: skip


def test_pods_waiting_for_10_minutes_fire_their_alert_and_recovered_ones_do_not(
    tmp_path: Path,
) -> None:
    waiting = (
        'ray_operator_cluster_condition{namespace="a",name="%s",type="PodsWaiting",status="%s"}'
    )
    input_series = [
        {"series": waiting % ("stuck", "True"), "values": "1x30"},
        # Waited 5 minutes, then its Pods were scheduled: the condition went.
        {"series": waiting % ("recovered", "True"), "values": "1x5"},
    ]
    fired = {
        name: _annotation("RayClusterPodsWaiting", name, namespace="a", name="stuck")
        for name in ("summary", "description")
    }
    assert_promtool_unit_test_passes(tmp_path, input_series, [
        {"eval_time": "5m", "alertname": "RayClusterPodsWaiting", "exp_alerts": []},
        {"eval_time": "15m", "alertname": "RayClusterPodsWaiting", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "a", "name": "stuck"},
            "exp_annotations": fired,
        }]},
    ])  # fmt: skip


def assert_promtool_unit_test_passes(
    tmp_path: Path, input_series: list[dict[str, str]], alert_rule_test: list[dict[str, Any]]
) -> None:
    """`promtool test rules` with these series (one sample a minute) and expected alerts."""
    tests = {
        "rule_files": [str(rule_groups(tmp_path))],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": input_series, "alert_rule_test": alert_rule_test}
        ],
    }
    test_file = tmp_path / "test.yaml"
    test_file.write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        [str(promtool()), "test", "rules", str(test_file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _rule(alert: str) -> dict[str, Any]:
    (rule,) = (r for r in rules() if r.get("alert") == alert)
    return rule


def _annotation(alert: str, annotation: str, *, namespace: str, name: str) -> str:
    """The alert's annotation as Prometheus renders it for that cluster's labels."""
    text = str(_rule(alert)["annotations"][annotation])
    return text.replace("{{ $labels.namespace }}", namespace).replace("{{ $labels.name }}", name)


# --- the Prometheus Operator objects --------------------------------------------------------


def test_pod_monitor_selects_the_ray_pods_and_port_our_builders_make() -> None:
    monitor = the(build(CONFIG / "prometheus"), "PodMonitor")
    (expression,) = monitor["spec"]["selector"]["matchExpressions"]
    assert expression["key"] == names.NODE_TYPE_LABEL
    assert set(expression["values"]) == {names.HEAD_NODE, names.WORKER_NODE}
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    container: dict[str, Any] = {}
    ensure_metrics_port(container)
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert container["ports"] == [{"name": endpoint["port"], "containerPort": 8080}]
    relabelled = {r["targetLabel"] for r in endpoint["relabelings"]}
    assert "ray_io_cluster" in relabelled  # what Ray's own dashboards group by


def test_config_prometheus_labels_every_object_release_prometheus_as_kuberays_do() -> None:
    objects = build(CONFIG / "prometheus")
    kinds = sorted(m["kind"] for m in objects)
    assert kinds == ["PodMonitor", "PrometheusRule", "ServiceMonitor"]
    for manifest in objects:
        assert manifest["metadata"]["labels"]["release"] == "prometheus"
    # Only the objects' own labels: what the ServiceMonitor selects is unchanged.
    assert "release" not in the(objects, "ServiceMonitor")["spec"]["selector"]["matchLabels"]


def test_an_overlay_sets_its_own_release_label(tmp_path: Path) -> None:
    overlay = tmp_path / "monitoring"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({
            "resources": [os.path.relpath(CONFIG / "prometheus", overlay)],
            "labels": [{"pairs": {"release": "monitoring"}, "includeSelectors": False}],
        })
    )  # fmt: skip
    for manifest in build(overlay):
        assert manifest["metadata"]["labels"]["release"] == "monitoring"


def test_chart_renders_config_prometheus_and_the_dashboard_with_the_release_label() -> None:
    chart = render(
        "metrics.release=kps",
        "metrics.serviceMonitor.enabled=true",
        "metrics.podMonitor.enabled=true",
        "metrics.podMonitor.interval=10s",
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboard.enabled=true",
    )
    config = build(CONFIG / "prometheus")
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert the(chart, kind)["metadata"]["labels"]["release"] == "kps", kind
    assert the(chart, "PrometheusRule")["spec"] == the(config, "PrometheusRule")["spec"]
    pod_monitor = the(chart, "PodMonitor")["spec"]
    (endpoint,) = pod_monitor["podMetricsEndpoints"]
    assert endpoint["interval"] == "10s"
    assert {**pod_monitor, "podMetricsEndpoints": [{**endpoint, "interval": "30s"}]} == the(
        config, "PodMonitor"
    )["spec"]
    configmap = the(chart, "ConfigMap", "ray-operator-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["ray-operator.json"]) == dashboard()


def test_helm_lint_passes_with_every_monitoring_object_on() -> None:
    sets = (
        "metrics.release=kps",
        "metrics.serviceMonitor.enabled=true",
        "metrics.podMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboard.enabled=true",
    )
    output = helm("lint", "--strict", str(CHART), *(arg for s in sets for arg in ("--set", s)))
    assert "0 chart(s) failed" in output


def test_chart_renders_no_monitoring_object_by_default() -> None:
    defaults = render()
    assert not of_kind(defaults, "ServiceMonitor", "PodMonitor", "PrometheusRule")
    assert not [m for m in of_kind(defaults, "ConfigMap") if "dashboard" in m["metadata"]["name"]]


# --- what the new instruments measure ----------------------------------------------------------


async def test_queue_wait_is_the_time_a_key_spent_queued_before_a_worker_took_it() -> None:
    # On the session's loop (pytest-asyncio), not asyncio.run(): that would unhook looptime
    # from the queue tests that run later in the session.
    metrics = Metrics()
    queue: WorkQueue[str] = WorkQueue(metrics=metrics)
    queue.add("key")
    await asyncio.sleep(0.05)
    assert await queue.get() == "key"
    queue.done("key")
    queue.add("key")  # queued again: waits again, the first wait is not counted twice
    assert await queue.get() == "key"

    name = "ray_operator_workqueue_queue_duration_seconds"
    assert metrics.registry.get_sample_value(f"{name}_count") == 2
    assert metrics.registry.get_sample_value(f"{name}_sum") >= 0.05  # type: ignore[operator]
