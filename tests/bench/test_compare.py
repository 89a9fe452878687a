"""`--compare-with`: the audit-log counting, the command placeholders, the side-by-side table, and
one tiny comparison end to end (our own operator standing in for "theirs").

Benchmarks are not timed tests: the smoke run checks that every figure was taken for both sides,
never what the figures are.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ray_operator.bench.audit import AuditEvent, AuditLog, RequestCounts, quiet_since
from ray_operator.bench.compare import run_order
from ray_operator.bench.compare_report import Comparison
from ray_operator.bench.external import OperatorCommand, descendants, ours_command_line
from ray_operator.bench.report import Machine
from ray_operator.localcluster.manifests import audit_policy

from tests.bench.conftest import run_bench_json

REPO_ROOT = Path(__file__).resolve().parents[2]
USER = "operator-under-test"
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def audit_line(
    verb: str,
    resource: str,
    *,
    at: str = "2027-01-15T08:00:00.250000Z",
    user: str = USER,
    subresource: str | None = None,
    code: int = 200,
) -> str:
    """One line of kube-apiserver's JSON audit log at level Metadata, as it writes them."""
    reference: dict[str, str] = {"resource": resource, "namespace": "ns", "apiVersion": "v1"}
    if subresource:
        reference["subresource"] = subresource
    return json.dumps(
        {
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": "0b8c9f5e-3f0e-4a59-9d0b-4c1f6a1d2b7e",
            "stage": "ResponseComplete",
            "requestURI": f"/api/v1/namespaces/ns/{resource}",
            "verb": verb,
            "user": {"username": user, "groups": ["system:masters", "system:authenticated"]},
            "sourceIPs": ["127.0.0.1"],
            "objectRef": reference,
            "responseStatus": {"metadata": {}, "code": code},
            "requestReceivedTimestamp": at,
            "stageTimestamp": at,
        }
    )


def event(verb: str, resource: str, *, received: float) -> AuditEvent:
    return AuditEvent(verb=verb, resource=resource, received=received, code=200)


# --- the audit log ---------------------------------------------------------------------------


def test_an_audit_line_gives_verb_resource_with_subresource_code_and_time() -> None:
    line = audit_line("patch", "rayclusters", subresource="status", code=422)
    parsed = AuditEvent.parse(line, user=USER)
    assert parsed == AuditEvent(
        verb="patch", resource="rayclusters/status", received=T0 + 0.25, code=422
    )


def test_another_users_request_and_a_half_written_line_are_not_events() -> None:
    assert AuditEvent.parse(audit_line("list", "pods", user="admin"), user=USER) is None
    assert AuditEvent.parse(audit_line("list", "pods")[:40], user=USER) is None


def test_the_log_is_followed_and_a_line_still_being_written_waits_for_its_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    first, second = audit_line("create", "pods"), audit_line("get", "leases")
    path.write_text(first + "\n" + second[:30])
    log = AuditLog(path, user=USER)
    assert [e.verb for e in log.read_new()] == ["create"]
    with path.open("a") as file:
        file.write(second[30:] + "\n" + audit_line("list", "pods", user="admin") + "\n")
    assert [(e.verb, e.resource) for e in log.read_new()] == [
        ("create", "pods"),
        ("get", "leases"),
    ]


