"""Figures, their targets, and the three ways a run is shown: a table, JSON, and markdown.

A `Figure` is one measured number with its unit and, when the issue sets one, its `Target`; `met`
is decided here and nowhere else. Figures without a target are context (the ceiling, counts by
verb) and show "—" in the met column. `Machine` records where the figures were taken, because
they mean little without it.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Comparison = Literal["<=", "<", ">=", "=="]

_SYMBOLS: dict[str, str] = {"<=": "≤", "<": "<", ">=": "≥", "==": "="}


@dataclass(frozen=True, slots=True)
class Target:
    """A bound a figure must respect, e.g. `Target("<=", 3, "s")` for "≤ 3 s"."""

    comparison: Comparison
    value: float
    unit: str = ""

    def met(self, measured: float) -> bool:
        """Whether `measured` is within this target."""
        if self.comparison == "<=":
            return measured <= self.value
        if self.comparison == "<":
            return measured < self.value
        if self.comparison == ">=":
            return measured >= self.value
        return measured == self.value

    def __str__(self) -> str:
        return f"{_SYMBOLS[self.comparison]} {format_number(self.value)} {self.unit}".rstrip()


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number: which metric, what exactly, its value and unit, and its target."""

    metric: str
    """M1..M6."""
    name: str
    """What was measured, in a few words."""
    value: float | None
    """The measurement; None when it could not be taken (the note says why)."""
    unit: str = ""
    target: Target | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        """True/False against the target; None without a target or a value."""
        if self.target is None or self.value is None:
            return None
        return self.target.met(self.value)

    def measured_text(self) -> str:
        if self.value is None:
            return "n/a"
        return f"{format_number(self.value)} {self.unit}".rstrip()

    def met_text(self) -> str:
        return {True: "met", False: "MISSED", None: "—"}[self.met]


@dataclass(frozen=True, slots=True)
class Machine:
    """Where a run took place."""

    cpus: int
    memory_gib: float
    cpu_model: str
    kernel: str
    python: str
    kube_apiserver: str

    @classmethod
    def current(cls, *, kube_apiserver: str) -> Machine:
        return cls(
            cpus=os.cpu_count() or 0,
            memory_gib=_memory_gib(),
            cpu_model=_cpu_model(),
            kernel=platform.release(),
            python=platform.python_version(),
            kube_apiserver=kube_apiserver,
        )

    def describe(self) -> str:
        return (
            f"{self.cpus} CPUs ({self.cpu_model}), {self.memory_gib:.1f} GiB RAM, "
            f"Linux {self.kernel}, Python {self.python}, kube-apiserver {self.kube_apiserver}"
        )


@dataclass(slots=True)
class Report:
    """Every figure of one run, in the order taken, plus the circumstances."""

    machine: Machine
    settings: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, figure: Figure) -> None:
        self.figures.append(figure)

    def table(self) -> str:
        """A plain-text table for the terminal."""
        rows = [("", "figure", "measured", "target", "met")]
        rows += [
            (f.metric, f.name, f.measured_text(), str(f.target or ""), f.met_text())
            for f in self.by_metric()
        ]
        lines = aligned_table(rows)
        footer = [
            f"machine: {self.machine.describe()}",
            f"run: {self.seconds:.0f} s; "
            + ", ".join(f"{key}={value}" for key, value in self.settings.items()),
        ]
        footer += [f"note: {note}" for note in self.notes]
        footer += [f"{f.metric} {f.name}: {f.note}" for f in self.by_metric() if f.note]
        return "\n".join([*lines, "", *footer])

    def by_metric(self) -> list[Figure]:
        """The figures grouped M1..M6, each group in the order measured."""
        return sorted(self.figures, key=lambda figure: figure.metric)

    def markdown(self) -> str:
        """A markdown table (metric, target, measured, met) and the machine."""
        lines = ["| metric | figure | target | measured | met? |", "|---|---|---|---|---|"]
        details = []
        for figure in self.by_metric():
            lines.append(
                f"| {figure.metric} | {figure.name} | {figure.target or ''} | "
                f"{figure.measured_text()} | {figure.met_text()} |"
            )
            if figure.note:
                details.append(f"- {figure.metric} {figure.name}: {figure.note}")
        machine = self.machine
        lines += [
            "",
            f"Machine: `nproc` {machine.cpus}, {machine.memory_gib:.1f} GiB RAM, "
            f"{machine.cpu_model}, Linux {machine.kernel}, Python {machine.python}, "
            f"kube-apiserver {machine.kube_apiserver}.",
            "",
            "Run: "
            + ", ".join(f"`{key}={value}`" for key, value in self.settings.items())
            + f"; {self.seconds:.0f} s in all.",
        ]
        lines += [f"- {note}" for note in self.notes]
        if details:
            lines += ["", "Details:", "", *details]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """Everything, machine-readable."""
        figures = [
            {
                "metric": f.metric,
                "name": f.name,
                "value": f.value,
                "unit": f.unit,
                "target": str(f.target) if f.target else None,
                "met": f.met,
                "note": f.note,
            }
            for f in self.figures
        ]
        return json_document(
            self.machine, self.settings, seconds=self.seconds, notes=self.notes, figures=figures
        )


def aligned_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as lines of left-aligned columns, a rule of dashes under the first (the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def json_document(
    machine: Machine,
    settings: dict[str, Any],
    *,
    seconds: float,
    notes: list[str],
    figures: list[dict[str, Any]],
) -> str:
    """A run's figures with the machine, settings, duration and notes, as indented JSON."""
    return json.dumps(
        {
            "machine": asdict(machine),
            "settings": settings,
            "seconds": round(seconds, 1),
            "notes": notes,
            "figures": figures,
        },
        indent=2,
    )


def format_number(value: float) -> str:
    """Three significant digits at most, no exponent, no trailing zeros."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    magnitude = abs(value)
    digits = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3
    return f"{value:.{digits}f}"


def percentile(values: Sequence[float], fraction: float) -> float:
    """The `fraction` quantile by linear interpolation (numpy's default); values need not sort."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024**2
    return 0.0


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
