"""The conformance table: every test run, and every reviewed test not run, as markdown and JSON."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from tests.conformance.reviewed import EXPECTED_FAILING, NOT_RUN, Reviewed, find
from tests.conformance.suites import CaseResult


@dataclasses.dataclass(frozen=True)
class Row:
    suite: str
    test: str
    result: str
    """pass, fail, skip, "not run", "not reached", or for an expected-failing entry
    "fail (expected)"."""
    seconds: float | None
    why: str


def rows(
    results: Sequence[CaseResult],
    suites: Sequence[str],
    *,
    declared: Mapping[str, Mapping[str, Sequence[str]]],
    skipped: Sequence[Reviewed] = NOT_RUN,
    expected_failing: Sequence[Reviewed] = EXPECTED_FAILING,
) -> list[Row]:
    """One row per test that ran (in run order), per declared subtest an earlier failure kept
    from running, then one per reviewed entry passed to `-skip`. `declared`: suite -> test ->
    subtests."""
    # Go reports a parent whose subtests were all skipped as passed: it did not run either.
    results = [
        r
        for r in results
        if find(skipped, r.suite, r.name) is None
        and not (r.outcome == "pass" and declared.get(r.suite, {}).get(r.name))
    ]
    table = []
    for result in results:
        expected = find(expected_failing, result.suite, result.name)
        outcome, why = result.outcome, result.reason
        if expected is not None and outcome == "fail":
            outcome, why = "fail (expected)", f"{expected.reason} — {why}"
        elif expected is not None and outcome == "pass":
            why = f"passes: remove its expected-failing entry ({expected.reason})"
        table.append(Row(result.suite, result.name, outcome, result.seconds, why))
    table += _not_reached(results, declared, reviewed=skipped)
    for entry in skipped:
        if entry.suite in suites:
            expected = " (expected to fail)" if entry in expected_failing else ""
            table.append(Row(entry.suite, entry.pattern, "not run", None, entry.reason + expected))
    return table


def _not_reached(
    results: Sequence[CaseResult],
    declared: Mapping[str, Mapping[str, Sequence[str]]],
    *,
    reviewed: Sequence[Reviewed],
) -> list[Row]:
    ran = {(result.suite, result.name) for result in results}
    started = {(result.suite, result.name.split("/")[0]) for result in results}
    missing = []
    for suite, test in sorted(started):
        for subtest in declared.get(suite, {}).get(test, ()):
            name = f"{test}/{subtest}"
            if (suite, name) in ran or find(reviewed, suite, name) is not None:
                continue
            why = f"not reached: {test} ended at an earlier subtest's failure"
            missing.append(Row(suite, name, "not reached", None, why))
    return missing


def summary(table: Sequence[Row]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in table:
        counts[row.result] = counts.get(row.result, 0) + 1
    return counts


def markdown(table: Sequence[Row], *, title: str) -> str:
    counts = ", ".join(f"{count} {result}" for result, count in sorted(summary(table).items()))
    lines = [
        f"{title} ({counts})",
        "",
        "| Suite | Test | Result | Seconds | Why |",
        "|---|---|---|---|---|",
    ]
    for row in table:
        seconds = "" if row.seconds is None else f"{row.seconds:.0f}"
        why = row.why.replace("|", "\\|")
        result = f"not run: {why}" if row.result == "not run" else row.result
        why = "" if row.result == "not run" else why
        lines.append(f"| {row.suite} | `{row.test}` | {result} | {seconds} | {why} |")
    return "\n".join(lines) + "\n"


def as_json(table: Sequence[Row], **about: str) -> str:
    document = {**about, "summary": summary(table), "tests": [dataclasses.asdict(r) for r in table]}
    return json.dumps(document, indent=2) + "\n"
