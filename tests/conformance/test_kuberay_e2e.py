"""KubeRay's own e2e suites, the part that fits CI's time, against one `ray-operator dev`.

The whole suites run with `make conformance` (about an hour); here a chosen subset runs, with the
reviewed list (`reviewed.py`: not runnable on one machine, or waiting for another branch) skipped.
A test outside that list failing fails CI. The KubeRay test binaries are built on first use from
the Go module proxy and cached (`suites.suite_binary`).

The suites of the subset run at once against the one dev (each KubeRay test works in a namespace
of its own), and each test of this module reads its own suite's results: they spend most of their
time waiting for Ray and the API server, so together they take about as long as the longest.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conformance.__main__ import run_suites, start_dev
from tests.conformance.reviewed import REVIEWED, Reviewed, find
from tests.conformance.suites import CaseResult, module_source, suite_binary
from tests.conformance.table import markdown, rows
from tests.localray.dev_operator import DevOperator

CI_SUBSET: dict[str, str] = {
    "sampleyaml": "^TestRayJobInteractiveMode$",
    "e2e": "^TestRayClusterManagedBy$|^TestRayClusterWithResourceQuota$",
    "e2erayjob": "^TestRayJobLightWeightMode$",
}
"""Go `-test.run` per suite: what runs in `make test` (minutes, with the reviewed list skipped).
Add a test here once it passes reliably; the others run in `make conformance`."""

SLOW_MACHINE_TIMEOUTS = {
    "KUBERAY_TEST_TIMEOUT_SHORT": "2m",
    "KUBERAY_TEST_TIMEOUT_MEDIUM": "4m",
    "KUBERAY_TEST_TIMEOUT_LONG": "10m",
}
"""KubeRay's own knobs, doubled: its 1/2/5-minute waits are sized for kind on a laptop, and on CI's
two cores a cluster and its job can take most of two minutes. `make conformance` keeps them."""


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevOperator]:
    for suite in CI_SUBSET:
        suite_binary(suite)
    module_source()
    operator = start_dev(tmp_path_factory.mktemp("conformance") / "dev")
    try:
        yield operator
    finally:
        operator.stop()


@pytest.fixture(scope="module")
def suite_runs(
    dev: DevOperator, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[list[CaseResult]]]]:
    """The selected suites of the subset, all started against `dev`: each one's results to come."""
    selected = sorted(
        {
            item.callspec.params["suite"]
            for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")
        }
    )
    with ThreadPoolExecutor(max_workers=max(1, len(selected))) as pool:
        yield {
            suite: pool.submit(
                run_suites,
                dev,
                [suite],
                out=tmp_path_factory.mktemp(f"kuberay-{suite}"),
                skipped=REVIEWED,
                run=CI_SUBSET[suite],
                timeout_seconds=780,
                overrides=SLOW_MACHINE_TIMEOUTS,
            )
            for suite in selected
        }


@pytest.mark.timeout(900)
@pytest.mark.parametrize("suite", sorted(CI_SUBSET))
def test_kuberay_suite_passes_but_for_the_reviewed_list(
    suite: str, dev: DevOperator, suite_runs: dict[str, Future[list[CaseResult]]]
) -> None:
    results = suite_runs[suite].result()
    table = markdown(
        rows(results, [suite], declared={}, skipped=REVIEWED), title=f"KubeRay {suite}"
    )
    ran = [result for result in results if find(REVIEWED, suite, result.name) is None]
    failed = [result for result in ran if result.outcome == "fail"]
    assert ran, f"no test ran:\n{table}"
    assert not failed, f"failed outside the reviewed list:\n{table}\n{dev.log_tail()}"


def test_every_reviewed_entry_names_a_test_of_the_pinned_kuberay_version() -> None:
    """A typo in the reviewed list would silently skip nothing (or hide a test we meant to run)."""
    source = module_source() / "test"
    unknown = [entry for entry in REVIEWED if not _names_a_test(entry, source)]
    assert not unknown, f"entries naming no KubeRay test: {unknown}"


def _names_a_test(entry: Reviewed, source: Path) -> bool:
    listed = subprocess.run(
        [str(suite_binary(entry.suite)), "-test.list", "."],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    top, _, sub = entry.pattern.partition("/")
    if not any(re.search(top, name) for name in listed):
        return False
    if not sub:
        return True
    text = "\n".join(path.read_text() for path in (source / entry.suite).glob("*_test.go"))
    subtests = re.findall(r'(?:name:\s*|Run\()"([^"]+)"', text)
    return any(re.search(sub, name.replace(" ", "_")) for name in subtests)
