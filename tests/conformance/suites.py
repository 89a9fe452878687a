"""KubeRay's e2e test binaries: built once per pinned version from the Go module proxy, run, read.

The `test/` packages ship inside the `github.com/ray-project/kuberay/ray-operator` module, so a
tiny wrapper module requiring it can `go test -c` them, as `localcluster.binaries` builds the
control plane. The binaries go to `~/.cache/ray-operator/kuberay-e2e/<version>/`; nothing of
KubeRay is ever written into this repository. Built without `-trimpath`: `sampleyaml` finds
KubeRay's sample YAMLs next to its own source file in the module cache, which `module_source`
makes sure is present before a run.

A suite runs under `go tool test2json`, whose event stream (one JSON object per line) is kept
beside the table and read into one `CaseResult` per test that has no subtests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from ray_operator.localcluster.binaries import (
    BinaryBuildError,
    _run_go,
    _write_go_module,
    default_cache_dir,
)

KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_VERSION = "v1.5.0"
SUITES = ("sampleyaml", "e2erayjob", "e2erayservice", "e2e")
"""KubeRay's e2e packages we run, in order (`test/<suite>` in the module)."""

MAX_REASON_CHARS = 300
_PARENT_FAILED = "test executed panic(nil) or runtime.Goexit"
_NO_MESSAGE = "failed (no message; see the events file)"

# A `t.Log`/`t.Error` line: "    file_test.go:84: message" (the message may start on the next line).
_LOCATION = re.compile(r"^\s+[\w.-]+\.go:\d+:\s?(?P<rest>.*)$")
_NOT_A_REASON = re.compile(r"^(Error Trace:|Test:|\S+\.go:\d+\s*$)")
_TEST_FUNCTION = re.compile(r"^func (?P<name>Test\w+)\(t \*testing\.T\)", re.MULTILINE)
# `t.Run("name", ...)` or a table entry `name: "name",` (sampleyaml's table-driven tests).
_SUBTEST_NAME = re.compile(r'(?:\.Run\(|\bname:\s*)"([^"]+)"')
# Fields of a printed Kubernetes condition that never explain a failure.
_NOISE = re.compile(r"ObservedGeneration: \d+,|LastTransitionTime: \{[^}]*\},|Error:\s")


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """One test (or subtest) of a KubeRay suite as it ran against us."""

    suite: str
    name: str
    outcome: str
    """"pass", "fail" or "skip" (Go's t.Skip)."""
    seconds: float
    reason: str = ""
    """For a failure: its first meaningful line; for a skip: Go's skip message."""


def module_source() -> Path:
    """KubeRay's module in the Go module cache (downloaded if missing): the samples live there."""
    info = json.loads(
        _run_go(["mod", "download", "-json", f"{KUBERAY_MODULE}@{KUBERAY_VERSION}"], cwd=None)
    )
    return Path(info["Dir"])


def declared_subtests(source: Path, suite: str) -> dict[str, list[str]]:
    """Subtest names each top-level test of a suite declares, as Go names them (`_` for space).

    KubeRay's subtests fail through their parent's Gomega, which ends the parent: the subtests
    after a failing one never run and Go reports nothing for them. Reading the names from the
    source lets the table show them as not reached instead of leaving them out.
    """
    declared: dict[str, list[str]] = {}
    for path in sorted((source / "test" / suite).glob("*_test.go")):
        text = path.read_text()
        functions = list(_TEST_FUNCTION.finditer(text))
        for index, function in enumerate(functions):
            end = functions[index + 1].start() if index + 1 < len(functions) else len(text)
            body = text[function.end() : end]
            names = _SUBTEST_NAME.findall(body)
            declared[function["name"]] = [name.replace(" ", "_") for name in names]
    return declared


