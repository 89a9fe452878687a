"""`make conformance`: KubeRay's e2e suites against a fresh `ray-operator dev`, as a table.

    python -m tests.conformance [--suite sampleyaml ...] [--run REGEXP] [--out DIR]

Builds (once) the pinned KubeRay version's test binaries, starts `ray-operator dev` (what `make
run` starts: embedded control plane, webhooks, local Ray) in a temporary directory, runs each suite
through its kubeconfig with the reviewed not-run list as `-test.skip`, stops everything, and writes
`conformance.md` and `conformance.json` (plus each suite's raw test2json events) into `--out`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.conformance.reviewed import NOT_RUN, REVIEWED, Reviewed, skip_argument
from tests.conformance.suites import (
    KUBERAY_VERSION,
    SUITES,
    CaseResult,
    declared_subtests,
    module_source,
    read_events,
    run_suite,
    suite_binary,
)
from tests.conformance.table import as_json, markdown, rows
from tests.localray.dev_operator import DevOperator
from tests.runtime.processes import REPO_ROOT, free_port


def suite_env(
    kubeconfig: Path, output_dir: Path, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What KubeRay's test support reads: the cluster (KUBECONFIG), where to write logs, and
    `overrides` (its KUBERAY_TEST_* knobs)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("KUBERAY_TEST")}
    env["KUBECONFIG"] = str(kubeconfig)
    env["KUBERAY_TEST_OUTPUT_DIR"] = str(output_dir)
    return {**env, **(overrides or {})}


def start_dev(directory: Path) -> DevOperator:
    """`ray-operator dev` as `make run` starts it (webhooks on), on free loopback ports."""
    dev = DevOperator(directory, "--webhooks", "--webhook-port", str(free_port()))
    try:
        dev.wait_ready(timeout=300)
    except BaseException:
        dev.stop()
        raise
    return dev


def run_suites(
    dev: DevOperator,
    suites: Sequence[str],
    *,
    out: Path,
    skipped: Sequence[Reviewed],
    run: str = "",
    timeout_seconds: int = 3600,
    overrides: Mapping[str, str] | None = None,
) -> list[CaseResult]:
    """Each suite in turn against `dev`, skipping `skipped`; every result."""
    results: list[CaseResult] = []
    # KubeRay's cleanup writes each test's Pod logs and Events there before it deletes the test's
    # namespace, and fails (leaving the namespace) when the directory is missing.
    kuberay_output = out / "kuberay-output"
    kuberay_output.mkdir(parents=True, exist_ok=True)
    env = suite_env(dev.directory / "kubeconfig", kuberay_output, overrides)
    source = module_source()
    for suite in suites:
        print(f"[conformance] {suite}: running", file=sys.stderr, flush=True)
        found = run_suite(
            suite,
            suite_binary(suite),
            env=env,
            package_dir=source / "test" / suite,
            events_path=out / f"{suite}.events.jsonl",
            skip=skip_argument(skipped, suite),
            run=run,
            timeout_seconds=timeout_seconds,
        )
        passed = sum(result.outcome == "pass" for result in found)
        print(f"[conformance] {suite}: {passed}/{len(found)} passed", file=sys.stderr, flush=True)
        results += found
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__)
    parser.add_argument("--suite", action="append", choices=SUITES, help="default: all")
    parser.add_argument("--run", default="", help="Go -test.run regexp within each suite")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / ".conformance")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per suite")
    parser.add_argument(
        "--skip-expected-failing",
        action="store_true",
        help="also skip the expected-failing entries (what CI does): a quicker run",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: write the table from the events files already in --out",
    )
    args = parser.parse_args(argv)
    suites = args.suite or list(SUITES)
    args.out.mkdir(parents=True, exist_ok=True)
    skipped = REVIEWED if args.skip_expected_failing else NOT_RUN
    if args.report_only:
        suites = [suite for suite in suites if (args.out / f"{suite}.events.jsonl").exists()]
        results = [
            result
            for suite in suites
            for result in read_events(
                suite, (args.out / f"{suite}.events.jsonl").read_text().splitlines()
            )
        ]
    else:
        results = _run(suites, out=args.out, skipped=skipped, run=args.run, timeout=args.timeout)
    _write_table(results, suites, out=args.out, selected=args.run, skipped=skipped)
    return 0


def _run(
    suites: Sequence[str], *, out: Path, skipped: Sequence[Reviewed], run: str, timeout: int
) -> list[CaseResult]:
    for suite in suites:
        print(f"[conformance] {suite}: {suite_binary(suite)}", file=sys.stderr, flush=True)
    module_source()  # sampleyaml reads KubeRay's samples from the module cache
    directory = Path(tempfile.mkdtemp(prefix="ray-operator-conformance-"))
    dev = start_dev(directory / "dev")
    try:
        return run_suites(dev, suites, out=out, skipped=skipped, run=run, timeout_seconds=timeout)
    finally:
        dev.stop()
        shutil.copy(dev.log_path, out / "ray-operator-dev.log")
        shutil.rmtree(directory, ignore_errors=True)


def _write_table(
    results: Sequence[CaseResult],
    suites: Sequence[str],
    *,
    out: Path,
    selected: str,
    skipped: Sequence[Reviewed],
) -> None:
    source = module_source()
    # With --run, a subtest missing from the results may just not be selected.
    declared = {} if selected else {s: declared_subtests(source, s) for s in suites}
    table = rows(results, suites, declared=declared, skipped=skipped)
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    commit = _commit()
    title = f"KubeRay {KUBERAY_VERSION} e2e against ray-operator {commit}, {today}"
    if selected:
        title += f" (only -run {selected})"
    (out / "conformance.md").write_text(markdown(table, title=title))
    (out / "conformance.json").write_text(
        as_json(table, kuberay_version=KUBERAY_VERSION, date=today, commit=commit)
    )
    print(markdown(table, title=title))
    print(f"[conformance] written to {out}", file=sys.stderr)


def _commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
