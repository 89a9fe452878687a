"""robfig/cron's own answers, read from robfig_cases.json (made by oracle/make_cases.py)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib

CASES_FILE = pathlib.Path(__file__).with_name("robfig_cases.json")


@dataclasses.dataclass(frozen=True)
class RobfigCase:
    schedule: str
    zone: str
    start: datetime.datetime
    error: str
    """robfig's parse error, or "" when it parsed the schedule."""
    activations: tuple[datetime.datetime, ...]
    """What stepping robfig's Next from `start` gave, stopping early at its "none"."""
    steps: int
    """How many steps were asked for: fewer activations than this means robfig found none."""

    @property
    def name(self) -> str:
        return f"{self.schedule!r} in {self.zone} after {self.start.isoformat()}"


def load_cases() -> list[RobfigCase]:
    return [
        RobfigCase(
            schedule=case["schedule"],
            zone=case["zone"],
            start=datetime.datetime.fromisoformat(case["start"]),
            error=case["error"],
            activations=tuple(
                datetime.datetime.fromtimestamp(second, datetime.UTC) for second in case["next"]
            ),
            steps=case["count"],
        )
        for case in json.loads(CASES_FILE.read_text())
    ]