def suite_binary(suite: str, *, cache_dir: Path | None = None) -> Path:
    """The compiled `go test` binary of KubeRay's `test/<suite>`, built once (minutes)."""
    if suite not in SUITES:
        raise ValueError(f"unknown KubeRay suite {suite!r}; one of {', '.join(SUITES)}")
    cache = cache_dir or default_cache_dir()
    target = cache / "kuberay-e2e" / KUBERAY_VERSION / f"{suite}.test"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    module_dir = cache / "src" / f"kuberay-e2e-{KUBERAY_VERSION}"
    module_dir.mkdir(parents=True, exist_ok=True)
    _write_go_module(
        module_dir,
        module="ray-operator.local/kuberay-e2e",
        requires=[(KUBERAY_MODULE, KUBERAY_VERSION)],
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    _run_go(["mod", "download", KUBERAY_MODULE], cwd=module_dir)
    package = f"{KUBERAY_MODULE}/test/{suite}"
    _run_go(["test", "-c", "-o", str(partial), package], cwd=module_dir)
    partial.replace(target)
    return target


def run_suite(
    suite: str,
    binary: Path,
    *,
    env: Mapping[str, str],
    package_dir: Path,
    events_path: Path,
    skip: str = "",
    run: str = "",
    timeout_seconds: int = 3600,
) -> list[CaseResult]:
    """Run one suite binary (Go's `-test.run`/`-test.skip` regexps) and read its results.

    `package_dir`: the suite's source directory, where `go test` would run it (tests read
    `testdata/` relative to it)."""
    go = shutil.which("go")
    if go is None:
        raise BinaryBuildError("Go is needed to run KubeRay's suites (go tool test2json)")
    command = [go, "tool", "test2json", "-t", "-p", suite, str(binary), "-test.v=test2json"]
    command += ["-test.count=1", f"-test.timeout={timeout_seconds}s"]
    if run:
        command.append(f"-test.run={run}")
    if skip:
        command.append(f"-test.skip={skip}")
    events_path.parent.mkdir(parents=True, exist_ok=True)
    with events_path.open("w") as events:
        subprocess.run(
            command,
            stdout=events,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=package_dir,
            check=False,
        )
    return read_events(suite, events_path.read_text().splitlines())


def read_events(suite: str, lines: Iterable[str]) -> list[CaseResult]:
    """One result per test without subtests, from a `go tool test2json` stream."""
    output: dict[str, list[str]] = {}
    ended: dict[str, tuple[str, float]] = {}
    package_output: list[str] = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            package_output.append(line)
            continue
        name = event.get("Test")
        action = event.get("Action")
        if not name:
            if action == "output":
                package_output.append(event.get("Output", ""))
            continue
        output.setdefault(name, [])
        if action == "output":
            output[name].append(event.get("Output", ""))
        elif action in ("pass", "fail", "skip"):
            ended[name] = (action, float(event.get("Elapsed") or 0.0))
    leaves = [n for n in output if not any(o.startswith(n + "/") for o in output)]
    results = []
    for name in leaves:
        outcome, seconds = ended.get(name, ("fail", 0.0))
        reason = ""
        if outcome == "fail" and name not in ended:
            reason = _unfinished(package_output)
        elif outcome == "fail":
            reason = failure_reason(output[name])
            parent = name.rpartition("/")[0]
            if reason.startswith((_PARENT_FAILED, _NO_MESSAGE)) and parent in output:
                # KubeRay's subtests fail through their parent's Gomega: the message is there.
                reason = failure_reason(output[parent])
        elif outcome == "skip":
            reason = skip_reason(output[name])
        results.append(CaseResult(suite, name, outcome, round(seconds, 1), reason))
    return results


def failure_reason(output: list[str]) -> str:
    """What went wrong, in one line: the failure's message block, squeezed, without where or when.

    A failure is a `file.go:NN:` line whose block (the lines indented under it) says Error,
    Expected, Timed out or panic; KubeRay's resource logger appends dumps of every object
    ("=== Pods across all namespaces ===") to it, which end the block.
    """
    lines = "".join(output).splitlines()
    for index, line in enumerate(lines):
        location = _LOCATION.match(line)
        if location is None:
            continue
        block = [location["rest"]]
        for following in lines[index + 1 :]:
            if _LOCATION.match(following) or following.strip().startswith(("=== ", "--- ")):
                break
            block.append(following)
        if not _looks_like_failure(block):
            continue
        kept = [text.strip() for text in block if not _NOT_A_REASON.match(text.strip())]
        squeezed = _NOISE.sub("", " ".join(text for text in kept if text))
        return _bounded(" ".join(squeezed.split()))
    panics = [line.strip() for line in lines if line.strip().startswith("panic:")]
    return _bounded(panics[0]) if panics else _NO_MESSAGE


def skip_reason(output: list[str]) -> str:
    for line in "".join(output).splitlines():
        location = _LOCATION.match(line)
        if location and location["rest"].strip():
            return _bounded(location["rest"].strip())
    return ""


def _looks_like_failure(lines: list[str]) -> bool:
    text = "\n".join(lines)
    return any(
        mark in text
        for mark in ("Error Trace:", "Timed out after", "Expected", "Unexpected error", "panic")
    )


def _unfinished(package_output: list[str]) -> str:
    for line in package_output:
        if line.startswith("panic: test timed out"):
            return _bounded(line.strip())
    return "did not finish (the suite binary stopped)"


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"