def test_between_keeps_the_requests_sent_in_the_window(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text(
        "\n".join(
            audit_line("list", "pods", at=f"2027-01-15T08:00:0{second}Z") for second in range(5)
        )
        + "\n"
    )
    window = AuditLog(path, user=USER).between(T0 + 1, T0 + 3)
    assert [e.received - T0 for e in window] == [1, 2, 3]


def test_a_log_not_yet_written_has_no_events(tmp_path: Path) -> None:
    assert AuditLog(tmp_path / "absent.jsonl", user=USER).read_new() == []


def test_requests_are_counted_by_verb_and_resource_with_leases_apart() -> None:
    counts = RequestCounts.of(
        [
            event("create", "pods", received=T0),
            event("create", "pods", received=T0),
            event("patch", "rayclusters/status", received=T0),
            event("list", "pods", received=T0),
            event("get", "leases", received=T0),
            event("update", "leases", received=T0),
            event("update", "leases", received=T0),
        ]
    )
    assert counts.requests == {
        ("create", "pods"): 2,
        ("patch", "rayclusters/status"): 1,
        ("list", "pods"): 1,
    }
    assert counts.leases == {"get": 1, "update": 2}
    assert (counts.total, counts.lease_total, counts.writes) == (4, 3, 3)
    assert counts.describe() == (
        "create pods 2, list pods 1, patch rayclusters/status 1; leases: get 1, update 2"
    )
    assert counts.only_writes().describe() == "create pods 2, patch rayclusters/status 1"


def test_no_requests_are_described_as_none() -> None:
    assert RequestCounts.of([]).describe() == "none"


def test_lease_renewals_do_not_break_quiet() -> None:
    events = [event("create", "pods", received=T0), event("update", "leases", received=T0 + 9)]
    assert quiet_since(events, after=T0, now=T0 + 10) == 10


def test_any_other_request_breaks_quiet() -> None:
    events = [event("create", "pods", received=T0), event("list", "pods", received=T0 + 9)]
    assert quiet_since(events, after=T0, now=T0 + 10) == pytest.approx(1)


def test_quiet_is_counted_from_after_at_the_earliest() -> None:
    events = [event("create", "pods", received=T0)]
    assert quiet_since(events, after=T0 + 8, now=T0 + 10) == 2
    assert quiet_since([], after=T0 + 8, now=T0 + 10) == 2


def test_the_audit_policy_logs_only_the_named_users_metadata_when_requests_complete() -> None:
    policy = audit_policy(["operator-under-test"])
    assert policy["omitStages"] == ["RequestReceived", "ResponseStarted"]
    assert policy["rules"] == [
        {"level": "Metadata", "users": ["operator-under-test"]},
        {"level": "None"},
    ]
    assert audit_policy([])["rules"][0] == {"level": "Metadata"}


# --- the command and its placeholders ---------------------------------------------------------


def test_placeholders_are_filled_in_each_shell_word() -> None:
    command = OperatorCommand.parse(
        "'/opt/kuberay operator' --health-probe-bind-address 127.0.0.1:{probe_port} "
        "--kubeconfig={kubeconfig} --leader-election-namespace {lease_namespace}"
    )
    values = {"probe_port": 8082, "kubeconfig": Path("/k/config"), "lease_namespace": "ray"}
    assert command.fill(values) == [
        "/opt/kuberay operator",
        "--health-probe-bind-address",
        "127.0.0.1:8082",
        "--kubeconfig=/k/config",
        "--leader-election-namespace",
        "ray",
    ]


def test_an_unknown_placeholder_is_refused_naming_it_and_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown placeholder \{probe\}.*\{probe_port\}"):
        OperatorCommand.parse("/tmp/kuberay-operator --health-probe-bind-address :{probe}")


def test_doubled_braces_stay_literal_braces() -> None:
    command = OperatorCommand.parse("op --labels={{a}} --port={probe_port}")
    assert command.fill({"probe_port": 1}) == ["op", "--labels={a}", "--port=1"]


def test_a_lone_brace_and_an_empty_command_are_refused() -> None:
    with pytest.raises(ValueError, match="malformed placeholder"):
        OperatorCommand.parse("op --port={probe_port")
    with pytest.raises(ValueError, match="empty"):
        OperatorCommand.parse("  ")


def test_ours_uses_only_known_placeholders_and_leader_election() -> None:
    words = OperatorCommand.parse(ours_command_line()).words
    assert words[1:5] == ("-m", "ray_operator.cli", "run", "--leader-elect")


# --- runs, processes and the table -----------------------------------------------------------


def test_runs_alternate_which_operator_goes_first() -> None:
    assert list(run_order(3)) == [
        (1, "theirs"),
        (1, "ours"),
        (2, "ours"),
        (2, "theirs"),
        (3, "theirs"),
        (3, "ours"),
    ]


def test_the_descendants_of_a_process_are_found_through_proc() -> None:
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        for _ in range(100):
            found = descendants(parent.pid)
            if len(found) == 2:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert len(found) == 2
    finally:
        for pid in descendants(parent.pid):
            subprocess.run(["kill", str(pid)], check=False)
        parent.wait(timeout=10)


def machine() -> Machine:
    return Machine(
        cpus=2, memory_gib=8.0, cpu_model="cpu", kernel="6", python="3.11", kube_apiserver="v1"
    )


def test_a_cell_lists_every_trial_and_the_ratio_compares_the_means() -> None:
    comparison = Comparison(machine(), settings={"clusters": 1000}, trials=2)
    for side, trial, value in (("theirs", 1, 155), ("theirs", 2, 145), ("ours", 1, 77)):
        comparison.record(side, trial, "create 1000 → Pods", value, "s")
    comparison.record("ours", 2, "create 1000 → Pods", 73, "s")
    assert comparison.rows() == [("create 1000 → Pods", "155 s; 145 s", "77 s; 73 s", "0.500")]
    assert "| create 1000 → Pods | 155 s; 145 s | 77 s; 73 s | 0.500 |" in comparison.markdown()
    table = comparison.table().splitlines()
    assert table[0].split() == ["figure", "theirs", "ours", "ours/theirs"]


def test_a_missing_trial_is_na_and_a_ratio_over_zero_is_a_dash() -> None:
    comparison = Comparison(machine(), settings={}, trials=2)
    comparison.record("theirs", 1, "idle requests", 0)
    comparison.record("ours", 1, "idle requests", 0)
    comparison.record("ours", 2, "idle requests", 3)
    assert comparison.rows() == [("idle requests", "0; n/a", "0; 3", "—")]
    figure = json.loads(comparison.to_json())["figures"][0]
    assert (figure["theirs"], figure["ours"]) == ([0, None], [0, 3])
    assert figure["ours_over_theirs"] is None


def test_a_trial_outside_the_run_is_refused() -> None:
    comparison = Comparison(machine(), settings={}, trials=2)
    with pytest.raises(ValueError, match="trial 3"):
        comparison.record("ours", 3, "x", 1)


# --- end to end ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One tiny comparison, our operator on both sides, each run on its own control plane."""
    return run_bench_json(
        "--compare-with",
        ours_command_line(),
        "--clusters",
        "2",
        "--compare-trials",
        "1",
        "--scale-steps",
        "3",
        "--large-trials",
        "1",
        "--idle-seconds",
        "3",
        "--quiet-seconds",
        "0.5",
        "--timeout",
        "60",
        work_dir=tmp_path_factory.mktemp("compare"),
        timeout=240,
    )


def test_every_compared_figure_has_a_number_for_both_operators(
    compare_run: dict[str, Any],
) -> None:
    figures = compare_run["figures"]
    assert len(figures) == 12, [f["name"] for f in figures]
    missing = [
        f for f in figures if not all(isinstance(v, int | float) for v in f["theirs"] + f["ours"])
    ]
    assert not missing, (missing, compare_run["notes"])


def test_the_comparison_names_both_commands(compare_run: dict[str, Any]) -> None:
    settings = compare_run["settings"]
    assert shlex.split(settings["theirs"]) == shlex.split(settings["ours"])
    assert "{probe_port}" in settings["ours"]
