"""What the benchmark's tests share: running `python -m ray_operator.bench` and reading its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_bench_json(*args: str, work_dir: Path, timeout: float) -> dict[str, Any]:
    """Run the benchmark with `args` (and --json) in a process of its own; its JSON report.
    Fails the test, with the end of its stderr, when the run broke off."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_operator.bench",
            *args,
            "--work-dir",
            str(work_dir),
            "--json",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report
