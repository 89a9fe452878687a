"""`python -m ray_operator.bench`: flags, the control plane, the run, and its table or JSON.

Without `--kubeconfig` the benchmark starts its own embedded control plane in the work directory
and stops it afterwards; the operator then watches all namespaces, as it would in production.
With `--kubeconfig` (a shared cluster, e.g. the test suite's) it watches only the run's own
namespaces, and wipes them at the end. The table (or JSON) goes to stdout, progress to stderr;
the exit code is 0 whether or not targets are met — a benchmark reports, it does not judge — and
1 only when the run itself broke off (what was measured until then is printed all the same).

`--compare-with CMD` runs a side-by-side comparison instead: a few scenarios for the operator
CMD starts ("theirs", e.g. KubeRay's manager) and for ours, alternating, each run on a fresh
embedded control plane, measured from outside only (compare.py). CMD is split into shell words;
the harness fills in these placeholders:
{placeholders}

For KubeRay's manager built from its source (ray-operator/, `go build -o /tmp/kuberay-operator .`):
  --compare-with '{kuberay}'
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

import uvloop

from ray_operator.bench.compare import CompareConfig, run_comparison
from ray_operator.bench.compare_report import Comparison
from ray_operator.bench.config import BenchConfig
from ray_operator.bench.external import (
    KUBERAY_EXAMPLE,
    PLACEHOLDERS,
    OperatorCommand,
    ours_command_line,
)
from ray_operator.bench.image_runtime import compile_bytecode
from ray_operator.bench.report import Machine, Report
from ray_operator.bench.runner import run_benchmark
from ray_operator.bench.session import BenchSession
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client

FULL_IDLE_SECONDS = 600.0
COMPARE_IDLE_SECONDS = 120.0
LARGE_TRIALS = 10
COMPARE_SCALE_TRIALS = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    comparing = args.compare_with is not None
    try:
        config = _config(args, comparing=comparing)
        compare = _compare_config(args, config) if comparing else None
    except ValueError as error:
        parser.error(str(error))
    work_dir: Path = args.work_dir or Path(tempfile.mkdtemp(prefix="ray-operator-bench-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    if compare is not None:
        return _compare(compare, args, work_dir=work_dir)
    report = Report(
        Machine.current(kube_apiserver=_kubernetes_version()),
        settings=_settings(config),
        notes=list(args.note),
    )
    if config.idle_seconds < FULL_IDLE_SECONDS:
        report.notes.append(
            f"idle period {config.idle_seconds:.0f} s "
            f"(the issue asks for {FULL_IDLE_SECONDS:.0f} s)"
        )
    started = time.monotonic()
    exit_code = 0
    try:
        _run_with_control_plane(args, config, report=report, work_dir=work_dir)
    except Exception as error:
        # What was measured before the failure is still worth printing.
        report.notes.append(f"the run stopped early: {type(error).__name__}: {error}")
        exit_code = 1
    finally:
        report.seconds = time.monotonic() - started
        print(f"operator logs in {work_dir}", file=sys.stderr)
    _print_result(report, args)
    return exit_code


class _Result(Protocol):
    def table(self) -> str: ...
    def markdown(self) -> str: ...
    def to_json(self) -> str: ...


def _print_result(result: _Result, args: argparse.Namespace) -> None:
    """The table (or JSON) to stdout, and the markdown to its file if asked for."""
    if args.markdown:
        args.markdown.write_text(result.markdown())
    print(result.to_json() if args.json else result.table())


def _run_with_control_plane(
    args: argparse.Namespace, config: BenchConfig, *, report: Report, work_dir: Path
) -> None:
    from ray_operator.cli import install_crds
    from ray_operator.localcluster.controlplane import LocalControlPlane

    control_plane = None
    kubeconfig: Path | None = args.kubeconfig
    if kubeconfig is None:
        # The plane RESULTS.md was measured on: without kube-controller-manager, whose garbage
        # collector would add its own watches and deletes of thousands of Pods to the two cores
        # the figures are about (the operator deletes what it owns itself).
        control_plane = LocalControlPlane(work_dir / "control-plane", controller_manager=False)
        print(
            f"starting the embedded control plane in {control_plane.directory}",
            file=sys.stderr,
            flush=True,
        )
        control_plane.start()
        kubeconfig = control_plane.kubeconfig
    compile_bytecode()
    scope = args.operator_scope or ("namespaces" if control_plane is None else "all")
    report.settings["operator_scope"] = scope
    try:
        install_crds(kubeconfig)
        uvloop.run(
            _run(
                config,
                kubeconfig=kubeconfig,
                report=report,
                work_dir=work_dir,
                scope_to_namespaces=scope == "namespaces",
                wipe_afterwards=control_plane is None,
            )
        )
    finally:
        if control_plane is not None:
            control_plane.stop()
            # etcd's data for thousands of Pods is large and worthless after the run.
            shutil.rmtree(control_plane.directory, ignore_errors=True)


def _compare(compare: CompareConfig, args: argparse.Namespace, *, work_dir: Path) -> int:
    """Run the side-by-side comparison and print its table (or JSON)."""
    settings = {
        "theirs": shlex.join(compare.theirs.words),
        "ours": shlex.join(compare.ours.words),
        "clusters": compare.bench.largest,
        "trials": compare.trials,
        "scale_step": compare.scale_step,
        "scale_trials": compare.scale_trials,
        "idle_seconds": compare.bench.idle_seconds,
        "quiet_seconds": compare.bench.quiet_seconds,
        "concurrency": compare.bench.concurrency,
    }
    comparison = Comparison(
        Machine.current(kube_apiserver=_kubernetes_version()),
        settings=settings,
        trials=compare.trials,
    )
    comparison.notes += args.note
    started = time.monotonic()
    try:
        broken = run_comparison(compare, work_dir=work_dir, comparison=comparison)
    finally:
        comparison.seconds = time.monotonic() - started
        print(f"operator logs in {work_dir}", file=sys.stderr)
    _print_result(comparison, args)
    return 1 if broken else 0


async def _run(
    config: BenchConfig,
    *,
    kubeconfig: Path,
    report: Report,
    work_dir: Path,
    scope_to_namespaces: bool,
    wipe_afterwards: bool,
) -> None:
    api = await load_api_client(kubeconfig)
    client = KubeClient(api, metrics=Metrics())
    session = BenchSession(
        config,
        kubeconfig=kubeconfig,
        api=api,
        client=client,
        work_dir=work_dir,
        report=report,
        scope_to_namespaces=scope_to_namespaces,
    )
    try:
        await run_benchmark(session, wipe_afterwards=wipe_afterwards)
    finally:
        await client.close()


def _parser() -> argparse.ArgumentParser:
    defaults = BenchConfig()
    placeholders = "\n".join(f"  {{{name}}}  {meaning}" for name, meaning in PLACEHOLDERS.items())
    parser = argparse.ArgumentParser(
        prog="python -m ray_operator.bench",
        description=(__doc__ or "").format(placeholders=placeholders, kuberay=KUBERAY_EXAMPLE),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--kubeconfig", type=Path, help="use this cluster instead of an embedded control plane")
    add(
        "--clusters",
        type=_sizes,
        default=defaults.clusters,
        help="N of each M1 run, comma-separated; M2..M6 use the largest (default: 100,1000)",
    )
    add(
        "--concurrency",
        type=int,
        default=defaults.concurrency,
        help="creates in flight, RayClusters and bare-client ceiling (default: %(default)s)",
    )
    add(
        "--trials", type=int, default=defaults.trials, help="M2 trials of +1 (default: %(default)s)"
    )
    add(
        "--scale-steps",
        type=_sizes,
        default=defaults.scale_steps,
        help="M2: workers added per PATCH, comma-separated (default: 1,10,100)",
    )
    add(
        "--large-trials",
        type=int,
        help=f"M2 trials of each step above 1 (default: {LARGE_TRIALS}; "
        f"{COMPARE_SCALE_TRIALS} with --compare-with, of the largest step)",
    )
    add(
        "--trial-gap",
        type=float,
        default=defaults.trial_gap,
        help="M2: seconds between trials, for the operator to go idle (default: %(default)s)",
    )
    add(
        "--fairness-replicas",
        type=int,
        default=defaults.fairness_replicas,
        help="M2 fairness: cluster A scales 0 → this (default: %(default)s)",
    )
    add(
        "--fairness-trials",
        type=int,
        default=defaults.fairness_trials,
        help="M2 fairness: most +1 trials on B (default: %(default)s)",
    )
    add(
        "--workers",
        type=int,
        default=defaults.workers,
        help="M3: workers of the cluster whose requests are counted (default: %(default)s)",
    )
    add(
        "--idle-seconds",
        type=float,
        help=f"M3/M5 idle period (default: {FULL_IDLE_SECONDS:.0f}; "
        f"{COMPARE_IDLE_SECONDS:.0f} with --compare-with)",
    )
    add(
        "--unrelated-pods",
        type=int,
        default=defaults.unrelated_pods,
        help="M4: bare Pods in another namespace (default: %(default)s)",
    )
    add(
        "--quiet-seconds",
        type=float,
        default=defaults.quiet_seconds,
        help="how long the operator must be inactive to count as settled (default: %(default)s)",
    )
    add(
        "--timeout",
        type=float,
        default=defaults.settle_timeout,
        help="bound of every wait for convergence or quiet, seconds (default: %(default)s)",
    )
    add(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=defaults.leader_elect,
        help="run the operator with leader election (default: %(default)s)",
    )
    add(
        "--max-concurrent-reconciles",
        type=int,
        default=None,
        help="passed to the operator (default: the operator's own)",
    )
    add(
        "--operator-log-level",
        default=defaults.operator_log_level,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="default: %(default)s",
    )
    add(
        "--operator-scope",
        choices=("all", "namespaces"),
        help="the operator watches all namespaces or only the run's (default: all with the "
        "embedded control plane, namespaces with --kubeconfig)",
    )
    add(
        "--compare-with",
        metavar="CMD",
        help="compare the operator CMD starts with ours, side by side (placeholders above)",
    )
    add(
        "--compare-trials",
        type=int,
        default=2,
        help="with --compare-with: runs of each operator, alternating (default: %(default)s)",
    )
    add(
        "--compare-ours",
        metavar="CMD",
        default=ours_command_line(),
        help="with --compare-with: how ours is started (default: %(default)s)",
    )
    add(
        "--probe-path",
        default="/readyz",
        help="with --compare-with: the readiness path polled on {probe_port} "
        "(default: %(default)s)",
    )
    add("--work-dir", type=Path, help="logs (and the embedded control plane); default: a temp dir")
    add("--json", action="store_true", help="print JSON instead of the table")
    add("--markdown", type=Path, help="also write the figures as a markdown table to this file")
    add("--note", action="append", default=[], help="a note to print with the figures")
    return parser


def _config(args: argparse.Namespace, *, comparing: bool) -> BenchConfig:
    idle_seconds = COMPARE_IDLE_SECONDS if comparing else FULL_IDLE_SECONDS
    return BenchConfig(
        clusters=args.clusters,
        concurrency=args.concurrency,
        trials=args.trials,
        trial_gap=args.trial_gap,
        scale_steps=args.scale_steps,
        large_trials=LARGE_TRIALS if args.large_trials is None else args.large_trials,
        fairness_replicas=args.fairness_replicas,
        fairness_trials=args.fairness_trials,
        workers=args.workers,
        idle_seconds=idle_seconds if args.idle_seconds is None else args.idle_seconds,
        unrelated_pods=args.unrelated_pods,
        quiet_seconds=args.quiet_seconds,
        settle_timeout=args.timeout,
        leader_elect=args.leader_elect,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        operator_log_level=args.operator_log_level,
    )


def _compare_config(args: argparse.Namespace, config: BenchConfig) -> CompareConfig:
    return CompareConfig(
        theirs=OperatorCommand.parse(args.compare_with),
        ours=OperatorCommand.parse(args.compare_ours),
        bench=config,
        trials=args.compare_trials,
        scale_step=max(config.scale_steps),
        scale_trials=COMPARE_SCALE_TRIALS if args.large_trials is None else args.large_trials,
        ready_path=args.probe_path,
    )


def _settings(config: BenchConfig) -> dict[str, object]:
    settings = asdict(config)
    settings["clusters"] = ",".join(str(n) for n in config.clusters)
    settings["scale_steps"] = ",".join(str(n) for n in config.scale_steps)
    return {key: value for key, value in settings.items() if value is not None}


def _sizes(raw: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        message = f"comma-separated integers expected, got {raw!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1, got {raw!r}")
    return sizes


def _kubernetes_version() -> str:
    from ray_operator.localcluster.binaries import KUBERNETES_VERSION

    return KUBERNETES_VERSION
