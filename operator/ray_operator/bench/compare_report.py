"""The side-by-side table: each figure for "theirs" and "ours", every trial's value, the ratio.

A cell lists each trial's value in trial order ("155 s; 77 s"), "n/a" for a trial that could not
take it; the ratio is ours/theirs of the means over the trials that have a value (below 1: ours is
smaller, which means better for every figure but one that says "higher is better"). Shown as a
plain table, markdown or JSON, with the machine and the settings, like the benchmark's `Report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ray_operator.bench.report import Machine, aligned_table, format_number, json_document

Side = Literal["theirs", "ours"]
SIDES: tuple[Side, Side] = ("theirs", "ours")


@dataclass(slots=True)
class ComparedFigure:
    """One figure's values by side, one slot per trial (None: not taken)."""

    name: str
    unit: str
    values: dict[Side, list[float | None]]

    def cell(self, side: Side) -> str:
        """Each trial's value, e.g. "155 s; 77 s"."""
        return "; ".join(_with_unit(value, self.unit) for value in self.values[side])

    def ratio(self) -> float | None:
        """Mean of ours over mean of theirs (None when either has no value or theirs is 0)."""
        theirs, ours = (_mean(self.values[side]) for side in SIDES)
        if theirs is None or ours is None or theirs == 0:
            return None
        return ours / theirs

    def ratio_text(self) -> str:
        ratio = self.ratio()
        return "—" if ratio is None else format_number(ratio)


@dataclass(slots=True)
class Comparison:
    """Every compared figure of one run, in the order first recorded, and the circumstances."""

    machine: Machine
    settings: dict[str, Any]
    trials: int
    figures: dict[str, ComparedFigure] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def record(
        self, side: Side, trial: int, name: str, value: float | None, unit: str = ""
    ) -> None:
        """The value of figure `name` for `side` in `trial` (1-based)."""
        if not 1 <= trial <= self.trials:
            raise ValueError(f"trial {trial} is outside 1..{self.trials}")
        figure = self.figures.get(name)
        if figure is None:
            figure = ComparedFigure(name, unit, {side: [None] * self.trials for side in SIDES})
            self.figures[name] = figure
        figure.values[side][trial - 1] = value

    def note(self, side: Side, trial: int, text: str) -> None:
        self.notes.append(f"{side}, trial {trial}: {text}")

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(figure, theirs, ours, ours/theirs) for every figure."""
        return [
            (figure.name, figure.cell("theirs"), figure.cell("ours"), figure.ratio_text())
            for figure in self.figures.values()
        ]

    def table(self) -> str:
        """A plain-text table for the terminal, with the machine, settings and notes."""
        lines = aligned_table([("figure", "theirs", "ours", "ours/theirs"), *self.rows()])
        footer = [f"machine: {self.machine.describe()}", f"run: {self._settings_text('')}"]
        footer += [f"note: {note}" for note in self.notes]
        return "\n".join([*lines, "", *footer])

    def markdown(self) -> str:
        """A markdown table and the circumstances, for RESULTS.md and docs/benchmarks.md."""
        lines = ["| figure | theirs | ours | ours/theirs |", "|---|---|---|---|"]
        lines += [f"| {' | '.join(row)} |" for row in self.rows()]
        lines += [
            "",
            f"Machine: {self.machine.describe()}.",
            "",
            f"Run: {self._settings_text('`')}.",
        ]
        if self.notes:
            lines += ["", "Notes:", "", *(f"- {note}" for note in self.notes)]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        figures = [
            {
                "name": figure.name,
                "unit": figure.unit,
                "theirs": figure.values["theirs"],
                "ours": figure.values["ours"],
                "ours_over_theirs": figure.ratio(),
            }
            for figure in self.figures.values()
        ]
        return json_document(
            self.machine, self.settings, seconds=self.seconds, notes=self.notes, figures=figures
        )

    def _settings_text(self, quote: str) -> str:
        settings = ", ".join(f"{quote}{key}={value}{quote}" for key, value in self.settings.items())
        return f"{settings}; {self.seconds:.0f} s in all"


def _with_unit(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{format_number(value)} {unit}".rstrip()


def _mean(values: Sequence[float | None]) -> float | None:
    taken = [value for value in values if value is not None]
    return sum(taken) / len(taken) if taken else None
